"""SGLang's default mem_fraction_static and chunked_prefill_size before 0.5.3, by release: what ServerArgs.__post_init__
derives when --mem-fraction-static / --chunked-prefill-size are not given, read in the sglang wheels (PyPI) 0.4.2.post4
through 0.5.2. From 0.5.3 SGLang derives the fraction from the MiB it reserves for the prefill chunk, the decode CUDA
graphs and the parallel size (ServerArgs._handle_gpu_memory_settings, later arg_groups/memory_hook.py
handle_gpu_memory_settings): the sglang stack's options.mem_fraction_static.auto, which k3plan prices from 0.5.3 on.

Before it, three forms:

  0.4.2 - 0.4.6.post1   a table by parallel size; from 0.4.5.post3 a GPU above 80 GiB gets (gpu - 13 GiB) / gpu
  0.4.6.post2 - 0.4.7   the table for a GPU of at most 80 GiB (by tp x pp), 0.88 above; above 96 GiB
                        min(f + 48 GiB x (1 - f) / gpu, (gpu - 18 GiB) / gpu); 0.4.7: 0.79 on a CUDA GPU above
                        180,000 MiB
  0.4.8 - 0.5.2         a flat reserve by GPU class (+ 4 GiB under DP attention), round((gpu - reserved) / gpu, 3)

``gpu`` is the GPU's memory.total in MiB (get_device_memory_capacity: nvidia-smi / rocm-smi), which k3plan's hardware
carries as its usable HBM. The pool rule these fractions feed is the same in every release read (model_runner.py
ModelRunner.profile_max_num_token: rest_memory = the free memory after loading - the free memory before it x (1 -
mem_fraction_static), max_total_num_tokens = rest_memory // a token's bytes), which engines/sglang/memory.py
sglang_kv_pool prices.

k3plan reads a post-release as its release (k3plan.engines.release): 0.4.5 is priced as the 0.4.5 wheel (the table
alone; 0.4.5.post3 gives a GPU above 80 GiB (gpu - 13 GiB) / gpu), 0.4.6 as 0.4.6.post2-0.4.6.post5 (0.4.6 and
0.4.6.post1 give a GPU above 80 GiB (gpu - 13 GiB) / gpu): the forms differ only above 80 GiB. Speculative decoding,
which moved these fractions too, is not priced before 0.5.14 (engines/sglang/spec.py SPEC_FROM), nor a multimodal
model's cut before 0.5.3 (none of the models k3plan serves through SGLang is multimodal to those releases).
"""

from __future__ import annotations

from k3plan.engines.release import Release

# the first release whose default fraction is the reserve derivation k3plan prices (the stack's auto fraction)
RESERVE_FORM_FROM: Release = (0, 5, 3)
RESERVE_FORM_SOURCE = (
    "sglang 0.5.3 wheel (PyPI), sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (reserved_mem = 512 + "
    "max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp_size x pp_size / 8 x 1024, DP attention's "
    "padding, at least 10 GiB above 60 GiB; mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3))"
)

FLAT_FROM: Release = (0, 4, 8)
HIGH_MEM_FROM: Release = (0, 4, 6)  # read as 0.4.6.post2's form (module docstring)
BIG_CUDA_FROM: Release = (0, 4, 7)

