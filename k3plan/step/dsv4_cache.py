"""DeepSeek-V4's cache, as the architecture has it and as each serving engine lays it out.

A V4 request holds, a layer (``ModelSpec.dsv4``; the numbers from config.json):

- a growable *classical* cache: one compressed entry of ``head_dim`` values (K = V, rope on the last
  ``rope_dim``) for every complete block of ``compress_ratios[i]`` tokens (CSA: 4, HCA: 128), and on CSA
  layers one indexer key of ``index_head_dim`` values a block too;
- a fixed-size *state* cache: the last ``sliding_window`` (128) uncompressed entries (every layer, the
  window attention reads them), plus the compressor's state for the block being filled -- the uncompressed
  tail, kept as projected kv and gate scores (two values a channel) for ``ring`` tokens: CSA's blocks
  overlap (coff 2: 2 x 4 tokens of 2 x head_dim channels), HCA's do not (128 tokens of head_dim); the CSA
  indexer's compressor keeps the same for its index_head_dim keys.

So a token adds sum over layers of (entry + indexer key on CSA) / ratio bytes, whatever the context, and a
sequence holds the fixed state on top. ``Dsv4Layout`` is one engine's byte format for these; ``ENGINES`` the
ones read (vLLM, SGLang, torchtpu-vllm), each cited (``Dsv4Layout.sources``: repository, file, symbol,
commit). All three store an entry as vLLM's/FlashMLA's ``fp8_ds_mla`` for V4: the 448 no-rope values in
fp8 e4m3, the 64 rope values in bf16, one UE8M0 scale byte a 64 no-rope values and one pad byte
(448 + 128 + 7 + 1 = 584 B), and an indexer key as 128 fp8 values + one f32 scale a 128 (132 B); the state
in f32. No engine read stores V4's main KV in FP4. What the public reference ports of DeepSeek's
``inference/model.py`` show (read through the code index; repositories not pinned, found: false): V4 quantizes
the compressed and window KV to fp8 in blocks of 64 (UE8M0 scales, rope left in bf16: the 584 B above), and
only the indexer's keys to FP4 (E2M1 with an E8M0 scale a 32, after a Hadamard rotation); the FP4 with an E4M3
scale a 16 channels for the compressed KV is DeepSeek-V4.1's compressor (``fp4_act_quant(scale_dtype=e4m3)``,
block 16), not these checkpoints'. vLLM's one FP4 option, ``use_fp4_indexer_cache``, is the indexer's MXFP4,
and it allocates the fp8 size anyway, so the figures below hold with it too.

Figures are derived from the spec and the layout: ``kv_bytes_per_token`` (exact, a Fraction),
``classical_bytes(context)`` (complete blocks only), ``state_bytes`` (fixed) and ``decode_read_bytes``
(what one decode step reads: every indexer key, every HCA entry, CSA's top-k entries and each window).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

from k3plan.models.spec import DSV4Dims, ModelSpec

CSA = 4  # the ratio of the layers with the indexer and overlapping (coff 2) blocks
F32 = 4


@dataclass(frozen=True)
class Source:
    repo: str
    file: str
    symbol: str
    commit: str
    found: bool = True
    note: str = ""


@dataclass(frozen=True)
class Dsv4Layout:
    """One engine's storage of V4's cache. ``entry_bytes``/``index_bytes`` are functions of the dims (the
    engines derive them so), ``ring`` the compressor-state tokens a layer kind keeps (ratio 4 / 128)."""

    engine: str
    scale_block: int  # no-rope values a UE8M0 scale byte (fp8_ds_mla: 64)
    scale_pad: int  # pad bytes after the scales (fp8_ds_mla: 1)
    index_quant_block: int  # indexer values an f32 scale (128)
    page_align: int  # pages are padded to a multiple of this many bytes (FlashMLA: 576); not modelled below
    ring_csa: int
    ring_hca: int
    ring_csa_spec: int  # under speculative decoding (SGLang keeps a longer ring); 0: same as without
    ring_hca_spec: int
    sources: tuple[Source, ...] = field(default=())
    note: str = ""

    def entry_bytes(self, d: DSV4Dims) -> int:
        """One compressed or window entry: no-rope fp8, rope bf16, scales, pad (584 for V4)."""
        nope = d.head_dim - d.rope_dim
        return nope + 2 * d.rope_dim + nope // self.scale_block + self.scale_pad

    def index_bytes(self, d: DSV4Dims) -> int:
        """One indexer key: fp8 values and an f32 scale a quant block (132 for V4)."""
        return d.index_head_dim + F32 * (d.index_head_dim // self.index_quant_block)

    def ring(self, ratio: int, speculative: bool = False) -> int:
        if ratio == CSA:
            return self.ring_csa_spec if speculative and self.ring_csa_spec else self.ring_csa
        return self.ring_hca_spec if speculative and self.ring_hca_spec else self.ring_hca


_VLLM_ATTN = "vllm/model_executor/layers/deepseek_v4_attention.py"
_VLLM_COMP = "vllm/model_executor/layers/deepseek_compressor.py"
_SGL_POOL = "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"

VLLM = Dsv4Layout(
    engine="vllm",
    scale_block=64,
    scale_pad=1,
    index_quant_block=128,
    page_align=576,
    ring_csa=2 * CSA,
    ring_hca=128,
    ring_csa_spec=0,
    ring_hca_spec=0,
    sources=(
        Source(
            "vllm-project/vllm",
            _VLLM_ATTN,
            "DeepseekV4MultiHeadLatentAttentionWrapper.__init__ (head_bytes = nope + rope*2 + nope//64 + 1; "
            "DeepseekV4SWACache(window_size)); DeepseekV4MLAAttention.get_kv_cache_spec (MLAAttentionSpec "
            "compress_ratio, fp8_ds_mla, alignment=576; None for SWA-only layers)",
            "b92a330e057db9b8c2895ba862de2a03589adce8",
        ),
        Source(
            "vllm-project/vllm",
            _VLLM_ATTN,
            "DeepseekV4Indexer.__init__ (k_cache_head_dim = head_dim + head_dim // 128 * 4: 128 fp8 + 4 f32 "
            "scale = 132; MXFP4 indexer cache allocates the same)",
            "b92a330e057db9b8c2895ba862de2a03589adce8",
        ),
        Source(
            "vllm-project/vllm",
            _VLLM_COMP,
            "DeepseekCompressor.__init__ (state_dim = 2 * coff * head_dim, f32) and CompressorStateCache "
            "(sliding_window = coff * compress_ratio, SlidingWindowMLASpec)",
            "bbd1024110933d0f97a35c527de2f8b6da23bfa8",
        ),
    ),
)

SGLANG = Dsv4Layout(
    engine="sglang",
    scale_block=64,
    scale_pad=1,
    index_quant_block=128,
    page_align=576,
    ring_csa=2 * CSA,
    ring_hca=128,
    ring_csa_spec=16,
    ring_hca_spec=256,
    sources=(
        Source(
            "sgl-project/sglang",
            _SGL_POOL,
            "DeepSeekV4SingleKVPool.get_bytes_per_token (448 fp8 + 64*2 bf16 + 448//64 + 1 = 584, pages padded "
            "to 576 B) and DeepSeekV4TokenToKVPool (swa / c4 / c128 pools, c4 indexer pool)",
            "418025512e121a27285e814c54562d00c9c871a5",
        ),
        Source(
            "sgl-project/sglang",
            _SGL_POOL,
            "DeepSeekV4IndexerPool._create_buffer (index_head_dim + index_head_dim // 128 * 4 B a token) and "
            "get_compress_state_ring_size (8 / 128; 16 / 256 speculative; 1 for online c128)",
            "418025512e121a27285e814c54562d00c9c871a5",
        ),
        Source(
            "sgl-project/sglang",
            "python/sglang/srt/mem_cache/deepseek_v4_compress_state.py",
            "CompressStatePool.__init__ (last_dim = 2 * (1 + overlap) * head_dim, ring_size rows a request)",
            "c3d87704a9204623a15f39af6d18417c8cca308e",
            note="state_dtype is passed in by the model runner; f32 assumed here (not read: found false for it)",
        ),
    ),
)

# its configs run vLLM's DeepSeek-V4 model code (MODEL_IMPL_TYPE=vllm): vLLM's layout, assumed where its TPU
# backend was not read (the last source says so)
TORCHTPU_VLLM = replace(
    VLLM,
    engine="torchtpu-vllm",
    sources=(
        Source(
            "kowalski-4831/vllm-torchtpu",
            "scripts/vllm/benchmarking/configs/deepseek-v4-flash-dp8-ep.sh",
            "TP=1 x DP=8 with EP, KV_CACHE_DTYPE=fp8 on v7x-8",
            "686f5c11afd5042063b4d31f9b7d31e746644eb9",
        ),
        Source(
            "kowalski-4831/vllm-torchtpu",
            "scripts/vllm/benchmarking/configs/deepseek-v4-pro-dp16-ep.sh",
            "TP=1 x DP=16 with EP on v7x-16, MODEL_IMPL_TYPE=vllm (vLLM's DeepSeek-V4 model code), "
            "KV_CACHE_DTYPE=fp8_e4m3",
            "5e1723dbf012cb9663dd800bb0fc58991eccfa72",
        ),
        Source(
            "kowalski-4831/vllm-torchtpu",
            "tpu_inference/",
            "the TPU attention backend's DeepSeek-V4 cache layout",
            "",
            found=False,
            note="no DeepSeek-V4 attention backend file found in the stored tree; the layout is assumed to be "
            "vLLM's (the configs run vLLM's model code, MODEL_IMPL_TYPE=vllm, with an fp8 KV cache)",
        ),
    ),
    note="assumed vLLM's layout (found: false for the TPU backend's own)",
)

ENGINES: dict[str, Dsv4Layout] = {e.engine: e for e in (VLLM, SGLANG, TORCHTPU_VLLM)}

# k3plan's stacks (sharding/stacks/*.yaml) -> the engine whose layout they hold; a stack not listed: vLLM's
STACK_ENGINE = {
    "vllm": "vllm",
    "sglang": "sglang",
    "dp-attention": "sglang",
    "vllm-tpu": "torchtpu-vllm",
    "tpu-inference": "torchtpu-vllm",
    "torchtpu-vllm": "torchtpu-vllm",
}


def layout_for_stack(stack_name: str) -> Dsv4Layout:
    return ENGINES[STACK_ENGINE.get(stack_name, "vllm")]


def _dims(spec: ModelSpec) -> DSV4Dims:
    if spec.dsv4 is None:
        raise ValueError(f"{spec.name}: not a DeepSeek-V4 model")
    return spec.dsv4


def compressed_values_per_token(spec: ModelSpec) -> Fraction:
    """From config.json alone: cached values a token over the model (entries and indexer keys / ratio)."""
    d = _dims(spec)
    out = Fraction(0)
    for r in d.compress_ratios:
        if r:
            out += Fraction(d.head_dim + (d.index_head_dim if r == CSA else 0), r)
    return out


def kv_bytes_per_token(spec: ModelSpec, layout: Dsv4Layout = VLLM) -> Fraction:
    """Growable bytes a token, whole model, one copy: sum over layers of (entry [+ indexer key]) / ratio."""
    d = _dims(spec)
    e, i = layout.entry_bytes(d), layout.index_bytes(d)
    out = Fraction(0)
    for r in d.compress_ratios:
        if r:
            out += Fraction(e + (i if r == CSA else 0), r)
    return out


def classical_bytes(spec: ModelSpec, context: int, layout: Dsv4Layout = VLLM) -> int:
    """One sequence's growable cache at ``context`` tokens: complete compressed blocks only (the tail of
    the block being filled is state)."""
    d = _dims(spec)
    e, i = layout.entry_bytes(d), layout.index_bytes(d)
    return sum((context // r) * (e + (i if r == CSA else 0)) for r in d.compress_ratios if r)


@dataclass(frozen=True)
class StateTerms:
    window_bytes: int  # the last sliding_window entries, every layer
    compressor_bytes: int  # the main compressors' tails (CSA and HCA layers)
    indexer_compressor_bytes: int  # the CSA indexers' compressors' tails

    @property
    def total(self) -> int:
        return self.window_bytes + self.compressor_bytes + self.indexer_compressor_bytes


def state_terms(spec: ModelSpec, layout: Dsv4Layout = VLLM, *, speculative: bool = False) -> StateTerms:
    """One sequence's fixed-size state, whole model, one copy (constant in context)."""
    d = _dims(spec)
    window = len(d.compress_ratios) * d.sliding_window * layout.entry_bytes(d)
    comp = idx = 0
    for r in d.compress_ratios:
        if not r:
            continue
        coff = 2 if r == CSA else 1
        ring = layout.ring(r, speculative)
        comp += ring * 2 * coff * d.head_dim * F32
        if r == CSA:
            idx += ring * 2 * coff * d.index_head_dim * F32
    return StateTerms(window_bytes=window, compressor_bytes=comp, indexer_compressor_bytes=idx)


