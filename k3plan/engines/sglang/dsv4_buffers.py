"""What SGLang's DeepSeek-V4 / V4.1 model holds on the GPU beside its parameters once it is loaded: the RoPE tables
its attention layers build while the model is constructed, inside the load's "mem usage" (the free memory before
``ModelRunner.load_model`` minus the free memory after it, each read after ``torch.cuda.empty_cache()``: only live
tensors count, the tables' temporaries do not).

Per attention layer (MQALayer; MqaAttentionBase from 0.5.16) two tables, each built once per distinct set of
arguments and shared by every layer that passes the same ones (``ROPE_SOURCE``):

- ``freqs_cis``: ``precompute_freqs_cis`` (``@lru_cache(2)``), a complex64 ``[max_position_embeddings, rope_dim / 2]``
  table, registered as the layer's buffer: 8 B x rope_dim / 2 a position;
- ``rotary_emb``: ``get_rope_wrapper`` -> ``get_rope`` (``_ROPE_DICT``, one module a distinct key), whose
  ``cos_sin_cache`` is float32 ``[positions, rope_dim]`` on CUDA (cos | sin, not cast to the model dtype): YaRN's
  ``DeepseekScalingRotaryEmbedding`` over original_max_position_embeddings x factor positions, the plain
  ``RotaryEmbedding`` over max_position_embeddings. Not in 0.5.12 (no get_rope there).

A layer's arguments differ only by whether it compresses (compress_ratio > 0: compress_rope_theta; window-only:
rope_theta; from 0.5.18 the window-only layers also drop YaRN, original_seq_len 0 and no rope_scaling), so a model
holds one pair of tables a class present: V4-Flash and V4.1-Flash both classes (1 GiB at 1,048,576 positions and
64 RoPE dims), V4-Pro's decoder only compressed layers (0.5 GiB). The NextN draft's layer is window-only
(COMPRESS_RATIO_NEXTN_LAYER = 0) and is built in the target's process, so the caches hand it the target's tables
where the target has a window-only layer and build new ones where it has none (V4-Pro: the draft's 0.5 GiB).
DSpark's attention (MqaAttentionBase, compress_ratio 0, original_seq_len 0) builds a ``freqs_cis`` only, and gets
none of its own beside a target with window-only layers (every V4.1). 0.5.23's flashmla_mega attention (V4.1 on
CUDA, ``dsv4_attn_backend == "flashmla_mega"``) adds ``mega_cos_sin_cache`` per class: ``precompute_cos_sin_table``
(``@lru_cache(2)``), ``view_as_real(freqs_cis).transpose(1, 2).reshape(seqlen, -1)``, a float32 copy.

Beside the tables, one checkpoint tensor is held in another form than it is stored (``sglang_wo_a_bf16``): the
fp8 wo_a absorb GEMM takes 128 x 128 block scales only, so a checkpoint of another block (V4.1's [32, 32]) has its
wo_a dequantized to bf16 at load (``WO_A_SOURCE``).

On ROCm each layer also registers its own bf16 ``cos_cache`` / ``sin_cache`` (``freqs_cis.real / .imag .to(bf16)``,
no cache: 128 MiB a layer at 1M positions); not priced (no SGLang DeepSeek-V4 log on an AMD GPU to check it), so the
tables are priced on NVIDIA GPUs only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from k3plan.engines.release import Release
from k3plan.engines.sglang.releases import follows

if TYPE_CHECKING:  # types only
    from k3plan.models.inventory import Tensor
    from k3plan.models.spec import DSV4Dims

ROPE_CACHE_FROM: Release = (0, 5, 13)  # get_rope_wrapper in MQALayer.__init__ (none in the 0.5.12 wheel)
WINDOW_PLAIN_FROM: Release = (0, 5, 18)  # window-only layers: original_seq_len 0, no rope_scaling
MEGA_TABLE_FROM: Release = (0, 5, 23)  # flashmla_mega's mega_cos_sin_cache

ROPE_SOURCE = (
    "sglang 0.5.15 wheel (PyPI): sglang/srt/models/deepseek_v4.py MQALayer.__init__ (register_buffer('freqs_cis', "
    "precompute_freqs_cis(dim=qk_rope_head_dim, seqlen=max_position_embeddings, original_seq_len=rope_scaling's "
    "original_max_position_embeddings, base=compress_rope_theta if compress_ratio else rope_theta, ...)); "
    "rotary_emb = get_rope_wrapper(max_position=max_position_embeddings, base=rope_base, rope_scaling with rope_type "
    "deepseek_yarn)), sglang/srt/layers/deepseek_v4_rope.py precompute_freqs_cis (@lru_cache(2); torch.polar: "
    "complex64 [seqlen, dim // 2]), layers/rotary_embedding/factory.py get_rope (_ROPE_DICT: one module a key), "
    "rope_variant.py DeepseekScalingRotaryEmbedding._compute_cos_sin_cache (original_max_position_embeddings x "
    "scaling_factor positions, cos | sin), base.py RotaryEmbedding.__init__ (cos_sin_cache kept float32 under CUDA, "
    "register_buffer), model_loader/loader.py DefaultModelLoader.load_model (the model built under `with "
    "target_device`: on the GPU), model_executor/model_runner.py ModelRunner.load_model (weight_load_mem_usage = "
    "free before - free after, get_available_gpu_memory emptying the cache first); sglang 0.5.21 wheel: "
    "models/deepseek_v4.py MqaAttentionBase.__init__ (original_seq_len 0 on window-only layers) and MQALayer.__init__ "
    "(active_rope_scaling deepseek_yarn on compressed layers only, None on window-only: a plain RotaryEmbedding over "
    "max_position_embeddings), kernels/ops/attention/deepseek_v4_rope.py precompute_freqs_cis (@lru_cache(2)); "
    "get_rope_wrapper first in the 0.5.13 wheel, the window-only layers' plain RoPE first in 0.5.18 "
    "(rope_original_seq_len from 0.5.16), read in the 0.5.12-0.5.23 wheels"
)
DRAFT_SOURCE = (
    "sglang 0.5.15 wheel (PyPI): sglang/srt/models/deepseek_v4_nextn.py DeepseekV4ModelNextN (its decoder a "
    "DeepseekV4DecoderLayer with compress_ratio_override COMPRESS_RATIO_NEXTN_LAYER = 0: a window-only MQALayer), "
    "built in the target's scheduler process, so precompute_freqs_cis's lru_cache and get_rope's _ROPE_DICT hand it "
    "the target's tables of the same arguments; sglang 0.5.21 wheel: models/deepseek_v4_dspark.py DSparkAttention "
    "(MqaAttentionBase with compress_ratio 0, rope_original_seq_len 0: a freqs_cis, no get_rope)"
)
MEGA_SOURCE = (
    "sglang 0.5.23 wheel (PyPI): sglang/srt/models/deepseek_v4.py MQALayer.__init__ (use_mega_attention: V4.1, CUDA, "
    "dsv4_attn_backend flashmla_mega -> mega_cos_sin_cache = precompute_cos_sin_table(**rope_kwargs)), "
    "kernels/ops/attention/dsv4/rope.py precompute_cos_sin_table (@lru_cache(2); view_as_real(freqs_cis)"
    ".transpose(1, 2).reshape(seqlen, -1): a float32 copy [seqlen, rope_dim])"
)

WO_A_SOURCE = (
    "sglang 0.5.21 wheel (PyPI): sglang/srt/models/deepseek_v4.py wo_a_fp8_gemm_enabled (SGLANG_OPT_FP8_WO_A_GEMM and "
    "an Fp8Config of weight_block_size [128, 128]: 'any other layout dequantizes wo_a to bf16 at load'), "
    "MqaAttentionBase.__init__ (wo_a a ColumnParallelLinear over the attention TP group, no quant config, "
    "params_dtype bfloat16), DeepseekV4ForCausalLM.load_weights -> _prepare_deepseek_v4_weights -> "
    "_dequant_fp8_wo_a_streaming; the same in the 0.5.22 and 0.5.23 wheels (V4.1 is served from 0.5.21)"
)
V4_FP8 = "ds_fp8"  # DeepSeek-V4's own fp8, [128, 128] blocks (models/formats.py): the one wo_a stays fp8 in
BF16 = 2
COMPLEX64 = 8
FLOAT32 = 4


def _before(release: Release | None, first: Release) -> bool:
    """A command read as ``release`` runs code older than ``first`` (None: the cited 0.5.15 code)."""
    return (release if release is not None else (0, 5, 15)) < first


def _class_bytes(d: DSV4Dims, compressed: bool, *, release: Release | None, rope: bool, mega: bool) -> int:
    """The tables one class of layers holds (module docstring): its freqs_cis, its get_rope cos_sin_cache where
    ``rope`` (an MQALayer), its mega_cos_sin_cache where ``mega``."""
    n = d.max_position * d.rope_dim // 2 * COMPLEX64
    if rope and not _before(release, ROPE_CACHE_FROM):
        yarn = compressed or _before(release, WINDOW_PLAIN_FROM)
        n += (d.yarn_positions if yarn else d.max_position) * d.rope_dim * FLOAT32
    if mega:
        n += d.max_position * d.rope_dim * FLOAT32
    return n


def sglang_dsv4_model_buffers(
    d: DSV4Dims, *, release: Release | None, vendor: str, mega: bool = False, draft: str | None = None
) -> tuple[int, int, str]:
    """(the target's bytes, the draft's bytes, how) of the RoPE tables SGLang's DeepSeek-V4 / V4.1 model builds a
    GPU (module docstring), in the form of the release the command is read as (None: 0.5.15's code). ``mega``: 0.5.23's
    flashmla_mega attention runs (its extra tables from MEGA_TABLE_FROM); ``draft``: "EAGLE" (the NextN layer),
    "DSPARK", or None. (0, 0, why) off NVIDIA or without YaRN in the config (that path was not read)."""
    if vendor != "nvidia":
        return 0, 0, "SGLang's DeepSeek-V4 RoPE tables not priced off NVIDIA GPUs (ROCm's per-layer bf16 copies unread)"
    if not d.yarn_positions or not d.max_position or not d.rope_dim:
        return 0, 0, "no RoPE table priced (no YaRN rope_scaling in the config: that path was not read)"
    mega = mega and follows(release, MEGA_TABLE_FROM)
    classes = sorted({r > 0 for r in d.compress_ratios}, reverse=True)
    target = sum(_class_bytes(d, c, release=release, rope=True, mega=mega) for c in classes)
    own = 0
    if draft is not None and False not in classes:  # the draft's window-only layer: a class the target lacks
        own = _class_bytes(d, False, release=release, rope=draft != "DSPARK", mega=mega and draft != "DSPARK")
    names = ", ".join("compressed (compress_rope_theta)" if c else "window-only (rope_theta)" for c in classes)
    how = (
        f"RoPE tables {target:,} B: one set a class of layers ({names}), complex64 freqs_cis [{d.max_position:,}, "
        f"{d.rope_dim // 2}]"
        + (
            f" and float32 cos_sin_cache [positions, {d.rope_dim}]"
            if not _before(release, ROPE_CACHE_FROM)
            else " (no get_rope table in this release)"
        )
        + (f" and float32 mega_cos_sin_cache ({MEGA_SOURCE})" if mega else "")
        + f" ({ROPE_SOURCE})"
    )
    if draft is not None:
        how += (
            f"; the {draft} draft's own {own:,} B ("
            + ("its window-only layer's tables, a class the target's decoder lacks" if own else "the target's tables")
            + f": {DRAFT_SOURCE})"
        )
    return target, own, how


def sglang_wo_a_bf16(tensors: Iterable[Tensor], *, attn_tp: int) -> tuple[int, str]:
    """(bytes a GPU, how) SGLang holds beyond the checkpoint's bytes of DeepSeek-V4's decoder wo_a where the
    checkpoint's fp8 blocks are not 128 x 128 (V4.1's [32, 32]): dequantized to bf16 at load and split over the
    attention TP group ``attn_tp`` (WO_A_SOURCE). ``tensors``: the model's text inventory. (0, "") where none is."""
    extra = n = 0
    for t in tensors:
        if t.kind == "mla" and t.name.endswith("attn.wo_a") and t.fmt != V4_FP8:
            extra += math.prod(t.shape) * BF16 - t.nbytes
            n += 1
    if not n:
        return 0, ""
    per = -(-extra // attn_tp)
    return per, (
        f"wo_a in bf16, {per:,} B a GPU beyond the checkpoint's fp8 ({n} layers, {extra:,} B over attention TP "
        f"{attn_tp}: {WO_A_SOURCE})"
    )
