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
sequence holds the fixed state on top. ``Dsv4Layout`` (k3plan.engines.dsv4_layout) is one engine's byte format
for these; ``engines/<engine>/dsv4.py`` the ones read (vLLM, SGLang, torchtpu-vllm), each cited (``Dsv4Layout.sources``: repository, file, symbol,
commit). vLLM and SGLang store every entry as vLLM's/FlashMLA's ``fp8_ds_mla`` for V4: the 448 no-rope values
in fp8 e4m3, the 64 rope values in bf16, one UE8M0 scale byte a 64 no-rope values and one pad byte
(448 + 128 + 7 + 1 = 584 B), and an indexer key as 128 fp8 values + one f32 scale a 128 (132 B); the state
in f32. The torch_tpu plugin pads a CSA entry to 640 B and an indexer key to 256, and keeps HCA's and the
window's entries as raw bf16 (1,024 B): ``Dsv4Layout.sizes``, which memory and the step's ops both read. No engine read stores V4's main KV in FP4. What the public reference ports of DeepSeek's
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

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from k3plan.engines.dsv4_layout import CSA, F32, Dsv4Layout, EntrySizes, RequestCharge, Source
from k3plan.engines.registry import engine_rules
from k3plan.models.spec import DSV4Dims, ModelSpec

if TYPE_CHECKING:
    from k3plan.engines.stack import Stack

# a layout's types, and the ratio and word size they read: k3plan.engines.dsv4_layout; each engine's layout and
# Engram placement: engines/<engine>/dsv4.py, read through the engine's description (Engine.dsv4, Engine.engram)
# the layout of a stack whose engine names none of its own (a user's stack YAML): the engine that prices those
DEFAULT_LAYOUT = engine_rules("").dsv4
VLLM = DEFAULT_LAYOUT  # the name step/dsv4_ops and tests read it by


def layout_for_stack(stack_name: str) -> Dsv4Layout:
    """The DeepSeek-V4 cache layout of ``stack_name``'s engine (``Engine.dsv4``)."""
    return engine_rules(stack_name).dsv4


def stack_sizes(spec: ModelSpec, stack_name: str) -> EntrySizes | None:
    """The records ``stack_name``'s engine stores DeepSeek-V4's cache in (``Dsv4Layout.sizes``): what the step's ops
    read (step.ops ``dsv4_sizes``); None for every other model and for DeepSeek-V4.1 (its own formats)."""
    d = spec.dsv4
    if d is None or d.csa2 is not None:
        return None
    return layout_for_stack(stack_name).sizes(d)


def dsv4_block(spec: ModelSpec, stack_name: str) -> tuple[int, str]:
    """(tokens, source) of the KV block ``stack_name``'s engine sets for DeepSeek-V4 apart from the stack's paging
    (``Dsv4Layout.block``: the torch_tpu plugin's and tpu-inference's 1,024 tokens); (0, "") elsewhere."""
    if spec.dsv4 is None or spec.dsv4.csa2 is not None:
        return 0, ""
    lay = layout_for_stack(stack_name)
    return (lay.block, f"{lay.block} tokens, {lay.block_source}") if lay.block else (0, "")


def engine_charge(
    spec: ModelSpec, stack: Stack, *, hardware: str, vendor: str, chunk: int, context: int
) -> RequestCharge | None:
    """Where ``stack``'s engine charges a DeepSeek-V4 request by its own pool accounting on ``hardware``
    (``Dsv4Layout.request_charge``: V4.1 on vLLM's CUDA and ROCm backends, V4 and V4.1 on SGLang), at ``chunk``
    tokens a step and ``context`` tokens, with the model's draft layers in the pool where the stack's step verifies
    more than one token (``state.verify_tokens``: speculative decoding); None for every other model, engine or machine
    (no hardware given: the model's own bytes a token). The one call the budget's layout and its source line both make."""
    d = spec.dsv4
    if d is None or not hardware:
        return None
    rule = layout_for_stack(stack.name).request_charge
    if rule is None:
        return None
    spec_tokens = max(stack.state.verify_tokens - 1, 0)
    drafts = spec.mtp_layers if spec_tokens else 0
    at: dict[str, object] = {}
    if stack.windowed_in_flight is not None:  # the serve command's batches in flight (Stack.windowed_in_flight)
        at["in_flight"] = stack.windowed_in_flight
    if stack.engine_release is not None:  # the serve command's release (Stack.engine_release)
        at["release"] = stack.engine_release
    if stack.engine_block is not None:  # the serve command's --block-size (Stack.engine_block)
        at["block"] = stack.engine_block
    if stack.engine_swa_ratio is not None:  # the serve command's --swa-full-tokens-ratio (Stack.engine_swa_ratio)
        at["swa_ratio"] = stack.engine_swa_ratio
    if stack.engine_state_bytes is not None:  # the serve command's compressor-state element (Stack.engine_state_bytes)
        at["state_bytes"] = stack.engine_state_bytes
    return rule(
        d,
        hardware=hardware,
        vendor=vendor,
        chunk=chunk,
        context=context,
        draft_layers=drafts,
        spec_tokens=spec_tokens,
        **at,
    )


