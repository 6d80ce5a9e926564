"""vLLM's CUDA-graph memory estimate at start (issue 47): which graphs the profiler captures, read from the code, and
what they hold, transferred from a public log because the code only measures it. Read at upstream vLLM c621af16
(2026-06-14, carried in yhfgyyf/vllm-deepseek-v4-sm89's history; that fork's head b12eeaa2 adds exact spec-decode
sizes for 1..32 requests, jasl 736eac307, which upstream c621af16 does not have):

- capture sizes (vllm/config/vllm.py VllmConfig._set_cudagraph_sizes): unless the compilation config gives them,
  ``max = min(max_num_seqs x (1 + num_speculative_tokens) x 2, 512)`` (1024 on sm_10x from 0.28.0, and from 0.29.0
  the uniform decode sizes appended: BLACKWELL_CEILING_FROM, UNIFORM_DECODE_FROM; or its max_cudagraph_capture_size),
  cut to max_num_batched_tokens; the sizes are 1, 2, 4, then multiples of 8 below 256, then multiples of 16 up to max, plus
  max_num_batched_tokens where it fits under max; --enforce-eager or cudagraph_mode NONE captures nothing; with a
  FULL decode mode and 1 + k > 1 the sizes are rounded up to multiples of 1 + k, those above max dropped
  (vllm/config/compilation.py CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, sequence parallelism off);
- graphs a mode (vllm/v1/cudagraph_dispatcher.py CudagraphDispatcher.initialize_cudagraph_keys): the mixed mode
  (PIECEWISE in FULL_AND_PIECEWISE and PIECEWISE, FULL in FULL) one graph a capture size; a FULL decode mode with a
  separate routine (FULL_AND_PIECEWISE, FULL_DECODE_ONLY) one FULL graph a size with
  ``1 + k <= size <= (1 + k) x max_num_seqs``;
- the estimate (vllm/v1/worker/gpu_model_runner.py GPUModelRunner.profile_cudagraph_memory): for each mode,
  mem_get_info around warming up and capturing its two largest sizes into a temporary pool; the estimate is the
  largest first capture over the modes plus, for each mode, (graphs - 1) x its second capture, at least 1 MiB a
  graph (``max(mem_samples[1], 1 << 20)``); subtracted from the KV budget (vllm/v1/worker/gpu_worker.py
  Worker.determine_available_memory) unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0, from 0.20.0 (0.18.0-0.19.x
  only with it =1, none before 0.18.0: ``ESTIMATE_DEFAULT_FROM``); 0 on ROCm before 0.26.0
  (not profiled: the 0.24.0 / 0.25.0 wheels gate it on current_platform.is_cuda()), profiled there from 0.26.0
  (ROCM_PROFILED_FROM).
  Each capture runs the drafter too (GPUModelRunner._dummy_run calls drafter.dummy_run), so a speculative drafter's
  graph memory is in the same estimate.

What a capture takes is measured, not allocated by a rule the code states: the first capture's pool holds the largest
batch's intermediates, each later one its retained outputs and the driver's graph objects. So the bytes are transferred
from a log that prints the estimate for DeepSeek-V4 (k3plan/evidence/vllm_dsv4_start_logs.yaml), by the graph count
of the same mode; the log gives only the total T over n graphs, so the per-graph split is a band: with every later
capture as large as the first, a graph costs T / n (the value priced); with later captures at the code's 1 MiB
floor, the first capture is T - (n - 1) MiB (the band's other end: above the priced value where the command has fewer
graphs than the log, below it where it has more).
"""

from __future__ import annotations

import json

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen
from k3plan.units import GiB

CUDAGRAPH_SOURCE = (
    "vllm-project/vllm@c621af16 vllm/config/vllm.py VllmConfig._set_cudagraph_sizes, vllm/config/compilation.py "
    "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, vllm/v1/cudagraph_dispatcher.py CudagraphDispatcher.initialize_cudagraph_keys, vllm/v1/worker/gpu_model_runner.py "
    "GPUModelRunner.profile_cudagraph_memory, vllm/v1/worker/gpu_worker.py Worker.determine_available_memory"
)
MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# vLLM's default at optimization level 2 (vllm/config/vllm.py OPTIMIZATION_LEVEL_TO_CONFIG); DeepSeek-V4 takes the
# breakable-graph PIECEWISE path (VLLM_USE_BREAKABLE_CUDAGRAPH, auto-enabled: the model has no @support_torch_compile)
DEFAULT_MODE = "FULL_AND_PIECEWISE"
MAX_DEFAULT_CAPTURE = 512
MIN_PER_GRAPH = 1 << 20  # profile_cudagraph_memory: 'Use at least 1 MiB per graph for driver overhead'


class CompilationRead(Frozen):
    """What a command's --compilation-config / --enforce-eager set for the graphs (None: vLLM's default)."""

    __coerce__ = False

    mode: str
    max_capture_size: int | None = None
    capture_sizes: tuple[int, ...] | None = None