TABLE_SOURCE = (
    "sglang 0.4.2.post4, 0.4.3, 0.4.4 and 0.4.5 wheels (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__ "
    "('Set mem fraction static, which depends on the tensor parallelism size': 0.79 at tp_size >= 16, 0.81 >= 8, 0.85 "
    ">= 4, 0.87 >= 2, else 0.88)"
)
HIGH_MEM_SOURCE = (
    "sglang 0.4.6.post2-0.4.6.post5 wheels (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__ (gpu_mem <= "
    "81920: parallel_size = tp_size x pp_size, 0.79 at >= 16, 0.81 >= 8, 0.85 >= 4, 0.87 >= 2, else 0.88; above: 0.88; "
    "gpu_mem > 96 x 1024: min(f + 48 x 1024 x (1 - f) / gpu_mem, (gpu_mem - 1024 x 18) / gpu_mem), '15 GB + "
    "additional 3GB for cuda graph')"
)
BIG_CUDA_SOURCE = (
    "sglang 0.4.7 wheel (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__ (the 0.4.6.post2 form, and "
    "gpu_mem > 180 x 1000 and is_cuda(): 0.79)"
)
FLAT_SOURCE = (
    "sglang 0.4.8, 0.4.8.post1, 0.4.9, 0.4.9.post2, 0.4.9.post6, 0.4.10, 0.5.0rc0, 0.5.1 and 0.5.2 wheels (PyPI), "
    "sglang/srt/server_args.py ServerArgs.__post_init__ ('Set mem fraction static': parallel_size = tp_size x pp_size; "
    "reserved_mem (2.8 + parallel_size / 10) x 1024 below 35 GiB, (9.5 + parallel_size / 2) x 1024 below 90 GiB "
    "('H100, A100'), (12 + parallel_size / 2) x 1024 below 160 GiB ('H20', 'H200'), else 32 x 1024 ('B200, MI300'); "
    "+ 4 x 1024 with enable_dp_attention; mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3))"
)
CHUNK_SOURCES = (
    (
        (0, 4, 8),
        "sglang 0.4.8-0.5.2 wheels (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__ ('Set chunked prefill "
        "size': 2048 below 35 GiB, 8192 below 160 GiB, else 16384)",
    ),
    (
        (0, 4, 7),
        "sglang 0.4.7 wheel (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__ ('Set chunked prefill size': "
        "16384 above 180,000 MiB, 2048 below 25,000 MiB, else 8192)",
    ),
    (
        (0, 0, 0),
        "sglang 0.4.2.post4-0.4.6.post5 wheels (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__ ('Set "
        "chunked prefill size': 2048 below 25,000 MiB, else 8192)",
    ),
)


def _table(parallel: int) -> float:
    for at_least, frac in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if parallel >= at_least:
            return frac
    return 0.88


def era_fraction(
    release: Release, *, gpu_mib: float, tp_size: int, pp: int, dp_attention: bool, cuda: bool
) -> tuple[float, str] | None:
    """SGLang's default mem_fraction_static in ``release`` for a GPU of ``gpu_mib`` MiB (memory.total), ``tp_size``
    (--tp-size: every GPU of a stage under DP attention) x ``pp``, with the source; None from 0.5.3
    (``RESERVE_FORM_FROM``: the stack's reserve derivation)."""
    if release >= RESERVE_FORM_FROM:
        return None
    parallel = tp_size * pp
    if release >= FLAT_FROM:
        gib = 1024
        if gpu_mib < 35 * gib:
            reserved = (2.8 + parallel / 10) * gib
        elif gpu_mib < 90 * gib:
            reserved = (9.5 + parallel / 2) * gib
        elif gpu_mib < 160 * gib:
            reserved = (12 + parallel / 2) * gib
        else:
            reserved = 32.0 * gib
        if dp_attention:
            reserved += 4 * gib
        return round((gpu_mib - reserved) / gpu_mib, 3), FLAT_SOURCE
    if release >= HIGH_MEM_FROM:
        frac = _table(parallel) if gpu_mib <= 81920 else 0.88
        if release >= BIG_CUDA_FROM and gpu_mib > 180 * 1000 and cuda:
            return 0.79, BIG_CUDA_SOURCE
        if gpu_mib > 96 * 1024:
            frac = min(frac + 48 * 1024 * (1 - frac) / gpu_mib, (gpu_mib - 1024 * 18) / gpu_mib)
        return frac, (BIG_CUDA_SOURCE if release >= BIG_CUDA_FROM else HIGH_MEM_SOURCE)
    return _table(tp_size), TABLE_SOURCE


def era_chunk(release: Release, *, gpu_mib: float) -> tuple[int, str] | None:
    """SGLang's default chunked_prefill_size in ``release`` for a GPU of ``gpu_mib`` MiB, with the source; None from
    0.5.3 (the stack's GPU classes)."""
    if release >= RESERVE_FORM_FROM:
        return None
    first, source = next(c for c in CHUNK_SOURCES if release >= c[0])
    if first >= FLAT_FROM:
        chunk = 2048 if gpu_mib < 35 * 1024 else 8192 if gpu_mib < 160 * 1024 else 16384
    elif first >= BIG_CUDA_FROM and gpu_mib > 180_000:
        chunk = 16384
    else:
        chunk = 2048 if gpu_mib < 25_000 else 8192
    return chunk, source