def state_bytes(spec: ModelSpec, layout: Dsv4Layout = VLLM, *, speculative: bool = False) -> int:
    return state_terms(spec, layout, speculative=speculative).total


def sequence_bytes(spec: ModelSpec, context: int, layout: Dsv4Layout = VLLM) -> int:
    """Everything one sequence holds at ``context`` tokens: classical + state."""
    return classical_bytes(spec, context, layout) + state_bytes(spec, layout)


@dataclass(frozen=True)
class DecodeRead:
    """Bytes one decode step reads of one sequence's cache at ``context`` tokens, whole model."""

    indexer_bytes: int  # CSA: every indexer key, scored
    csa_bytes: int  # CSA: the top-k compressed entries the indexer picks + the window
    hca_bytes: int  # HCA: every compressed entry + the window
    window_bytes: int  # window-only layers: the window

    @property
    def total(self) -> int:
        return self.indexer_bytes + self.csa_bytes + self.hca_bytes + self.window_bytes


def decode_read(spec: ModelSpec, context: int, layout: Dsv4Layout = VLLM) -> DecodeRead:
    d = _dims(spec)
    e, i = layout.entry_bytes(d), layout.index_bytes(d)
    w = min(d.sliding_window, context)
    idx = csa = hca = win = 0
    for r in d.compress_ratios:
        n = context // r if r else 0
        if r == CSA:
            idx += n * i
            csa += (min(d.index_topk, n) + w) * e
        elif r:
            hca += (n + w) * e
        else:
            win += w * e
    return DecodeRead(indexer_bytes=idx, csa_bytes=csa, hca_bytes=hca, window_bytes=win)