def read_compilation(text: str | None, *, enforce_eager: bool = False) -> CompilationRead:
    """--compilation-config's JSON as vLLM's CompilationConfig takes the graph fields (cudagraph_mode, by name or
    vLLM's tuple spelling is not read; max_cudagraph_capture_size; cudagraph_capture_sizes); --enforce-eager sets
    cudagraph_mode NONE (VllmConfig.__post_init__)."""
    if enforce_eager:
        return CompilationRead(mode="NONE")
    if not text:
        return CompilationRead(mode=DEFAULT_MODE)
    cfg = _config_json(text)
    mode = str(cfg.get("cudagraph_mode", DEFAULT_MODE)).upper()
    if mode not in MODES:
        raise K3PlanError(f"--serve: cudagraph_mode {mode!r} is not one of vLLM's: {', '.join(MODES)}")
    size = cfg.get("max_cudagraph_capture_size")
    sizes = cfg.get("cudagraph_capture_sizes")
    if sizes is not None and not isinstance(sizes, list):
        raise K3PlanError(f"--serve: cudagraph_capture_sizes {sizes!r}: expected a list of whole numbers")
    return CompilationRead(
        mode=mode,
        max_capture_size=_size("max_cudagraph_capture_size", size) if size is not None else None,
        capture_sizes=tuple(sorted({_size("cudagraph_capture_sizes", s) for s in sizes})) if sizes else None,
    )


def _size(field: str, value) -> int:
    """A CUDA-graph size of the compilation config: a whole number of at least 1 (CompilationConfig's int fields)."""
    from k3plan.engines.serve_values import whole_number

    return whole_number(field, value)


def _config_json(text: str | None) -> dict:
    """--compilation-config's JSON object ({} when not given)."""
    from k3plan.engines.serve_values import json_object

    return json_object("--compilation-config", text) if text else {}


def _exclusive(cfg: dict, field: str, flag: str) -> None:
    """EngineArgs.create_engine_config refuses a flag beside the compilation config's own field ('<field> and
    compilation_config.<field> are mutually exclusive'; vllm/engine/arg_utils.py, read in
    yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2)."""
    if cfg.get(field) is not None:
        raise K3PlanError(
            f"--serve: {flag} beside --compilation-config's {field}: vLLM refuses both ('{field} and "
            f"compilation_config.{field} are mutually exclusive', vllm/engine/arg_utils.py "
            "EngineArgs.create_engine_config); give one"
        )


def with_max_capture(text: str | None, top: int) -> str:
    """--max-cudagraph-capture-size N: the compilation config's max_cudagraph_capture_size (EngineArgs)."""
    cfg = _config_json(text)
    _exclusive(cfg, "max_cudagraph_capture_size", "--max-cudagraph-capture-size")
    return json.dumps({**cfg, "max_cudagraph_capture_size": top})


def with_capture_sizes(text: str | None, sizes: str) -> str:
    """--cudagraph-capture-sizes 1 2 4 8: the compilation config's cudagraph_capture_sizes (EngineArgs)."""
    try:
        got = [int(x) for x in sizes.replace(",", " ").split()]
    except ValueError:
        raise K3PlanError(f"--serve: --cudagraph-capture-sizes {sizes!r}: expected whole numbers") from None
    if not got or min(got) < 1:
        raise K3PlanError(f"--serve: --cudagraph-capture-sizes {sizes!r}: expected sizes of at least 1")
    cfg = _config_json(text)
    _exclusive(cfg, "cudagraph_capture_sizes", "--cudagraph-capture-sizes")
    return json.dumps({**cfg, "cudagraph_capture_sizes": got})


class CudagraphPlan(Frozen):
    """The graphs vLLM's profiler captures: the sizes, and the graphs of each mode."""

    __coerce__ = False

    mode: str
    sizes: tuple[int, ...]
    piecewise: int
    full: int
    how: str


# The default ceiling by release and GPU (VllmConfig._set_cudagraph_sizes): 1024 on a GPU of capability family 10
# (current_platform.is_device_capability_family(100): B200 / GB200 sm_100, B300 / GB300 sm_103) from 0.28.0
# (vllm-project/vllm#49390; 512 in the 0.27.0 wheel), 512 elsewhere. From 0.29.0, where the ceiling is vLLM's default
# (no max_cudagraph_capture_size), the uniform decode sizes are appended to the grid: with a drafter n x (1 + k) for
# each request count n of the same 1, 2, 4, 8-step, 16-step grid up to max_num_seqs (at most the ceiling's count),
# within the ceiling; without one max_num_seqs itself; each within max_num_batched_tokens (the dynamic speculative
# schedule's narrower tiers are not read). Read in the 0.27.0, 0.28.0, 0.29.0, 0.30.0 and 0.31.0 wheels (PyPI),
# vllm/config/vllm.py VllmConfig._set_cudagraph_sizes.
BLACKWELL_CEILING = 1024
BLACKWELL_CEILING_FROM = (0, 28, 0)
UNIFORM_DECODE_FROM = (0, 29, 0)


def default_ceiling(*, hardware: str, release: tuple[int, int, int] | None) -> int:
    """vLLM's default capture ceiling on ``hardware`` at ``release`` (None: the code this module cites, 512)."""
    from k3plan.engines.vllm.attention_config import SM100_FAMILY

    blackwell = hardware in SM100_FAMILY and release is not None and release >= BLACKWELL_CEILING_FROM
    return BLACKWELL_CEILING if blackwell else MAX_DEFAULT_CAPTURE