def _dims(spec: ModelSpec) -> DSV4Dims:
    if spec.dsv4 is None:
        raise ValueError(f"{spec.name}: not a DeepSeek-V4 model")
    return spec.dsv4


def compressed_values_per_token(spec: ModelSpec) -> Fraction:
    """From config.json alone: cached values a token over the model (entries and indexer keys / ratio)."""
    d = _dims(spec)
    if d.csa2 is not None:  # DeepSeek-V4.1: the KV sources only
        return sum((Fraction(d.head_dim + d.index_head_dim, r) for _, r in csa2_sources(d)), Fraction(0))
    out = Fraction(0)
    for r in d.compress_ratios:
        if r:
            out += Fraction(d.head_dim + (d.index_head_dim if r == CSA else 0), r)
    return out


def kv_bytes_per_token(spec: ModelSpec, layout: Dsv4Layout = VLLM) -> Fraction:
    """Growable bytes a token, whole model, one copy: sum over layers of (entry [+ indexer key]) / ratio.
    DeepSeek-V4.1 (``dsv4.csa2``): over the KV sources, in its FP4 formats, whatever ``layout``."""
    d = _dims(spec)
    if d.csa2 is not None:
        return _csa2_kv_bytes_per_token(d)
    z = layout.sizes(d)
    out = Fraction(0)
    for r in d.compress_ratios:
        if r:
            out += Fraction(z.csa + z.index if r == CSA else z.hca, r)
    return out