def per_layer_kv_bytes_ceil(spec: ModelSpec, layout: Dsv4Layout = VLLM) -> int:
    """``kv_bytes_per_token`` spread over the layers and rounded up to a whole byte: what the per-layer
    paths of k3plan (budget.cache, step.memory: an int a token a MLA layer) carry for V4; it overstates
    the exact figure by under one byte a token a layer."""
    exact = kv_bytes_per_token(spec, layout)
    n = len(_dims(spec).compress_ratios)
    q = exact / n
    return -(-q.numerator // q.denominator)


def kv_source_text(spec: ModelSpec, stack_name: str) -> str:
    """fit's provenance of the KV line for a V4 model: the exact figure and how the per-layer path carries it."""
    d, lay = _dims(spec), layout_for_stack(stack_name)
    e, i = lay.entry_bytes(d), lay.index_bytes(d)
    exact = kv_bytes_per_token(spec, lay)
    src = lay.sources[0]
    return (
        f"analytic: DeepSeek-V4 compressed cache (step/dsv4_cache), {d.n_csa} CSA layers x ({e} + {i} B) / 4 + "
        f"{d.n_hca} HCA x {e} B / 128 = {float(exact):,.2f} B a token, carried as {per_layer_kv_bytes_ceil(spec, lay)}"
        f" B a token x {len(d.compress_ratios)} layers (rounded up); {lay.engine}'s layout ({src.repo} {src.file} "
        f"{src.symbol.split(' (')[0]}{'' if src.found else ', not found: ' + src.note}), whatever --kv-dtype says"
    )


def state_source_text(spec: ModelSpec, stack_name: str, *, speculative: bool = False) -> str:
    lay = layout_for_stack(stack_name)
    t = state_terms(spec, lay, speculative=speculative)
    d = _dims(spec)
    return (
        f"analytic: DeepSeek-V4 fixed state (step/dsv4_cache): {d.sliding_window}-entry window x "
        f"{len(d.compress_ratios)} layers {t.window_bytes:,} B + compressor tails {t.compressor_bytes:,} B + indexer "
        f"compressor tails {t.indexer_compressor_bytes:,} B (f32), {lay.engine}'s layout"
        + (" (its speculative-decoding ring)" if speculative and lay.ring_hca_spec else "")
        + "; whole on every TP rank"
    )