def _grid(top: int) -> list[int]:
    """1, 2, 4, then multiples of 8 below 256, then multiples of 16 up to ``top``."""
    sizes = [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        sizes += range(8, min(top + 1, 256), 8)
    if top >= 256:
        sizes += range(256, top + 1, 16)
    return sizes


def capture_sizes(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    read: CompilationRead,
    ceiling: int = MAX_DEFAULT_CAPTURE,
    release: tuple[int, int, int] | None = None,
) -> tuple[int, ...]:
    """VllmConfig._set_cudagraph_sizes, then the spec-decode rounding (module docstring); ``ceiling``: the default
    ceiling (``default_ceiling``), ``release``: where the uniform decode sizes are appended (``UNIFORM_DECODE_FROM``)."""
    if read.mode == "NONE":
        return ()
    q = 1 + num_speculative_tokens
    top = read.max_capture_size
    uniform: list[int] = []
    if top is None:
        top = min(max_num_seqs * q * 2, ceiling)
        if release is not None and release >= UNIFORM_DECODE_FROM:
            if q > 1:
                reqs = min(max_num_seqs, ceiling)
                uniform = [n * q for n in {*_grid(reqs), reqs} if n * q <= top]
            elif max_num_seqs <= top:
                uniform = [max_num_seqs]
    top = min(max_num_batched_tokens, top)
    if read.capture_sizes is not None:
        sizes = [s for s in read.capture_sizes if s <= max_num_batched_tokens]
    else:
        sizes = _grid(top)
        if max_num_batched_tokens <= top:
            sizes.append(max_num_batched_tokens)
        sizes += [s for s in uniform if s <= max_num_batched_tokens]
    if q > 1 and read.mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE") and sizes:
        top = max(sizes)
        rounded = {-(-s // q) * q for s in sizes if -(-s // q) * q <= top}
        return tuple(sorted(rounded or ({q} if q <= top else set())))
    return tuple(sorted(set(sizes)))


def cudagraph_plan(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    read: CompilationRead,
    ceiling: int = MAX_DEFAULT_CAPTURE,
    release: tuple[int, int, int] | None = None,
) -> CudagraphPlan:
    """The graphs of each mode (CudagraphDispatcher.initialize_cudagraph_keys, module docstring); ``ceiling`` and
    ``release`` as ``capture_sizes`` takes them."""
    sizes = capture_sizes(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        num_speculative_tokens=num_speculative_tokens,
        read=read,
        ceiling=ceiling,
        release=release,
    )
    mixed = {"PIECEWISE": "PIECEWISE", "FULL_AND_PIECEWISE": "PIECEWISE", "FULL": "FULL"}.get(read.mode)
    piecewise = len(sizes) if mixed == "PIECEWISE" else 0
    full = len(sizes) if mixed == "FULL" else 0
    if read.mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):  # a separate FULL decode routine
        q = 1 + num_speculative_tokens
        full = sum(1 for s in sizes if q <= s <= q * max_num_seqs)
    largest = sizes[-1] if sizes else 0
    how = (
        f"cudagraph_mode {read.mode}: {len(sizes)} capture sizes up to {largest} (max_num_seqs {max_num_seqs:,} x "
        f"(1 + {num_speculative_tokens}) x 2, at most {ceiling} and max_num_batched_tokens "
        f"{max_num_batched_tokens:,}, unless the compilation config sets them"
        + (", with the uniform decode sizes" if release is not None and release >= UNIFORM_DECODE_FROM else "")
        + f"): {piecewise} PIECEWISE and {full} FULL "
        f"graphs ({CUDAGRAPH_SOURCE})"
    )
    return CudagraphPlan(mode=read.mode, sizes=sizes, piecewise=piecewise, full=full, how=how)


class CudagraphEstimate(Frozen):
    """The CUDA-graph estimate vLLM subtracts, as a band; ``bytes`` is the value priced (T / n a graph), ``high_bytes``
    the band's upper end (the priced value itself where the command has more graphs than the log)."""

    __coerce__ = False

    bytes: int
    high_bytes: int
    source: str


def cudagraph_estimate(
    plan: CudagraphPlan,
    *,
    log_piecewise_bytes: int,
    log_piecewise_graphs: int,
    log_source: str,
    differs: str,
    rocm: bool = False,
    rocm_source: str = "",
    piecewise_captured: bool = True,
    log_full: tuple[int, int] | None = None,
) -> CudagraphEstimate:
    """vLLM's CUDA-graph estimate for ``plan``: the PIECEWISE graphs transferred from a log's PIECEWISE estimate
    ``log_piecewise_bytes`` over ``log_piecewise_graphs`` graphs (a band, module docstring), the FULL graphs at the
    code's 1 MiB floor a graph after the first (no public V4 log prints a FULL estimate; the first FULL capture
    overlays the first PIECEWISE one where both run: profile_cudagraph_memory takes the larger first capture).
    ``rocm``: 0 (Worker.determine_available_memory profiled graphs on CUDA only before 0.26.0); ``rocm_source``: a ROCm
    release that profiles them, the CUDA log's bytes standing for its graphs (said so). ``piecewise_captured`` False:
    the PIECEWISE sizes capture nothing (a model without @support_torch_compile and breakable graphs off,
    ``breakable_graphs``), each at the code's 1 MiB floor. ``log_full``: a log's FULL estimate and its graph count
    (ROCm's record), transferred as the PIECEWISE one is, where the code's 1 MiB floor stood."""
    if rocm or plan.mode == "NONE" or not plan.sizes:
        why = (
            "ROCm: vLLM before 0.26.0 does not profile graphs there"
            if rocm
            else "no graphs captured (cudagraph_mode NONE)"
        )
        return CudagraphEstimate(bytes=0, high_bytes=0, source=f"0: {why} ({CUDAGRAPH_SOURCE})")
    n, t = log_piecewise_graphs, log_piecewise_bytes
    gib = GiB
    low = high = 0
    if plan.piecewise and piecewise_captured:
        low, high = _transferred(plan.piecewise, t, n)
        pw_said = (
            f"{plan.piecewise} PIECEWISE graphs transferred from {log_source} ({t / gib:.2f} GiB over {n} PIECEWISE "
            f"graphs; differs in: {differs}): {plan.piecewise} x {t / gib:.2f} / {n} GiB, up to the first capture "
            f"{t / gib:.2f} - ({n} - 1) MiB + {max(plan.piecewise - 1, 0)} MiB"
        )
    else:
        low = high = plan.piecewise * MIN_PER_GRAPH
        pw_said = f"{plan.piecewise} PIECEWISE graphs at the code's 1 MiB floor a graph" + (
            " (they capture nothing: the model has no @support_torch_compile and breakable graphs are off)"
            if plan.piecewise
            else ""
        )
    if plan.full and log_full is not None:
        tf, nf = log_full
        full_low, full_high = _transferred(plan.full, tf, nf)
        full_said = (
            f"{plan.full} FULL graphs transferred from {log_source} ({tf / gib:.2f} GiB over {nf} FULL graphs): "
            f"{plan.full} x {tf / gib:.2f} / {nf} GiB ({full_low / gib:.2f} GiB)"
        )
    else:
        full_low = full_high = max(plan.full - 1, 0) * MIN_PER_GRAPH if plan.full else 0
        if plan.full and not (plan.piecewise and piecewise_captured):
            # the first FULL capture, no PIECEWISE one to overlay: at least 1 MiB too
            full_low = full_high = full_low + MIN_PER_GRAPH
        full_said = (
            f"{plan.full} FULL graphs at the code's 1 MiB floor a graph ({full_low / 2**20:.0f} MiB; no public V4 "
            "log on this vendor prints a FULL estimate)"
        )
    priced, other = low + full_low, high + full_high
    # the band's ends: the priced T / n a graph is its lower end where the command has fewer graphs than the log,
    # its upper end where it has more (the first capture then the rest at the 1 MiB floor is the smaller)
    lo, hi = min(priced, other), max(priced, other)
    source = (
        f"vLLM's CUDA-graph estimate, band {lo / gib:.2f}-{hi / gib:.2f} GiB, {priced / gib:.2f} priced (every later "
        f"capture as large as the first): {pw_said}; + {full_said}; {plan.how}"
        + (f"; on ROCm: {rocm_source}" if rocm_source else "")
    )
    return CudagraphEstimate(bytes=priced, high_bytes=hi, source=source)


def _transferred(graphs: int, total: int, logged_graphs: int) -> tuple[int, int]:
    """A log's estimate ``total`` over ``logged_graphs`` graphs of a mode, carried to ``graphs`` of it, as (priced,
    other end): every capture as large as the first (T / n a graph, priced), and later captures at the code's 1 MiB
    floor (the first holds the rest), the band's upper end where ``graphs`` < ``logged_graphs``, its lower where more."""
    proportional = graphs * total // logged_graphs
    first_then_floor = total - (logged_graphs - 1) * MIN_PER_GRAPH + (graphs - 1) * MIN_PER_GRAPH
    return proportional, first_then_floor


# Not priced (scored, session 51): the first FULL capture sized from the code. In the 0.20.0 and 0.20.2 wheels (PyPI)
# profile_cudagraph_memory empties the cache, then for each mode (PIECEWISE first, CudagraphDispatcher.get_capture_descs)
# warms its largest size up eagerly (cudagraph_num_of_warmups 1, vllm/config/vllm.py) and captures it into one profiling
# pool. PyTorch's torch.cuda.graph empties the cache again before capture_begin (torch/cuda/graphs.py graph.__enter__),
# so the eager warmup's blocks are not in the sample, and a graph keeps its output only as a weak reference
# (compilation/cuda_graph.py CUDAGraphWrapper), so a later capture reuses the pool: its sample is the driver's graph
# memory, which no code sizes (the 1 MiB floor). With no PIECEWISE capture before it (FULL_DECODE_ONLY, FULL), the first
# FULL sample is then the pool's peak, the decode forward's largest live set at the largest size: for V4 the indexer's
# decode logits [tokens, max_model_len // 4] float32 (model_executor/layers/sparse_attn_indexer.py decode path,
# utils/deep_gemm.py fp8_fp4_paged_mqa_logits, layers/deepseek_v4_attention.py max_model_len // compress_ratio) beside
# the CSA layer's live set (dsv4_workspace.dsv4_indexer_live), 0.47 GiB at 512 tokens and 800K on V4-Pro TP 8: 0.52
# GiB for 51 graphs where the floor gives 0.05. Over the vLLM cases it moves three estimates (vllm-kamra-dsv4-pro-h200-
# tp8-ep-800k's pool +7.24 -> +6.77 GiB, 4.66x logged: 6.27x -> 6.17x; the two verdict-only FULL_DECODE_ONLY starts,
# vllm-recipes-381-dsv4-pro-h200-dp8-800k 0.05 -> 0.64 and vllm-recipes-dsv4-flash-h200-pd-decode 0.05 -> 0.66 GiB, still
# STARTS) and no verdict: 11 of 50 pools within 3% and 100 of 109 verdicts right before and after, so not adopted (a
# term enters only where it raises either count). The PIECEWISE first capture (breakable graphs from 0.26.0) holds the
# graph pieces' pool, V4's attention running eagerly between them: not traced, so the A6000 log stays transferred. Taking
# the same first FULL capture where it exceeds the transfer's T / n (FULL_AND_PIECEWISE, V4) moves eight estimates
# 0.02-0.59 GiB (vllm-mirothinker-dsv4-pro-h200-tp8-graphs-oom 2.49 -> 3.08 GiB, still STARTS; vllm#51454's B200
# concurrencies 20.47x -> 20.43x against 20.43x and 19.57x -> 19.53x against 19.61x; vllm#51041 912K 0.02 closer) and
# no count either.

# Not priced: from 0.32.0 a YOCO model (DeepSeek-V4.1) also captures its decoder replay layers in CUDA graphs of their
# own by default (CompilationConfig.cudagraph_decoder_replay True; decoder_replay_cudagraph_capture_sizes multiples of
# the sliding window: vllm 0.32.0 wheel (PyPI), vllm/config/compilation.py); their share of the estimate is in no log.

# TRANSFER_RECORD: the public log whose CUDA-graph estimate is transferred (k3plan/evidence/vllm_dsv4_start_logs.yaml):
# the only one that prints vLLM's estimate for DeepSeek-V4 with the graph count it covers. The NVIDIA figures read since (the evidence
# file's records from inferencex-2707 on) are the graphs' memory at capture, not the estimate: InferenceX#2707 (B200
# TP8, V4-Pro, 0.88 / 2.05 / 3.03 GiB over 9 / 37 / 60 graphs, about 0.04 GiB a graph of either mode after a 0.5 GiB
# first capture), vllm#49390 (B300, V4-Flash DSpark 7: 4.88 GiB over 160, 0.03 a graph) and InferenceX#3321's prose
# '~22 GiB' (GB300 TP2, V4.1-Flash, 160 graphs; the case it failed, so not transferred). They say a FULL decode graph
# holds about what a PIECEWISE one does at capture; the estimate vLLM subtracts extrapolates the FULL graphs from its
# second sample, at least 1 MiB a graph, which no NVIDIA log prints. Pricing the FULL graphs as PIECEWISE ones (the A6000
# figure a graph) was scored over the logged NVIDIA V4 / V4.1 cases and not adopted: it moves vllm#51041's two H20
# pools 0.47 GiB toward their logs (of 4.29 / 4.02 over, a remainder their gaps lay to other terms), InferenceX#3310's
# 0.05 and #3321's c128 3.75 (of 104), but InferenceX#3216's B200 pool 0.04 away and both vllm#51454 B200 concurrencies
# away (20.54x -> 20.30x against 20.43x, 19.58x -> 19.34x against 19.61x), the only cases whose figure pins the
# estimate to within a percent
TRANSFER_RECORD = "vllm-50576-a6000-tp4-piecewise"
ESTIMATE_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
# The estimate by release: Worker.determine_available_memory first calls profile_cudagraph_memory in 0.18.0 (absent
# from the 0.16.0, 0.17.0 and 0.17.1 wheels), and subtracts it only where ESTIMATE_ENV is set (envs.py default "0" in
# 0.18.0; Red Hat's 0.19.0 start of DeepSeek-R1 holds 0.18.0's pool to the cent, tests/engines/cases/
# vllm-kamra-r1-0528-h200-tp8-8k-v019); the 0.20.0 wheel's default is "1" (and 0.33.0's), so from 0.20.0 it is subtracted
# unless ESTIMATE_ENV=0 (read in the 0.16.0, 0.17.0, 0.17.1, 0.18.0 and 0.20.0 wheels (PyPI), vllm/envs.py,
# vllm/v1/worker/gpu_worker.py)
ESTIMATE_PROFILED_FROM = (0, 18, 0)
ESTIMATE_DEFAULT_FROM = (0, 20, 0)
ESTIMATE_DEFAULT_SOURCE = (
    "vllm 0.18.0 / 0.20.0 wheels (PyPI): vllm/v1/worker/gpu_worker.py Worker.determine_available_memory "
    "(profile_cudagraph_memory from 0.18.0, subtracted as cudagraph_memory_estimate_applied), vllm/envs.py "
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default '0' in 0.18.0, '1' from 0.20.0)"
)
# From 0.26.0 the worker profiles the graphs on ROCm too: Worker.determine_available_memory calls
# profile_cudagraph_memory under current_platform.is_cuda_alike() ("ROCm is included: #44825 moved the profiler to
# torch.accelerator.get_memory_info"), where 0.24.0 and 0.25.0 call it under is_cuda() ("Skip on ROCm/HIP/XPU");
# read in the 0.24.0, 0.25.0, 0.26.0, 0.27.0, 0.28.0 and 0.33.0 wheels (PyPI), vllm/v1/worker/gpu_worker.py. What a
# graph holds there is ROCm's own figure (SemiAnalysisAI/InferenceX#3068: 18.71 GiB of PIECEWISE and 19.40 GiB of FULL
# graphs on an MI355X, 0.23 and 0.30 GiB a graph, where the CUDA log's PIECEWISE graph holds 0.05 and a FULL one the
# code's 1 MiB floor), transferred by each mode's graph count
ROCM_PROFILED_FROM = (0, 26, 0)
ROCM_PROFILED_SOURCE = (
    "vllm 0.26.0 wheel (PyPI) vllm/v1/worker/gpu_worker.py Worker.determine_available_memory (profile_cudagraph_memory "
    "under current_platform.is_cuda_alike(): 'ROCm is included: #44825'; is_cuda() in the 0.24.0 / 0.25.0 wheels); "
    "the bytes a graph holds transferred from ROCm's own figure (ROCM_TRANSFER_RECORD), PIECEWISE and FULL by mode"
)


# DeepSeek-V4 and V4.1 carry no @support_torch_compile, so their PIECEWISE graphs exist only as breakable CUDA graphs
# (vllm/compilation/breakable_cudagraph.py; without them the PIECEWISE sizes run eagerly and capture nothing).
# VLLM_USE_BREAKABLE_CUDAGRAPH=1 / 0 decides where set; unset, vLLM turns it on by architecture (VllmConfig
# __post_init__ / _maybe_enable_breakable_cudagraph): DeepseekV4ForCausalLM in 0.26.0-0.28.0's list on any platform
# (DeepSeek-V4.1 not in it), 0.29.0's DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES (V4, not V4.1; on ROCm less
# DeepSeek-V3.2 only), from 0.30.0 V4 and V4.1 on CUDA and V4.1 alone on ROCm
# (default_breakable_cudagraph_architectures: "Breakable CUDA graphs currently regress performance on ROCm ...
# DeepseekV41ForCausalLM cannot torch.compile"); read in the 0.26.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0 and 0.33.0 wheels
BREAKABLE_ENV = "VLLM_USE_BREAKABLE_CUDAGRAPH"
BREAKABLE_V41_FROM = (0, 30, 0)
BREAKABLE_ROCM_V4_UNTIL = (0, 30, 0)
BREAKABLE_SOURCE = (
    "vllm 0.26.0-0.33.0 wheels (PyPI), vllm/config/vllm.py VllmConfig._maybe_enable_breakable_cudagraph / "
    "default_breakable_cudagraph_architectures"
)


def breakable_graphs(*, v41: bool, vendor: str, release: tuple[int, int, int] | None, env: dict[str, str]) -> bool:
    """Whether vLLM captures DeepSeek-V4 (``v41`` False) or V4.1's PIECEWISE sizes as breakable graphs (above);
    ``release`` None: the code this module cites, which auto-enables them."""
    if BREAKABLE_ENV in env:
        return env[BREAKABLE_ENV].strip() == "1"
    if release is None:
        return True
    if v41:
        return release >= BREAKABLE_V41_FROM
    return vendor == "nvidia" or release < BREAKABLE_ROCM_V4_UNTIL


# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py GPUModelRunner.profile_cudagraph_memory) returns 0 before 0.29.0
# ('NOTE(woosuk): It is TBD whether we keep this API or not', read in the 0.25.0, 0.26.0, 0.27.0 and 0.28.0 wheels),
# so the worker subtracts no graph estimate for a command it runs; from 0.29.0 it profiles them
# (v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory: the PIECEWISE, encoder and speculator graphs measured,
# the FULL graphs extrapolated from two samples at least 1 MiB a graph; read in the 0.29.0, 0.30.0, 0.31.0 and 0.33.0
# wheels). InferenceX#2707's three B200 points agree: the graphs grew 2.15 GiB at capture, the KV cache stayed 23.56
# GiB (k3plan/evidence/vllm_dsv4_start_logs.yaml). Which runner runs a command: engines/vllm/releases.py
# model_runner_v2 (VllmConfig.use_v2_model_runner by release)
V2_PROFILED_FROM = (0, 29, 0)
V2_SOURCE = (
    "vllm 0.25.0-0.28.0 wheels (PyPI) vllm/v1/worker/gpu/model_runner.py GPUModelRunner.profile_cudagraph_memory "
    "(returns 0), vllm/config/vllm.py VllmConfig.use_v2_model_runner; profiled from the 0.29.0 wheel "
    "(v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory)"
)


def v2_unprofiled(
    *, spec_method: str | None, v41: bool, vendor: str, release: tuple[int, int, int] | None, env: dict[str, str]
) -> str | None:
    """Why Model Runner V2 runs the command before it profiled its graphs (``V2_PROFILED_FROM``, comment above), or
    None: V1 runs it, or the release profiles them. Which runner: engines/vllm/releases.py model_runner_v2 (the one
    rule the windowed groups' batches in flight read too). ``release`` None: the code this module cites."""
    from k3plan.engines.vllm.releases import model_runner_v2

    if release is not None and release >= V2_PROFILED_FROM:
        return None
    on, why = model_runner_v2(release=release, env=env, spec_method=spec_method, vendor=vendor, v4=not v41)
    return why if on else None


# ROCm's graph memory: the one public figure for the DeepSeek-V4 family (the evidence file's last record), PIECEWISE
# and FULL by mode, transferred by each mode's graph count where a ROCm release profiles the graphs
ROCM_TRANSFER_RECORD = "inferencex-3068-mi355x-tp4-dspark"


def serve_estimate(
    read: CompilationRead | None,
    *,
    dsv4: bool,
    vendor: str,
    env: dict[str, str],
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    release: tuple[int, int, int] | None = None,
    v41: bool = False,
    spec_method: str | None = None,
    hardware: str = "",
) -> CudagraphEstimate | None:
    """The estimate vLLM's GPU worker subtracts for a serve command's graphs, or None where k3plan has no evidence
    to price it (a model other than DeepSeek-V4: no public log prints its estimate; the pool's source says so).
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`` turns the subtraction off (gpu_worker.py). On ROCm the worker
    profiles graphs from 0.26.0 (``ROCM_PROFILED_FROM``); ``release`` None: the code this module cites (c621af16,
    before it), so none. ``spec_method``: the command's drafter (``v2_unprofiled``: DSpark runs on Model Runner V2,
    which subtracts no estimate before 0.29.0)."""
    if read is None or not dsv4:
        return None
    if env.get(ESTIMATE_ENV, "1").strip() in ("0", "false", "False"):
        return CudagraphEstimate(
            bytes=0, high_bytes=0, source=f"0: {ESTIMATE_ENV}=0, the estimate is not subtracted ({CUDAGRAPH_SOURCE})"
        )
    if release is not None and release < ESTIMATE_DEFAULT_FROM:
        asked = env.get(ESTIMATE_ENV, "").strip() in ("1", "true", "True")
        if release < ESTIMATE_PROFILED_FROM or not asked:
            why = (
                "the worker has no CUDA-graph estimate before 0.18.0"
                if release < ESTIMATE_PROFILED_FROM
                else f"0.18.0-0.19.x profile the graphs but subtract the estimate only with {ESTIMATE_ENV}=1"
            )
            return CudagraphEstimate(bytes=0, high_bytes=0, source=f"0: {why} ({ESTIMATE_DEFAULT_SOURCE})")
    v2 = v2_unprofiled(spec_method=spec_method, v41=v41, vendor=vendor, release=release, env=env)
    if v2 is not None and read.mode != "NONE":
        return CudagraphEstimate(
            bytes=0,
            high_bytes=0,
            source=f"0: Model Runner V2 runs the command ({v2}), and before 0.29.0 its profile_cudagraph_memory "
            f"returns 0, so the worker subtracts no graph estimate ({V2_SOURCE})",
        )
    import yaml

    from k3plan.resources import data_dir

    records = yaml.safe_load((data_dir("evidence") / "vllm_dsv4_start_logs.yaml").read_text())["records"]
    plan = cudagraph_plan(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        num_speculative_tokens=num_speculative_tokens,
        read=read,
        ceiling=default_ceiling(hardware=hardware, release=release),
        release=release,
    )
    rocm_profiled = vendor != "nvidia" and release is not None and release >= ROCM_PROFILED_FROM
    captured = breakable_graphs(v41=v41, vendor=vendor, release=release, env=env)
    if rocm_profiled:  # ROCm's own figure, by mode (ROCM_TRANSFER_RECORD)
        rec = next(r for r in records if r["id"] == ROCM_TRANSFER_RECORD)
        logged = cudagraph_plan(
            max_num_seqs=rec["max_num_seqs"],
            max_num_batched_tokens=rec["max_num_batched_tokens"],
            num_speculative_tokens=rec["num_speculative_tokens"],
            read=CompilationRead(mode=rec["cudagraph_mode"], max_capture_size=rec["max_cudagraph_capture_size"]),
        )
        return cudagraph_estimate(
            plan,
            log_piecewise_bytes=round(rec["figures"]["piecewise_gib"] * GiB),
            log_piecewise_graphs=logged.piecewise,
            log_source=rec["source"],
            differs=(
                f"model, GPU, split and build (the log's {rec['model']} on {rec['gpu']}; {rec['build']}), its "
                f"{rec['cudagraph_mode']} graphs at max_num_seqs {rec['max_num_seqs']:,}, capture size "
                f"{rec['max_cudagraph_capture_size']:,}, {rec['num_speculative_tokens']} speculative tokens"
            ),
            rocm_source=ROCM_PROFILED_SOURCE,
            piecewise_captured=captured,
            log_full=(round(rec["figures"]["full_gib"] * GiB), logged.full),
        )
    rec = next(r for r in records if r["id"] == TRANSFER_RECORD)
    return cudagraph_estimate(
        plan,
        log_piecewise_bytes=round(rec["figures"]["cudagraph_estimate_gib"] * GiB),
        log_piecewise_graphs=rec["figures"]["piecewise_graphs"],
        log_source=rec["source"],
        differs=(
            f"GPU and build (the log's {rec['gpu']}; {rec['build']}), its {rec['cudagraph_mode']} graphs at "
            f"max_num_seqs {rec['max_num_seqs']:,}, max_num_batched_tokens {rec['max_num_batched_tokens']:,}, "
            f"{rec['num_speculative_tokens']} speculative tokens"
        ),
        rocm=vendor != "nvidia",  # here a ROCm release before ROCM_PROFILED_FROM: not profiled
        piecewise_captured=captured,
    )


# What the capture holds after the pool (the start check on it: engines/vllm/memory.py engine_sizing, capture_room).
# Read in the vllm 0.21.0 wheel (PyPI): the worker sizes the pool inside memory_profiling, whose exit runs gc.collect()
# and torch.accelerator.empty_cache() (vllm/utils/mem_utils.py memory_profiling), so the profile run's transient peak
# is given back before the pool is allocated; Worker.compile_or_warm_up_model (vllm/v1/worker/gpu_worker.py) then runs
# the compile sizes eagerly, the kernel warm-up, GPUModelRunner.capture_model (vllm/v1/worker/gpu_model_runner.py
# _capture_cudagraphs -> _warmup_and_capture -> _dummy_run under CUDAGraphWrapper's torch.cuda.graph,
# vllm/compilation/cuda_graph.py), then (V1) a dummy forward and sampler run at min(max_num_seqs,
# max_num_batched_tokens) outside any graph. Every graph is captured into the one global graph pool
# (current_platform.get_global_graph_pool()), the sizes largest first (CudagraphDispatcher.get_capture_descs), a graph
# keeping its output only as a weak reference, so the pool holds about the largest graph's live intermediates; each
# graph also holds the driver's executable graph, which no code sizes (profile_cudagraph_memory's floor: 'Use at
# least 1 MiB per graph for driver overhead'). Model Runner V2 (vllm/v1/worker/gpu/cudagraph_utils.py
# CudaGraphManager.capture, 0.28.0 wheel) captures the same way: one global pool, PIECEWISE before FULL ('PIECEWISE
# has larger activations so FULL activations should fit in already allocated buffers in the graph pool'), each
# mode's sizes largest first. A capture's need is so at least the forward's temporaries at the largest size plus the
# floor a graph; the drafter's graphs (V1 _dummy_run's drafter.dummy_run, inside each capture) are not counted: a
# lower bound. A failed capture raises torch.OutOfMemoryError ('CUDA out of memory'; 'HIP out of memory' on ROCm).
CAPTURE_SOURCE = (
    "vllm 0.21.0 wheel (PyPI): vllm/utils/mem_utils.py memory_profiling (empty_cache on exit), vllm/v1/worker/"
    "gpu_worker.py Worker.compile_or_warm_up_model, vllm/v1/worker/gpu_model_runner.py GPUModelRunner.capture_model "
    "(one global graph pool, sizes largest first, at least 1 MiB a graph in profile_cudagraph_memory); vllm 0.28.0 "
    "wheel vllm/v1/worker/gpu/cudagraph_utils.py CudaGraphManager.capture (Model Runner V2, the same pool)"
)
CAPTURE_AT_V1 = "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.capture_model (Worker.compile_or_warm_up_model)"
CAPTURE_AT_V2 = "vllm/v1/worker/gpu/cudagraph_utils.py CudaGraphManager.capture (Worker.compile_or_warm_up_model)"


class CaptureNeed(Frozen):
    """What a command's CUDA-graph capture takes after the pool, at least: ``bytes`` and how it is made up."""

    __coerce__ = False

    bytes: int
    source: str


def capture_need(plan: CudagraphPlan, *, forward_bytes: int, forward_source: str) -> CaptureNeed | None:
    """The capture's need for ``plan``'s graphs (comment above): the forward's temporaries at the largest capture
    size (``forward_bytes``, k3plan's, at that token count) in the one pool, and the code's 1 MiB floor a graph; None
    where nothing is captured."""
    graphs = plan.piecewise + plan.full
    if plan.mode == "NONE" or not plan.sizes or not graphs:
        return None
    floor = graphs * MIN_PER_GRAPH
    return CaptureNeed(
        bytes=forward_bytes + floor,
        source=(
            f"at least {(forward_bytes + floor) / GiB:.2f} GiB: the one graph pool holds the largest graph's forward "
            f"({plan.sizes[-1]:,} tokens: {forward_source}) + {graphs} graphs x the 1 MiB driver floor; the drafter's "
            f"graphs not counted ({plan.how}; {CAPTURE_SOURCE})"
        ),
    )