def classical_bytes(spec: ModelSpec, context: int, layout: Dsv4Layout = VLLM) -> int:
    """One sequence's growable cache at ``context`` tokens: complete compressed blocks only (the tail of
    the block being filled is state)."""
    d = _dims(spec)
    if d.csa2 is not None:
        return _csa2_classical_bytes(d, context)
    z = layout.sizes(d)
    return sum((context // r) * (z.csa + z.index if r == CSA else z.hca) for r in d.compress_ratios if r)


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
    if d.csa2 is not None:
        return _csa2_state_terms(d)
    window = len(d.compress_ratios) * d.sliding_window * layout.sizes(d).window
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
    if d.csa2 is not None:
        return _csa2_decode_read(d, context)
    z = layout.sizes(d)
    w = min(d.sliding_window, context)
    idx = csa = hca = win = 0
    for r in d.compress_ratios:
        n = context // r if r else 0
        if r == CSA:
            idx += n * z.index
            csa += min(d.index_topk, n) * z.csa + w * z.window
        elif r:
            hca += n * z.hca + w * z.window
        else:
            win += w * z.window
    return DecodeRead(indexer_bytes=idx, csa_bytes=csa, hca_bytes=hca, window_bytes=win)


def per_layer_kv_bytes_ceil(spec: ModelSpec, layout: Dsv4Layout = VLLM) -> int:
    """``kv_bytes_per_token`` spread over the layers and rounded up to a whole byte: what the per-layer
    paths of k3plan (step.cache, step.memory: an int a token a MLA layer) carry for V4; it overstates
    the exact figure by under one byte a token a layer."""
    exact = kv_bytes_per_token(spec, layout)
    n = len(_dims(spec).compress_ratios)
    q = exact / n
    return -(-q.numerator // q.denominator)


def kv_source_text(spec: ModelSpec, stack_name: str) -> str:
    """fit's provenance of the KV line for a V4 model: the exact figure and how the per-layer path carries it."""
    if _dims(spec).csa2 is not None:
        return csa2_kv_source_text(spec)
    d, lay = _dims(spec), layout_for_stack(stack_name)
    z = lay.sizes(d)
    exact = kv_bytes_per_token(spec, lay)
    # the records' source (the first), and the one the layout rests on least where one was not found or not modelled
    src = lay.sources[0]
    unread = next((s for s in lay.sources if not s.found), None)
    return (
        f"analytic: DeepSeek-V4 compressed cache (step/dsv4_cache), {d.n_csa} CSA layers x ({z.csa} + {z.index} B) / 4"
        f" + {d.n_hca} HCA x {z.hca} B / 128 = {float(exact):,.2f} B a token, carried as {per_layer_kv_bytes_ceil(spec, lay)}"
        f" B a token x {len(d.compress_ratios)} layers (rounded up); {lay.engine}'s layout ({src.repo} {src.file} "
        f"{src.symbol.split(' (')[0]}"
        + ("" if unread is None else f"; {unread.file} {unread.symbol.split(' (')[0]}: {unread.note}")
        + "), whatever --kv-dtype says"
    )


def state_source_text(spec: ModelSpec, stack_name: str, *, speculative: bool = False) -> str:
    if _dims(spec).csa2 is not None:
        return csa2_state_source_text(spec)
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


# --- DeepSeek-V4.1 (CSA2): the main KV and the indexer keys on the KV-source layers only --------------------
#
# ``ModelSpec.dsv4.csa2`` set (k3plan.models.families.deepseek_v41): only the ``kv_source_layer_ids`` keep a
# compressed cache, one entry a ``compress_ratios[i]`` tokens (V4.1-Flash: layers 2, 8, 14 at 2, layer 20 at 1),
# and the layers after a source read its entries (shared, not copied). Its formats, as the V4.1 release
# describes them: the main KV in FP4 -- E2M1 two a byte with an E4M3 scale every 16 channels (head_dim / 2 +
# head_dim / 16 = 288 B), the indexer key in FP4 with an E8M0 scale a 32 (index_head_dim / 2 + / 32 = 68 B), and
# the sliding window kept in FP8 on every layer (head_dim + head_dim / 32 scales = 528 B). So a token adds
# sum over sources (288 + 68) / ratio = 890 B (V4.1-Flash), whatever the layer count.
V41_SOURCES = (
    Source(
        "deepseek-ai/FlashMLA",
        "README.md",
        "the V4.1 KV formats: SWA entry 528 B, global main KV entry 288 B (V4's main entry 584 B)",
        "07a1089857b63e74e3133630c02b083b75e8d4b2",
        found=False,
        note="quoted with this commit by 899ms/ai-infra-book "
        "calculations/research/deepseek-v41-flash/README.md @7d095c36ee957bfa27890da881b1820c9a053c6b, which "
        "derives 890 B a token as (3/2 + 1) x (288 + 68)",
    ),
    Source(
        "NVIDIA-NeMo/Automodel",
        "nemo_automodel/components/models/deepseek_v41/attention.py",
        "CSA2 from the official V4.1 inference model: Full layers publish compressed KV and index keys, Reindex "
        "layers replace only the selection, Reuse layers consume it; 'the released FP8 window KV and FP4 "
        "compressed KV/indexer representations'",
        "",
        note="read on docs.nvidia.com/nemo/automodel/v0.5 (module docstring); commit not pinned",
    ),
    Source(
        "deepseek-ai/DeepSeek-V4.1-Flash",
        "inference/model.py",
        "Compressor: fp4_act_quant(scale_dtype=e4m3, block 16) of the compressed KV; the window in fp8",
        "dba1be0a40aa45a94ad051997016db3960a90277",
        found=False,
        note="the release's reference code, as public ports of it describe it (not in the stored material)",
    ),
)


def v41_main_entry_bytes(d: DSV4Dims) -> int:
    """One CSA2 compressed main-KV entry: FP4 values, an E4M3 scale a 16 (288 B for head_dim 512)."""
    return d.head_dim // 2 + d.head_dim // 16


def v41_index_bytes(d: DSV4Dims) -> int:
    """One CSA2 indexer key: FP4 values, an E8M0 scale a 32 (68 B for index_head_dim 128)."""
    return d.index_head_dim // 2 + d.index_head_dim // 32


def v41_window_entry_bytes(d: DSV4Dims) -> int:
    """One sliding-window entry: FP8 values, a scale a 32 (528 B for head_dim 512)."""
    return d.head_dim + d.head_dim // 32


# How vLLM-Ascend's DeepseekV41 implementation lays the caches out (vLLM's CUDA backends lay them out otherwise:
# engines/vllm/dsv4_pages.py dsv41_pages, which the vllm stack's start check uses): one page slot a KV source; a source's compressed KV and index keys share a block ID at disjoint
# offsets; the ratio-2 sources' compressor state ring (32 fp32 rows) and the 128-token windows of every n-th layer
# (n = the number of sources) overlay the same slot at other block IDs, with the three DSpark draft windows on the
# first three slots; the slot's page is the largest of them; one block pool, num_blocks = free bytes / the slots'
# pages summed. The bytes of each plane are the backend's (INT8 index keys with FP16 scales on Ascend), not
# priced here: the sets of layers are what k3plan's CSA2 terms share with it (csa2_engine_slots).
V41_ENGINE_LAYOUT = Source(
    "vllm-project/vllm-ascend",
    "vllm_ascend/core/deepseek_v41.py",
    "plan_cache_slots / allocate_cache_config (DeepseekV41FullSpec, DeepseekV41IndexerSpec, DeepseekV41SWASpec, "
    "DeepseekV41DraftSWASpec, DeepseekV41CompressorStateSpec; STATE_RING_ROWS = 32)",
    "0dcdd80d93194cf36c0c07daca38dee50266825f",
)


@dataclass(frozen=True)
class EngineSlot:
    """One page slot of vLLM's V4.1 layout: the KV source whose KV and index keys it holds, the source's state ring
    (ratio 2 only), the layers whose windows overlay it, and the DSpark draft window on it (None: none)."""

    source: int
    state: int | None
    windows: tuple[int, ...]
    draft: int | None


def csa2_engine_slots(d: DSV4Dims, *, draft_layers: int = 0) -> tuple[EngineSlot, ...]:
    """The slots ``V41_ENGINE_LAYOUT`` plans for this config: a slot a KV source (in layer order), the ratio-2
    sources' state rings on the first slots, window k on slot k mod sources, draft window j on slot j."""
    src = sorted(csa2_sources(d))
    rings = [i for i, r in src if r == 2]
    n, layers = len(src), len(d.compress_ratios)
    return tuple(
        EngineSlot(
            source=layer,
            state=rings[k] if k < len(rings) else None,
            windows=tuple(range(k, layers, n)),
            draft=k if k < draft_layers else None,
        )
        for k, (layer, _) in enumerate(src)
    )


def csa2_sources(d: DSV4Dims) -> tuple[tuple[int, int], ...]:
    """(layer, ratio) of the KV-source layers."""
    assert d.csa2 is not None
    return tuple((i, d.compress_ratios[i]) for i in d.csa2.kv_source_layer_ids)


def csa2_source_of(d: DSV4Dims, layer: int) -> int | None:
    """The KV source a layer reads: the last source at or before it (None for the layers before the first)."""
    assert d.csa2 is not None
    before = [i for i in d.csa2.kv_source_layer_ids if i <= layer]
    return max(before) if before else None


def _csa2_kv_bytes_per_token(d: DSV4Dims) -> Fraction:
    per = v41_main_entry_bytes(d) + v41_index_bytes(d)
    return sum((Fraction(per, r) for _, r in csa2_sources(d)), Fraction(0))


def _csa2_classical_bytes(d: DSV4Dims, context: int) -> int:
    per = v41_main_entry_bytes(d) + v41_index_bytes(d)
    return sum((context // r) * per for _, r in csa2_sources(d))


def _csa2_state_terms(d: DSV4Dims) -> StateTerms:
    """The window on every layer, in FP8. The compressors' tails (at most ratio - 1 = 1 token a ratio-2 source)
    are not modelled: 0 here, said in the text below."""
    return StateTerms(
        window_bytes=len(d.compress_ratios) * d.sliding_window * v41_window_entry_bytes(d),
        compressor_bytes=0,
        indexer_compressor_bytes=0,
    )


def _csa2_decode_read(d: DSV4Dims, context: int) -> DecodeRead:
    """One decode query: the first indexer on each source scores every key of it, a later one the candidate set
    (``candidate_topk_blocks`` x ``candidate_block_size`` entries) picked on ``candidate_source_layer_id``; each
    layer with a ratio reads the top-k entries of its source plus its window; a window-only layer its window."""
    c2 = d.csa2
    assert c2 is not None
    main, idx, win = v41_main_entry_bytes(d), v41_index_bytes(d), v41_window_entry_bytes(d)
    w = min(d.sliding_window, context)
    cand = c2.candidate_topk_blocks * c2.candidate_block_size
    keys = {i: context // r for i, r in csa2_sources(d)}
    indexer = 0
    for i in c2.index_source_layer_ids:
        src = csa2_source_of(d, i)
        n = keys.get(src, 0) if src is not None else 0
        if i in keys or not cand:
            indexer += n * idx
        else:
            indexer += min(n, cand) * idx
    sparse = window = 0
    for layer, r in enumerate(d.compress_ratios):
        src = csa2_source_of(d, layer)
        if r and src is not None:
            sparse += min(d.index_topk, keys[src]) * main + w * win
        else:
            window += w * win
    return DecodeRead(indexer_bytes=indexer, csa_bytes=sparse, hca_bytes=0, window_bytes=window)


def csa2_kv_source_text(spec: ModelSpec) -> str:
    d = _dims(spec)
    main, idx = v41_main_entry_bytes(d), v41_index_bytes(d)
    exact = _csa2_kv_bytes_per_token(d)
    srcs = ", ".join(f"layer {i} / {r}" for i, r in csa2_sources(d))
    return (
        f"analytic: DeepSeek-V4.1 CSA2 shared cache (step/dsv4_cache): KV sources {srcs}, each entry FP4 main KV "
        f"{main} B + FP4 indexer key {idx} B = {float(exact):,.2f} B a token for the whole model (the later layers "
        f"read the sources' entries, no copy), carried as {per_layer_kv_bytes_ceil(spec)} B a token x "
        f"{len(d.compress_ratios)} layers (rounded up); formats: {V41_SOURCES[0].repo} {V41_SOURCES[0].file} "
        f"@{V41_SOURCES[0].commit[:12]} (not read here: {V41_SOURCES[0].note})"
    )


def csa2_state_source_text(spec: ModelSpec) -> str:
    d = _dims(spec)
    t = _csa2_state_terms(d)
    return (
        f"analytic: DeepSeek-V4.1 window (step/dsv4_cache): {d.sliding_window} FP8 entries of "
        f"{v41_window_entry_bytes(d)} B x {len(d.compress_ratios)} layers = {t.window_bytes:,} B; the ratio-2 "
        "sources' compressor tails (at most one token each) not modelled; whole on every TP rank"
    )


# --- DeepSeek-V4.1's Engram: a memory tier of its own --------------------------------------------------------
#
# The n-gram tables (``dsv4.engram``; kind ``engram`` in the inventory, outside the backbone's weights) are
# only looked up: a token reads ``(max_ngram_size - 1) x n_heads`` rows of ``head_dim`` e4m3 values + their
# E8M0 scales on each Engram layer (V4.1-Flash: 24 rows x 264 B x 2 layers = 12,672 B), at addresses fixed by
# the input tokens alone, so the rows can be fetched from host memory ahead of the layer. Where an engine keeps
# them by default (its cited source): vLLM in pinned host memory (``EngramConfig.cpu_offload`` True, each DP
# replica its own TP-sharded copy; one copy a node with ``dp_shared_memory``), SGLang in device memory with the rows split over the TP
# group (``--engram-config`` placement gpu, replication none). The projections (``engram.wkv``, ``q_weight``,
# ``k_weight``) stay on the device either way.
# Each engine's placement, cited: ``Engine.engram`` (engines/<engine>/dsv4.py).


@dataclass(frozen=True)
class EngramTier:
    placement: str  # "hbm" | "host"
    table_bytes: int  # every table, one copy
    projection_bytes: int  # wkv / q_weight / k_weight, on every device (replicated: an upper bound)
    hbm_bytes_per_device: int  # what a device holds: projections, plus its rows where placement is hbm
    host_bytes_per_host: int  # what a host holds where placement is host: its TP shards, ``host_copies`` times
    bytes_per_token: int  # the rows one token reads over every Engram layer
    source: Source
    default: str = ""  # the engine's own placement (``source``); "" or == placement: not overridden
    host_copies: int = 1  # copies of its TP shards a host holds: one a DP replica on it, or one a node

    def text(self) -> str:
        src = self.source
        asked = f"--engram {self.placement}, the engine's default being {self.default}: " if self.overridden else ""
        where = (
            f"in HBM, rows split over the TP group: {self.hbm_bytes_per_device:,} B a device with the projections"
            if self.placement == "hbm"
            else f"in host memory ({self.host_bytes_per_host:,} B a host"
            + (f": {self.host_copies} copies, one a DP replica on it" if self.host_copies > 1 else "")
            + f"), projections {self.projection_bytes:,} B a device in HBM"
        )
        return (
            f"Engram tables {self.table_bytes:,} B {where}; a token reads {self.bytes_per_token:,} B of rows, addressed "
            f"by the input tokens alone (prefetchable); {asked}{src.repo} {src.file} {src.symbol.split(' (')[0]}"
            + ("" if src.found else f" (not found: {src.note})")
        )

    @property
    def overridden(self) -> bool:
        return bool(self.default) and self.default != self.placement


def engram_table_row_bytes(spec: ModelSpec) -> int:
    g = _dims(spec).engram
    assert g is not None
    return g.head_dim + g.head_dim // 32  # e4m3 values + one E8M0 scale a 32


def engram_bytes_per_token(spec: ModelSpec) -> int:
    """Rows one token reads, all Engram layers: (max_ngram - 1) x n_heads rows a layer (12,672 B, V4.1-Flash)."""
    g = _dims(spec).engram
    assert g is not None
    return g.rows_per_token_layer * len(g.layer_ids) * engram_table_row_bytes(spec)


def engram_split(inventory) -> tuple[int, int]:
    """(table bytes, projection bytes) of the inventory's Engram tensors (kind ``engram``)."""
    tensors = inventory.of_kind("engram")
    table = sum(t.nbytes for t in tensors if t.name.endswith("engram.embed"))
    return table, sum(t.nbytes for t in tensors) - table


def engram_hbm_bytes_per_device(*, table: int, projections: int, placement: str, tp):
    """What a device holds of the Engram tensors: the projections, plus its share of the rows over the TP group
    where the tables are in HBM. ``tp`` an int or a numpy column (plan's rows)."""
    return projections + (-(-table // tp) if placement == "hbm" else 0 * tp)


def engram_placement(stack_name: str, asked: str | None = None) -> str:
    """Where the Engram tables live: ``asked`` (--engram), else ``stack_name``'s engine's default."""
    return asked or engine_rules(stack_name).engram.placement


def engram_tier(
    spec: ModelSpec,
    inventory,
    stack_name: str,
    *,
    tp: int,
    devices_per_host: int,
    hosts: int,
    placement: str | None = None,
    dp: int = 1,
    host_copies: str | None = None,
) -> EngramTier | None:
    """Where ``stack_name``'s engine keeps the Engram tables (``placement`` "hbm" / "host" overrides its
    default: --engram), and what that costs a device and a host; None for a model without Engram. In host
    memory a host holds its TP shards once a node, or (``host_copies`` "replica", the engine's default where its
    source says so) once for each of the ``dp`` replicas whose devices it holds."""
    d = _dims(spec)
    if d.engram is None:
        return None
    table, proj = engram_split(inventory)
    engram = engine_rules(stack_name).engram
    default, source = engram.placement, engram.source
    placement = engram_placement(stack_name, placement)
    tp_hosts = min(max(1, -(-tp // max(devices_per_host, 1))), max(hosts, 1))
    copies = 1
    if placement == "host" and (host_copies or engram.host_copies) == "replica" and tp_hosts == 1:
        copies = max(1, min(max(dp, 1), max(devices_per_host, 1) // max(tp, 1)))  # the replicas a host runs
    return EngramTier(
        placement=placement,
        table_bytes=table,
        projection_bytes=proj,
        hbm_bytes_per_device=engram_hbm_bytes_per_device(
            table=table, projections=proj, placement=placement, tp=max(tp, 1)
        ),
        host_bytes_per_host=-(-table // tp_hosts) * copies if placement == "host" else 0,
        bytes_per_token=engram_bytes_per_token(spec),
        source=source,
        default=default,
        host_copies=copies,
    )
