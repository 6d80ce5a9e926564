"""vLLM's KV groups and block accounting for DeepSeek-V4 (v0.25.0; later releases below), as its code builds them:
what one block id costs and how many block ids a request at ``max_model_len`` holds, from config.json's numbers
alone.

Each V4 layer registers several caches (vllm/model_executor/layers/deepseek_v4_attention.py, COMPRESSOR):

- every layer: a sliding-window cache, 64-token blocks of 584 B entries (``DeepseekV4SWACache``);
- a compressed layer: its compressed cache, a ``--block-size`` block holding block / ratio entries of 584 B
  (``MLAAttentionSpec(compress_ratio, fp8_ds_mla, model_version="deepseek_v4")``: storage_block_size x 584), and
  its compressor's state, f32 rows of 2 x coff x head_dim in blocks of 4 (ratio 4) or 8 (ratio 128) tokens with a
  window of coff x ratio tokens (``CompressorStateCache``, ``SlidingWindowMLASpec``);
- a CSA layer (ratio 4) also its indexer's keys (128 fp8 + 4 B scale a compressed entry) and that indexer's
  compressor state (2 x 2 x index_head_dim f32 rows, the same blocks and window as the main one's);

every page padded to a multiple of 576 B (``alignment=576``). ``group_and_unify_kv_cache_specs`` puts the
compressed caches and indexer keys in one group and buckets the windowed caches by (block, window);
``_get_kv_cache_groups_uniform_groups`` picks one tuple count for all groups (``_approximate_gcd`` of each
group's most common page-size count, the compressed group's as the floor), pads each windowed page up to the
nearest compressed-group page size and cuts each bucket into cdiv(layers, tuples) groups. The packed layout
gives every group the same block ids out of one pool, a block holding each page size as often as the group with
most pages of that size has it (``Dsv4Pages.block_bytes``); the start check charges a block the tuple count x
the compressed group's distinct page sizes summed (``_max_memory_usage_bytes_from_groups``: 'Even groups with
fewer actual tuples still reserve the global number of tuple slots'). A request holds, a group, the most pages any of its
layers needs (``UniformTypeKVCacheSpecs.max_memory_usage_pages``): cdiv(max_model_len, block) for the
compressed group (``FullAttentionSpec``), cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block)
+ 1 for a windowed one (``SlidingWindowSpec``); "Maximum concurrency" is num_blocks over their sum
(``get_max_concurrency_for_kv_cache_config``).

Later releases (``fit --engine-version``; read in the 0.26.0 .. 0.31.0 wheels, ``V4_FORM_SOURCES``): 0.26.0 is the
above; from 0.27.0 (vllm-project/vllm#48993, merged 2026-07-17) the windowed pages are not padded ('The packed block
planner overlays groups, so their page sizes do not need to match') and a block costs the largest group's pages
summed (``_get_packed_kv_cache_layout``'s block_stride), the check still charging the tuple count x the compressed
group's page sizes; from 0.29.0 ``_get_packed_kv_cache_groups`` buckets the layers (one repeat count over the
balanced buckets, a bucket whose page sizes have unequal counts kept whole), the check charges a block what the pool
does (``_pool_bytes_per_block``) and plans against the memory less one block (the null block BlockPool holds back).
Without ``--engine-version`` the groups are v0.25.0's, the code first read. #52495 (open) counts the windowed groups'
in-flight tokens once a pool: not applied.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from k3plan.engines.release import release_text
from k3plan.models.spec import DSV4Dims

if TYPE_CHECKING:
    from k3plan.engines.dsv4_layout import RequestCharge
    from k3plan.engines.release import Release

ALIGN = 576  # FlashMLA's page alignment: every V4 page a multiple of it
SWA_BLOCK = 64  # DeepseekV4SWACache.block_size
STATE_BLOCK = {4: 4, 128: 8}  # CompressorStateCache.block_size by compress ratio
F32 = 4
CSA = 4

SOURCES = (
    "vllm-project/vllm vllm/model_executor/layers/deepseek_v4_attention.py @b92a330e "
    "(DeepseekV4MLAAttention.get_kv_cache_spec, DeepseekV4IndexerCache.get_kv_cache_spec: alignment=576)",
    "vllm-project/vllm vllm/model_executor/layers/deepseek_compressor.py @0de10a27 (CompressorStateCache: "
    "block_size 4 / 8, sliding_window = coff x ratio, state_dim = 2 x coff x head_dim f32)",
    "vllm-project/vllm vllm/v1/core/kv_cache_utils.py (group_and_unify_kv_cache_specs, _approximate_gcd, "
    "_get_kv_cache_groups_uniform_groups, _max_memory_usage_bytes_from_groups, "
    "get_max_concurrency_for_kv_cache_config: V4-era code read in a stored annotated copy, commit not pinned)",
    "vllm-project/vllm vllm/v1/kv_cache_interface.py @001cabc1 (FullAttentionSpec / SlidingWindowSpec "
    ".max_memory_usage_bytes)",
)
# The forms of vLLM's V4 groups by release (module docstring): (first release, the form's name, where it was read)
V4_FORM_SOURCES = (
    (
        (0, 29, 0),
        "0.29.0",
        "vllm 0.29.0 wheel v1/core/kv_cache_utils.py _get_packed_kv_cache_groups, _get_kv_cache_bytes_per_block (the "
        "largest group's page bytes), _max_memory_usage_bytes_from_groups (_pool_bytes_per_block x the groups' pages), "
        "check_enough_kv_cache_memory / get_kv_cache_configs ('Reserve the null block BlockPool permanently holds "
        "back'); the same functions in the 0.31.0 wheel for V4's specs",
    ),
    (
        (0, 27, 0),
        "0.27.0",
        "vllm 0.27.0 wheel v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_groups ('The packed block planner "
        "overlays groups, so their page sizes do not need to match': no padding), _get_packed_kv_cache_layout "
        "(block_stride: the largest group's pages summed), _max_memory_usage_bytes_from_groups (the tuple count x the "
        "compressed group's page sizes, as 0.25.0-0.28.0)",
    ),
)
V4_FIRST_FORM = "0.25.0"
# the concurrency vLLM logs for V4's groups ("Maximum concurrency for N tokens per request"), by release
REPORT_SOURCES = (
    "to 0.26.0 (read in the 0.23.0, 0.25.0 and 0.26.0 wheels): v1/core/kv_cache_utils.py "
    "get_max_concurrency_for_kv_cache_config "
    "divides num_blocks by cdiv(num_layer_per_group x the groups' max_memory_usage_bytes summed, the first group's "
    "page_size_bytes x num_layer_per_group); from 0.27.0 (read in the 0.27.0 .. 0.31.0 wheels) by the groups' "
    "cdiv(max_memory_usage_bytes, page_size_bytes) summed ('A request at max_model_len consumes whole blocks from each "
    "group's block table')"
)


def v4_form(release: Release | None) -> tuple[str, str]:
    """(the form of vLLM's V4 groups ``release`` builds, where it was read): v0.25.0's without a release."""
    for since, name, source in V4_FORM_SOURCES:
        if release is not None and release >= since:
            return name, source
    return V4_FIRST_FORM, SOURCES[2]


def v4_record_bytes(d: DSV4Dims) -> int:
    """V4's packed fp8_ds_mla entry: fp8 NoPE, bf16 RoPE, a UE8M0 scale a 64 NoPE values and a pad byte (584 B)."""
    nope = d.head_dim - d.rope_dim
    return nope + 2 * d.rope_dim + nope // 64 + 1


def fp8_index_entry_bytes(d: DSV4Dims) -> int:
    """One fp8 indexer key: fp8 values and an f32 scale a 128 (132 B)."""
    return d.index_head_dim + d.index_head_dim // 128 * F32


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Group:
    """One KV cache group: its layers' page sizes (after padding), block tokens and window (0: full)."""

    name: str
    pages: tuple[int, ...]
    block_tokens: int
    window: int
    ring: bool = False  # a per-request ring (CircularBufferSpec): one page a request

    def pages_per_request(self, *, max_model_len: int, max_num_batched_tokens: int) -> int:
        if self.ring:
            return 1
        if not self.window:
            return _cdiv(max_model_len, self.block_tokens)
        tokens = min(self.window - 1 + max_num_batched_tokens, max_model_len)
        return _cdiv(tokens, self.block_tokens) + 1


@dataclass(frozen=True)
class Dsv4Pages:
    groups: tuple[Group, ...]
    num_layer_tuples: int
    layer_tuple_bytes: int
    form: str = V4_FIRST_FORM  # the release whose code built these groups (v4_form)
    form_source: str = SOURCES[2]

    @property
    def block_bytes(self) -> int:
        """What one block id costs in the pool. v0.25.0 / 0.26.0: each page size as many times as the group holding
        most pages of that size has them (the layout vllm-project/vllm#48993 calls its baseline, 'buckets layers by
        page size': V4-Pro's 1,473,408 B a block on FlashMLA there; tests/engines/test_vllm_dsv4_pages.py); from
        0.27.0 the largest group's pages summed (groups overlay one block)."""
        if self.form != V4_FIRST_FORM:
            return max(sum(g.pages) for g in self.groups)
        sizes = {p for g in self.groups for p in g.pages}
        return sum(size * max(g.pages.count(size) for g in self.groups) for size in sizes)

    @property
    def check_block_bytes(self) -> int:
        """What the start check charges a block: the tuple count x the compressed group's page sizes summed
        (_max_memory_usage_bytes_from_groups, to 0.28.0); from 0.29.0 the pool's own bytes a block."""
        if self.form == "0.29.0":
            return self.block_bytes
        return self.num_layer_tuples * self.layer_tuple_bytes

    @property
    def check_reserve_bytes(self) -> int:
        """What the start check takes off the available memory first: one block from 0.29.0 (the null block)."""
        return self.block_bytes if self.form == "0.29.0" else 0

    def blocks_per_request(self, *, max_model_len: int, max_num_batched_tokens: int) -> int:
        return sum(
            g.pages_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
            for g in self.groups
        )

    def reported_blocks_per_request(self, *, max_model_len: int, max_num_batched_tokens: int) -> int:
        """The blocks a request takes in the concurrency vLLM logs: each group's pages (``blocks_per_request``) from
        0.27.0; before it every group's bytes a request summed over the first group's page (``REPORT_SOURCES``), so
        a group whose pages are smaller than the compressed group's counts for less."""
        if self.form != V4_FIRST_FORM:
            return self.blocks_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
        held = sum(
            g.pages_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
            * sum(g.pages)
            for g in self.groups
        )
        first = sum(self.groups[0].pages)
        return -(-held // first)

    def label(self) -> str:
        """Whose groups these are, for the source line."""
        return (
            f"vLLM v{self.form}'s DeepSeek-V4 groups ({self.num_layer_tuples} layer tuples of "
            f"{self.layer_tuple_bytes:,} B)"
        )

    def sources(self) -> str:
        return self.form_source

    def text(self, *, max_model_len: int, max_num_batched_tokens: int) -> str:
        parts = ", ".join(
            f"{g.name} {g.pages_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens):,}"
            for g in self.groups
        )
        return (
            f"{self.label()}: a block costs {self.block_bytes:,} B; a request at {max_model_len:,} tokens holds {parts} "
            f"blocks (max_num_batched_tokens {max_num_batched_tokens:,}): engines/vllm/dsv4_pages.py ({self.sources()})"
        )


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the d in [lower_bound, max] padding the values least (ties: larger d)."""
    best_d, best_pad = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


def _split(pages: list[int], n: int) -> list[tuple[int, ...]]:
    """A bucket cut into ``n`` groups as vLLM cuts it: the layers of each page size in order, zipped into repeats
    of the pattern (one layer a page size), group i taking every n-th repeat."""
    if n == 1:
        return [tuple(pages)]
    by_size: dict[int, list[int]] = {}
    for p in pages:
        by_size.setdefault(p, []).append(p)
    repeats = list(zip(*by_size.values(), strict=False))
    return [tuple(p for r in repeats[i::n] for p in r) for i in range(n)]


def _most(pages: list[int]) -> int:
    return Counter(pages).most_common(1)[0][1]


def dsv4_pages(
    d: DSV4Dims, *, block_tokens: int, swa_layers: int | None = None, release: Release | None = None
) -> Dsv4Pages:
    """vLLM's V4 groups for ``--block-size`` ``block_tokens`` (module docstring). ``swa_layers``: the layers with
    a window cache (default every decoder layer; an MTP draft layer adds one); ``release``: the vLLM release whose
    grouping to follow (``v4_form``; None: v0.25.0's)."""
    form, form_source = v4_form(release)
    entry = v4_record_bytes(d)  # 584: head_bytes
    index_entry = fp8_index_entry_bytes(d)  # 132
    mla: list[int] = []  # the compressed group's pages, a layer each
    buckets: dict[tuple[int, int], list[int]] = {}
    n_swa = len(d.compress_ratios) if swa_layers is None else swa_layers
    buckets[(SWA_BLOCK, d.sliding_window)] = [_align(SWA_BLOCK * entry)] * n_swa
    for r in d.compress_ratios:
        if not r:
            continue
        storage = block_tokens // r
        mla.append(_align(storage * entry))
        coff = 2 if r == CSA else 1
        sb = STATE_BLOCK[r]
        state = buckets.setdefault((sb, coff * r), [])
        state.append(_align(sb * 2 * coff * d.head_dim * F32))
        if r == CSA:
            mla.append(_align(storage * index_entry))
            state.append(_align(sb * 2 * coff * d.index_head_dim * F32))
    mla_sizes = sorted(set(mla))
    if form == "0.29.0":
        # _get_packed_kv_cache_groups: a bucket is balanced when each of its page sizes has as many layers; the
        # largest balanced bucket with several sizes sets the floor of the repeat count, picked over the balanced
        # buckets; a balanced bucket is cut into cdiv(its layers a size, repeats) groups, any other kept whole
        every = [mla, *buckets.values()]
        balanced = [len(set(Counter(p).values())) == 1 for p in every]
        floor = max((_most(p) for p, b in zip(every, balanced) if b and len(set(p)) > 1), default=0)
        repeats = _approximate_gcd([_most(p) for p, b in zip(every, balanced) if b], lower_bound=floor) if floor else 0
        tuples = repeats or 1
        cuts = [(p, _cdiv(_most(p), repeats) if b and repeats else 1) for p, b in zip(every, balanced)]
    else:
        counts = [_most(mla)] + [_most(p) for p in buckets.values()]
        tuples = _approximate_gcd(counts, lower_bound=counts[0])
        # to 0.26.0 each windowed page is padded up to the nearest compressed-group page size; not from 0.27.0
        held = [
            [min(x for x in mla_sizes if x >= p) for p in pages] if form == V4_FIRST_FORM else pages
            for pages in buckets.values()
        ]
        cuts = [(mla, 1)] + [(h, _cdiv(_most(h), tuples)) for h in held]
    groups = []
    for (block, window), (pages, n_groups) in zip([(block_tokens, 0), *buckets], cuts):
        kind = "compressed" if not window else "window" if block == SWA_BLOCK else f"state/{block}"
        for i, part in enumerate(_split(pages, n_groups)):
            groups.append(Group(kind if n_groups == 1 and not window else f"{kind}[{i}]", part, block, window))
    return Dsv4Pages(
        groups=tuple(groups),
        num_layer_tuples=tuples,
        layer_tuple_bytes=sum(mla_sizes),
        form=form,
        form_source=form_source,
    )


# --- DeepSeek-V4 with the hybrid KV cache manager off (--disable-hybrid-kv-cache-manager) -------------------------
#
# get_kv_cache_groups first calls unify_hybrid_kv_cache_specs, which turns every sliding-window spec into a full-
# attention one: a SlidingWindowMLASpec (V4's window cache, a compressor's state, an indexer compressor's state) becomes
# an MLAAttentionSpec of the full-attention layers' block (--block-size), keeping its head size, dtype, cache dtype,
# alignment (576), compress ratio (1) and model version; the compressed caches and index keys are MLAAttentionSpecs
# already. Every layer is then a FullAttentionSpec of one block size, so UniformTypeKVCacheSpecs puts them all in one
# group: a block costs every layer's page summed, a request at max_model_len holds cdiv(max_model_len, block) of them
# (UniformTypeKVCacheSpecs.max_memory_usage_bytes), and the window caches and states are kept for every token ('we do
# not enable any optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding window)').
# The pages: the window cache as fp8_ds_mla (the attention layer turns fp8 into fp8_ds_mla on the shared cache config
# before the specs are read) holds block x 584 B; a compressor's state block x state_dim f32 (state_dim 2 x coff x
# head_dim, coff 2 at ratio 4, 1 at 128); an indexer compressor's block x 2 x 2 x index_head_dim f32; the compressed
# cache and the index keys as with the manager on (block / ratio entries); each rounded up to 576 B (a page whose size
# changes is padded again: _apply_alignment_padding). Read in the 0.20.0 wheel (PyPI): v1/core/kv_cache_utils.py
# get_kv_cache_groups, unify_hybrid_kv_cache_specs; v1/kv_cache_interface.py MLAAttentionSpec, SlidingWindowMLASpec,
# UniformTypeKVCacheSpecs, _apply_alignment_padding; model_executor/layers/deepseek_v4_attention.py,
# deepseek_compressor.py CompressorStateCache, v1/attention/backends/mla/sparse_swa.py DeepseekV4SWACache; the
# conversion the same in the 0.21.0 and 0.26.0 wheels (0.21.0 adds head_size_v and kv_quant_mode to the plain
# sliding-window branch only). InferenceX's DeepSeek-V4-Pro at 1,000,000 tokens on B300 logs the check's 442.99 GiB
# needed and its estimated maximum of 236,288 tokens: 3,907 blocks of 121,745,664 B, and 923 blocks of 256 tokens in
# its 104.74 GiB (the case tests/engines/cases/vllm-inferencex-dsv4-pro-b300-dp8-cpu-offload-1m.yaml).
UNIFIED_READ = ((0, 20, 0), (0, 26, 0))  # the releases whose conversion was read (first, last)
UNIFIED_SOURCE = (
    "vllm 0.20.0 wheel (PyPI) v1/core/kv_cache_utils.py get_kv_cache_groups / unify_hybrid_kv_cache_specs (every "
    "SlidingWindowMLASpec an MLAAttentionSpec of the full-attention block), v1/kv_cache_interface.py "
    "UniformTypeKVCacheSpecs (one group, a block every layer's page summed); the same in the 0.21.0 and 0.26.0 wheels"
)


@dataclass(frozen=True)
class Dsv4UnifiedPages(Dsv4Pages):
    """V4's caches with the hybrid KV cache manager off: one group of every layer's page at the full block."""

    def label(self) -> str:
        return (
            f"vLLM's DeepSeek-V4 caches with the hybrid KV cache manager off (every cache a full-attention page of "
            f"{self.groups[0].block_tokens} tokens, {len(self.groups[0].pages)} pages in one group)"
        )

    def sources(self) -> str:
        return UNIFIED_SOURCE


def dsv4_unified_pages(d: DSV4Dims, *, block_tokens: int) -> Dsv4UnifiedPages:
    """vLLM's V4 caches at ``--block-size`` ``block_tokens`` with ``--disable-hybrid-kv-cache-manager`` (the comment
    above): one group whose block holds every cache's page at ``block_tokens``, held for every token of a request."""
    entry = v4_record_bytes(d)
    index_entry = fp8_index_entry_bytes(d)
    pages: list[int] = []
    for r in d.compress_ratios:
        pages.append(_align(block_tokens * entry))  # the window cache, a full-attention fp8_ds_mla page
        if not r:
            continue
        coff = 2 if r == CSA else 1
        pages.append(_align(block_tokens // r * entry))  # the compressed cache
        pages.append(_align(block_tokens * 2 * coff * d.head_dim * F32))  # its compressor's state, a row a token
        if r == CSA:
            pages.append(_align(block_tokens // r * index_entry))  # the index keys
            pages.append(_align(block_tokens * 2 * coff * d.index_head_dim * F32))  # the indexer compressor's state
    return Dsv4UnifiedPages(
        groups=(Group("every cache", tuple(pages), block_tokens, 0),),
        num_layer_tuples=1,
        layer_tuple_bytes=sum(pages),
        form="hybrid manager off",
        form_source=UNIFIED_SOURCE,
    )


# --- DeepSeek-V4.1 (CSA2) on vLLM's CUDA backends, from its own code -------------------------------------------
#
# vllm-project/vllm vllm/models/deepseek_v41/attention.py @02ee13be (DeepseekV4Attention.__init__ and
# get_kv_cache_spec, DeepseekV4IndexerCache.get_kv_cache_spec, _indexer_k_cache_head_dim):
# - every layer (a DSpark draft layer too: 'MTP layers past the configured list are pure sliding-window') keeps a
#   sliding-window cache (DeepseekV4SWACache): blocks of 32 tokens (64 on SM120), the window ``sliding_window``,
#   packed records of 528 B on SM100 ('the V4.1 MXFP8 record': 512 data + 16 scale bytes) and 584 B elsewhere
#   (V4's record);
# - only the KV sources (``kv_source_layer_ids``) keep a compressed cache and the index keys ('Only kv-source
#   layers own a compressed-KV cache'; 'Index K cache: owned only by kv-source layers'): an MLAAttentionSpec of
#   ``block_size`` x ratio tokens, ``block_size`` entries of the packed record (288 B with --kv-cache-dtype
#   nvfp4_ds_mla), and an index-key spec of the same block, 132 B an entry (fp8 + an f32 scale a 128) or 68 B
#   with the MXFP4 indexer cache;
# - every page rounded up to 512 B on SM100, 576 B elsewhere (kv_page_alignment);
# vllm/models/deepseek_v41/compressor.py @1bd03b16 (DeepseekCompressor, CompressorStateCache): the ratio-2 sources'
#   compressor keeps a per-request ring of [kv, score] f32 rows (2 x head_dim), max(8, the power of two >=
#   num_speculative_tokens + 2) rows a block, CircularBufferSpec; ratio 1 keeps none;
# vllm/models/deepseek_v4/nvidia/kv_cache_planner.py @cb41f396 (DeepseekV4KVCachePlanner): the compressed caches
#   and index keys in one group, the windowed caches bucketed by (block, window) and padded up to the nearest
#   compressed-group page size, one tuple count for all groups (_approximate_gcd, the compressed group's as the
#   floor), num_blocks = available // (the compressed group's page sizes summed x the tuple count), and a request
#   charged the tuple count x each group's pages (_max_memory_usage_bytes_from_groups).
# Not read: how the planner groups the compressor rings (CircularBufferSpec, newer than the planner read); k3plan
# gives them a group of their own, one ring page a request.
V41_SOURCES = (
    "vllm-project/vllm vllm/models/deepseek_v41/attention.py @02ee13be (DeepseekV4Attention: swa_bytes_per_token "
    "528 on SM100 else 584, kv_page_alignment 512 / 576, swa_block_size 32; get_kv_cache_spec: kv sources only; "
    "DeepseekV4IndexerCache: owned by kv sources, 132 / 68 B an entry)",
    "vllm-project/vllm vllm/models/deepseek_v41/compressor.py @1bd03b16 (CompressorStateCache: ratio-2 sources, "
    "CircularBufferSpec)",
    "vllm-project/vllm vllm/models/deepseek_v4/nvidia/kv_cache_planner.py @cb41f396 (DeepseekV4KVCachePlanner)",
)
# On AMD GPUs (ROCm) vLLM's V4.1 attention layer subclasses the same DeepseekV4Attention and keeps its cache specs; the
# capability family is 9x, so the non-SM100 record (584 B, pages aligned to 576). The planner is the model's, the same
# architecture's on either vendor (inferred: the ROCm model's planner class was not read)
V41_ROCM_SOURCE = (
    "vllm-project/vllm vllm/models/deepseek_v41/amd/rocm.py @8eb805bf (DeepseekV41ROCMAiterMLAAttention("
    "DeepseekV4Attention): backend_cls and swa_backend_cls only, no get_kv_cache_spec of its own); vllm/platforms/"
    "rocm.py @001eda31 (_capability_from_gcn_arch: gfx942 9.4, gfx950 9.5, so not family 100); the planner the same "
    "architecture's (inferred, not read for ROCm)"
)
V41_SWA_BLOCK = 32
# the block (--block-size) vLLM resolves for DeepSeek-V4.1 when a command gives none: Platform.update_block_size_for_
# backend asks the first attention layer's backend (DeepseekV4Attention registers itself before its caches) for its
# preferred block, the smallest it supports when 16 is not; the sparse-MLA backend supports [128] on SM100 and [64]
# on capability families 90 / 120 / 121 (Hopper, consumer Blackwell, and ROCm's 9.x); ROCm's backend inherits it
V41_DEFAULT_BLOCK = 128
V41_DEFAULT_BLOCK_SM90 = 64
V41_BLOCK_SOURCE = (
    "vllm-project/vllm vllm/models/deepseek_v41/sparse_mla.py @02ee13be (DeepseekV4SparseMLABackend."
    "get_supported_kernel_block_sizes: [64] on capability families 90 / 120 / 121, else [128]); "
    "vllm/v1/attention/backend.py @0014ca6b (AttentionBackend.get_preferred_block_size: the smallest supported when "
    "16 is not); vllm/models/deepseek_v41/attention.py @f5d3794f (DeepseekV4Attention registers itself in "
    "static_forward_context before its caches: the first layer Platform.update_block_size_for_backend finds; that "
    "hook read in a stored copy, not at a pinned vLLM commit); on SM100 a public V4.1 start logs 'Setting kv cache "
    "block size to 128 for FLASHMLA_SPARSE_DSV41 backend' and ai-dynamo/dynamo@a28690c6's B200 recipe says it "
    "'resolves to 128'; no Hopper or ROCm log seen"
)


# DeepSeek-V4's block without --block-size: each layer's sliding-window cache registers in static_forward_context
# before its attention, so Platform.update_block_size_for_backend asks its backend first, and
# DeepseekSparseSWABackend.get_preferred_block_size is 256 (the sparse-MLA backend supports [256] only) -- on CUDA and
# ROCm alike (read in the 0.26.0, 0.27.0 and 0.28.0 wheels: v1/attention/backends/mla/sparse_swa.py, sparse_mla.py,
# platforms/interface.py; session 41's helper trace for vllm-project/vllm#53961). V4.1's attention registers first
# (V41_BLOCK_SOURCE).
V4_DEFAULT_BLOCK = 256
V4_BLOCK_SOURCE = (
    "vllm 0.28.0 wheel v1/attention/backends/mla/sparse_swa.py DeepseekSparseSWABackend.get_preferred_block_size "
    "(256; the same in 0.26.0 / 0.27.0) via platforms/interface.py Platform.update_block_size_for_backend, the "
    "sliding-window cache registered before the attention layer"
)


def v4_groups_block(block: int | None) -> int | None:
    """The block vLLM builds DeepSeek-V4's groups at: a command's --block-size where it is a multiple of 128, the block
    it resolves for V4 (V4_DEFAULT_BLOCK) where the command gives none; None for another block (the engine's pool then
    prices V4 without its groups: engines/vllm/memory.py)."""
    if block is None:
        return V4_DEFAULT_BLOCK
    return block if block % 128 == 0 else None


def with_mtp_layers(d: DSV4Dims, ratios: tuple[int, ...]) -> DSV4Dims:
    """V4's dims with the MTP drafter's layers in the pool: layers of their compress ratios after the model's."""
    from k3plan.structs import replace

    return replace(d, compress_ratios=tuple(d.compress_ratios) + tuple(ratios)) if ratios else d


def v41_default_block(hardware: str) -> int:
    """The block vLLM resolves for DeepSeek-V4.1 on ``hardware`` when a command gives no --block-size
    (``V41_BLOCK_SOURCE``): 128 on SM100-family GPUs, 64 on Hopper and AMD (capability 9.x)."""
    from k3plan.engines.vllm.attention_config import SM100_FAMILY

    return V41_DEFAULT_BLOCK if hardware in SM100_FAMILY else V41_DEFAULT_BLOCK_SM90


# From 0.33.0 V4.1's sliding-window cache on SM100 (the MXFP8 record) sets its block stride alignment to
# lcm(the window record, the compressed record) ('FlashMLA reads the interleaved V4.1 records as rows of the whole
# cache, so the packed block has to hold whole rows of both'), and the pool rounds a block's bytes up to the lcm of its
# layers' alignments: 528 B with the MXFP8 compressed record, 3,168 with nvfp4_ds_mla's 288. Read in the 0.33.0 wheel
# (PyPI) vllm/models/deepseek_v41/attention.py DeepseekV4Attention.__init__ (packed_block_stride_alignment),
# v1/attention/backends/mla/sparse_swa.py DeepseekV4SWACache.get_kv_cache_spec (block_stride_alignment) and
# v1/core/kv_cache_planning.py _get_kv_cache_bytes_per_block (round_up(bytes_per_block, lcm of the alignments), the
# block-outer layout DeepseekV4IndexerBackend.supported_kv_cache_layouts asks for); the same in the 0.34.0 wheel,
# absent from 0.32.0's
V41_STRIDE_FROM = (0, 33, 0)
V41_STRIDE_SOURCE = (
    "vllm 0.33.0 wheel (PyPI) vllm/models/deepseek_v41/attention.py DeepseekV4Attention.__init__ "
    "(packed_block_stride_alignment lcm(swa_bytes_per_token, compressed_bytes_per_token) on the MXFP8 record) and "
    "v1/core/kv_cache_planning.py _get_kv_cache_bytes_per_block (the block rounded up to the alignments' lcm)"
)

# --kv-cache-dtype nvfp4_ds_mla off SM100: DeepseekV4Attention.__init__ raises before any pool is sized
NVFP4_MESSAGE = "ValueError: nvfp4_ds_mla needs the V4.1 KV records, which FlashMLA decodes only on SM100."
NVFP4_AT = "vllm-project/vllm vllm/models/deepseek_v41/attention.py @02ee13be DeepseekV4Attention.__init__"


def _round(n: int, align: int) -> int:
    return -(-n // align) * align


# --- DeepSeek-V4.1 from the 0.30.0 release on: the generic block-outermost packing ---------------------------------
#
# The wheels (PyPI) carry no DeepseekV4KVCachePlanner; V4.1's caches go through get_kv_cache_groups' generic packing.
# - vllm/models/deepseek_v41/attention.py DeepseekV4Attention.get_kv_cache_spec and DeepseekV4IndexerCache.
#   get_kv_cache_spec: a KV source's compressed cache and its index keys are MLAAttentionSpecs of ``--block-size``
#   TOKENS with tokens_per_state = the source's compress ratio, so a page holds block // ratio records
#   (v1/kv_cache_interface.py KVCacheSpec.get_num_kernel_states, AttentionSpec.unpadded_page_size_bytes: num_states x
#   the packed record), rounded up to the page alignment (_apply_alignment_padding); a request holds
#   cdiv(max_model_len, block) pages of each (FullAttentionSpec.max_memory_usage_bytes), whatever the ratio. The window
#   caches (DeepseekV4SWACache, 32-token SlidingWindowMLASpecs) and the ratio-2 compressors' rings
#   (compressor.py CompressorStateCache, CircularBufferSpec) as main @02ee13be reads them.
# - v1/core/kv_cache_utils.py get_kv_cache_groups -> _get_packed_kv_cache_groups (the layout is block-outermost:
#   DeepseekV4IndexerBackend.supported_kv_cache_layouts BLHNC / BLNHC, v1/attention/backends/mla/indexer.py): layers
#   bucketed by uniform type (the compressed caches and index keys one full-attention bucket, the windows one, the rings
#   one); a bucket is balanced when each of its page sizes has as many layers; the largest balanced bucket with several
#   page sizes sets the floor of the repeats (_approximate_gcd over the balanced buckets), none: no repeats; a ring
#   bucket, and a window bucket when there are no repeats, is a state bucket, split into cdiv(its layers, the
#   anchor's bytes // its page) groups, the anchor the widest group any bucket leaves; every other bucket one group
#   (or cdiv(its most layers a page size, repeats) when balanced). V4.1-Flash's compressed bucket (one ratio-1 and
#   three ratio-2 sources) is not balanced, so it is one group and sets the anchor.
# - _get_kv_cache_bytes_per_block: a block costs the largest group's pages summed, rounded up to the lcm of the
#   layers' block_stride_alignment (the index keys' only with indexer_sparse_logits: ``V41_SPARSE_LOGITS_SOURCE``);
#   get_kv_cache_config_from_groups: num_blocks = available // that; get_kv_cache_configs: the check plans
#   against the memory less one block (the null block), _max_memory_usage_bytes_from_groups charging the same block a
#   page; get_max_concurrency_for_kv_cache_config: num_blocks over each group's pages summed.
# The same functions in the 0.30.0, 0.31.0 and 0.32.0 wheels for V4.1's specs (0.32.0 adds only the layout argument
# and get_block_stride_alignment), and in the 0.33.0 and 0.34.0 wheels, moved to v1/core/kv_cache_planning.py
# (_get_packed_kv_cache_groups there the same but for the drafter's group annotations): DefaultKVCacheConfigBuilder.
# get_kv_cache_groups calls get_kv_cache_groups for a model that declares no SupportsKVCacheGrouping, which
# DeepseekV41ForCausalLM (models/deepseek_v41/nvidia/vl_model.py, amd/vl_model.py) does not, and Platform.
# get_kv_cache_config_builder_cls (platforms/interface.py) names that builder, overridden by no GPU platform; the specs'
# sizes the same in both (attention.py DeepseekV4Attention.get_kv_cache_spec, DeepseekV4IndexerCache.get_kv_cache_spec).
# From 0.33.0 the SM100 window spec's block stride alignment (``V41_STRIDE_SOURCE``), from 0.34.0 the index keys' on
# SM100 (``V41_SPARSE_LOGITS_SOURCE``), both in ``block_align``.
V41_PACKED_FROM = (0, 30, 0)
V41_PACKED_SOURCE = (
    "vllm 0.30.0 / 0.31.0 / 0.32.0 / 0.33.0 / 0.34.0 wheels (PyPI): vllm/models/deepseek_v41/attention.py "
    "DeepseekV4Attention."
    "get_kv_cache_spec and DeepseekV4IndexerCache.get_kv_cache_spec (MLAAttentionSpec of --block-size tokens, "
    "tokens_per_state = compress_ratio), v1/kv_cache_interface.py KVCacheSpec.get_num_kernel_states (block // ratio "
    "records a page), v1/core/kv_cache_utils.py (0.33.0 on: kv_cache_planning.py, through DefaultKVCacheConfigBuilder."
    "get_kv_cache_groups) _get_packed_kv_cache_groups (the generic block-outermost packing; no "
    "DeepseekV4KVCachePlanner in these wheels), _get_kv_cache_bytes_per_block (the largest group's pages), "
    "get_kv_cache_configs (the null block held back), get_max_concurrency_for_kv_cache_config"
)
# From 0.34.0 AttentionConfig.indexer_sparse_logits defaults to None, resolved by DeepseekV4ForCausalLMConfig.
# verify_and_update_config to _indexer_sparse_logits_supported: on for a two-level indexer (candidate_block_size and
# candidate_topk_blocks in the config: V4.1's 8 and 2,048) on an SM100-family CUDA GPU with DeepGEMM's sparse MQA
# kernels (the wheel vendors vllm/third_party/deep_gemm with them) and DeepSelect (the wheel ships vllm/_deepselect_C),
# no DCP / PCP, the default top-k backend, and a layout DeepSelect takes (2,048 x 8 bf16 columns, 512 int32 top-k). Then
# the index keys' spec asks a block stride of lcm(256, 1) on the MXFP8 record (DeepseekV4IndexerCache.get_kv_cache_spec
# block_stride_alignment), and the block rounds up to lcm(the window's, 256): 8,448 B at the 528-B record. 0.33.0
# defaults it False. A command setting it is refused (attention_config.REFUSED). Not read: DCP / PCP > 1 turn it off.
V41_SPARSE_LOGITS_FROM = (0, 34, 0)
V41_SPARSE_LOGITS_SOURCE = (
    "vllm 0.34.0 wheel (PyPI) vllm/config/attention.py AttentionConfig.indexer_sparse_logits (None), "
    "vllm/model_executor/models/config.py DeepseekV4ForCausalLMConfig.verify_and_update_config and "
    "_indexer_sparse_logits_supported, vllm/models/deepseek_v41/attention.py DeepseekV4IndexerCache.get_kv_cache_spec "
    "(block_stride_alignment lcm(256, 1) on the MXFP8 record); 0.33.0: False by default"
)


def v41_packed(release: Release | None) -> bool:
    """Whether ``release`` groups V4.1's caches through the generic packing (``V41_PACKED_SOURCE``)."""
    return release is not None and release >= V41_PACKED_FROM


@dataclass(frozen=True)
class Dsv41Pages(Dsv4Pages):
    """vLLM's V4.1 groups: a block id costs the tuple count x the compressed group's page sizes (the planner's
    num_blocks), the same bytes its start check charges; from 0.30.0 on (``packed``) the largest
    group's pages summed, the check planning against the memory less that block (``V41_PACKED_SOURCE``)."""

    record_bytes: int = 0
    index_entry_bytes: int = 0
    # from 0.33.0 on SM100 the block stride a multiple of lcm(the window record, the compressed record)
    # (``V41_STRIDE_SOURCE``), from 0.34.0 of 256 too (``V41_SPARSE_LOGITS_SOURCE``); 1: no rounding
    block_align: int = 1
    packed: bool = False  # the generic block-outermost packing (0.30.0 on)

    @property
    def block_bytes(self) -> int:
        return self.check_block_bytes

    @property
    def check_block_bytes(self) -> int:
        """The tuple count x the compressed group's page sizes (the planner's), rounded up to ``block_align``; packed:
        the largest group's pages summed (_get_kv_cache_bytes_per_block)."""
        if self.packed:
            return _round(max(sum(g.pages) for g in self.groups), self.block_align)
        return _round(self.num_layer_tuples * self.layer_tuple_bytes, self.block_align)

    @property
    def check_reserve_bytes(self) -> int:
        """Packed: one block, the null block the check plans without (get_kv_cache_configs); the planner: none."""
        return self.block_bytes if self.packed else 0

    def reported_blocks_per_request(self, *, max_model_len: int, max_num_batched_tokens: int) -> int:
        """V4.1 runs on 0.31.0's code, which reports each group's pages (REPORT_SOURCES)."""
        return self.blocks_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)

    def label(self) -> str:
        if self.packed:
            return (
                f"vLLM {self.form}'s DeepSeek-V4.1 groups, packed (KV-source records of {self.record_bytes} B, index "
                f"keys of {self.index_entry_bytes} B, block // compress ratio a page; {len(self.groups)} groups)"
            )
        return (
            f"vLLM's DeepSeek-V4.1 groups (KV-source records of {self.record_bytes} B, index keys of "
            f"{self.index_entry_bytes} B; {self.num_layer_tuples} layer tuples of {self.layer_tuple_bytes:,} B)"
        )

    def sources(self) -> str:
        return V41_PACKED_SOURCE if self.packed else "; ".join(V41_SOURCES)


def _v41_packed_groups(
    mla: list[int], block_tokens: int, buckets: list[tuple[str, list[int], int, int]]
) -> list[Group]:
    """_get_packed_kv_cache_groups over V4.1's buckets (``V41_PACKED_SOURCE``): the compressed bucket ``mla`` (pages of
    ``block_tokens`` tokens) and the (kind, pages, block, window) window and ring buckets."""
    every = [("compressed", mla, block_tokens, 0), *buckets]
    balanced = [len(set(Counter(p).values())) == 1 for _, p, _, _ in every]
    floor = max((_most(p) for (_, p, _, _), b in zip(every, balanced) if b and len(set(p)) > 1), default=0)
    repeats = (
        _approximate_gcd([_most(p) for (_, p, _, _), b in zip(every, balanced) if b], lower_bound=floor) if floor else 0
    )

    def n_groups(pages: list[int], bal: bool) -> int:
        return _cdiv(_most(pages), repeats) if bal and repeats else 1

    def state(kind: str, window: int) -> bool:  # is_state_bucket: a ring; a window where no repeats are picked
        return kind == "ring" or (not repeats and window > 0)

    def widest(pages: list[int], n: int) -> int:
        return sum(_cdiv(count, n) * page for page, count in Counter(pages).items())

    anchor = max(widest(p, len(p) if state(k, w) else n_groups(p, b)) for (k, p, _, w), b in zip(every, balanced))
    groups = []
    for (kind, pages, block, window), bal in zip(every, balanced):
        n = n_groups(pages, bal)
        if state(kind, window):
            n = max(n, _cdiv(len(pages), max(anchor // pages[0], 1)))
        for i, part in enumerate(_split(pages, n)):
            groups.append(Group(kind if n == 1 else f"{kind}[{i}]", part, block, window, ring=kind == "ring"))
    return groups


def dsv41_pages(
    d: DSV4Dims,
    *,
    block_tokens: int,
    sm100: bool,
    nvfp4: bool = False,
    fp4_indexer: bool = False,
    draft_layers: int = 0,
    num_speculative_tokens: int = 0,
    release: Release | None = None,
) -> Dsv41Pages:
    """vLLM's V4.1 groups for ``--block-size`` ``block_tokens`` (the V4.1 notes above): ``sm100`` the GPU's
    capability family 10 (the MXFP8 record), ``nvfp4`` --kv-cache-dtype nvfp4_ds_mla, ``fp4_indexer`` the MXFP4
    indexer cache, ``draft_layers`` DSpark's window-only layers; ``release``: the vLLM release (from 0.30.0 its
    packed groups, ``V41_PACKED_SOURCE``; on SM100 the block's stride alignment from 0.33.0, ``V41_STRIDE_FROM``, and
    from 0.34.0, ``V41_SPARSE_LOGITS_FROM``); None: main @02ee13be's planner, as the notes above cite it."""
    assert d.csa2 is not None
    align = 512 if sm100 else ALIGN
    record = 528 if sm100 else v4_record_bytes(d)
    main = 288 if nvfp4 else record
    index_entry = d.index_head_dim // 2 + d.index_head_dim // 32 if fp4_indexer else fp8_index_entry_bytes(d)
    sources = [(i, d.compress_ratios[i]) for i in d.csa2.kv_source_layer_ids]
    mla_pages = [_round(block_tokens * main, align) for _ in sources] + [
        _round(block_tokens * index_entry, align) for _ in sources
    ]
    mla_blocks = min(block_tokens * max(1, r) for _, r in sources)  # the layer needing most pages sets the group's
    mla_sizes = sorted(set(mla_pages))
    rows = max(8, 1 << (num_speculative_tokens + 1).bit_length())  # max(8, next power of two >= num_spec + 2)
    rings = [_round(rows * 2 * d.head_dim * F32, align) for _, r in sources if r == 2]
    swa = [_round(V41_SWA_BLOCK * record, align)] * (len(d.compress_ratios) + draft_layers)
    buckets = [("window", swa, V41_SWA_BLOCK, d.sliding_window)] + ([("ring", rings, rows, 0)] if rings else [])
    if v41_packed(release):
        # 0.30.0 on (V41_PACKED_SOURCE): a source's pages hold block // ratio records of a block of tokens;
        # the rings unpadded (CircularBufferSpec has no alignment)
        packed_mla = [_round(block_tokens // max(1, r) * main, align) for _, r in sources] + [
            _round(block_tokens // max(1, r) * index_entry, align) for _, r in sources
        ]
        ring_pages = [rows * 2 * d.head_dim * F32 for _, r in sources if r == 2]
        packed_buckets = [("window", swa, V41_SWA_BLOCK, d.sliding_window)] + (
            [("ring", ring_pages, rows, 0)] if ring_pages else []
        )
        assert release is not None
        return Dsv41Pages(
            groups=tuple(_v41_packed_groups(packed_mla, block_tokens, packed_buckets)),
            num_layer_tuples=1,
            layer_tuple_bytes=sum(sorted(set(packed_mla))),
            form=release_text(release),
            form_source=V41_PACKED_SOURCE,
            record_bytes=main,
            index_entry_bytes=index_entry,
            block_align=math.lcm(
                math.lcm(record, main) if sm100 and release >= V41_STRIDE_FROM else 1,
                256 if sm100 and release >= V41_SPARSE_LOGITS_FROM else 1,
            ),
            packed=True,
        )
    counts = [Counter(mla_pages).most_common(1)[0][1]] + [len(p) for _, p, _, _ in buckets]
    tuples = _approximate_gcd(counts, lower_bound=counts[0])
    groups = [Group("compressed", tuple(mla_pages), mla_blocks, 0)]
    for kind, pages, block, window in buckets:
        padded = [min((x for x in mla_sizes if x >= p), default=p) for p in pages]
        n_groups = _cdiv(len(padded), tuples)
        for i in range(n_groups):
            groups.append(Group(f"{kind}[{i}]", tuple(padded[i::n_groups]), block, window, ring=kind == "ring"))
    return Dsv41Pages(
        groups=tuple(groups),
        num_layer_tuples=tuples,
        layer_tuple_bytes=sum(mla_sizes),
        record_bytes=main,
        index_entry_bytes=index_entry,
        block_align=(math.lcm(record, main) if sm100 and release is not None and release >= V41_STRIDE_FROM else 1),
    )


def v41_request_charge(
    d: DSV4Dims,
    *,
    hardware: str,
    vendor: str,
    chunk: int,
    context: int,
    draft_layers: int = 0,
    spec_tokens: int = 0,
    in_flight: int | None = None,
    release: Release | None = None,
    block: int | None = None,
) -> RequestCharge | None:
    """What vLLM's V4.1 planner charges a request of ``context`` tokens (max_model_len) with ``chunk`` tokens a step
    (max_num_batched_tokens) on one GPU, with ``draft_layers`` DSpark layers proposing ``spec_tokens`` tokens (0: no
    speculative decoding) and the defaults of a command that names no other (``v41_default_block``, the fp8 records of
    the GPU's family and indexer keys): the compressed group's blocks of context, and the windowed and ring groups'
    blocks whatever the context; on AMD GPUs the same groups with the non-SM100 record (``V41_ROCM_SOURCE``); None on
    any other vendor. The start check (engines/vllm/memory.py) sizes the same groups with the command's flags.
    ``in_flight``: the batches of ``chunk`` a windowed group holds pages for (a serve command's, engines/vllm/
    releases.py); None: the newest release's default (``default_in_flight``: 2 at PP 1).
    ``release``: read for V4.1's groups (``v41_packed``) and block stride (``V41_STRIDE_FROM``); None: the newest read, as
    the engine's pool without --engine-version (engines/vllm/releases.py). ``block``: a command's --block-size
    (None: ``v41_default_block``)."""
    from k3plan.engines.vllm.attention_config import SM100_FAMILY
    from k3plan.engines.vllm.releases import NEWEST_RELEASE, default_in_flight

    if vendor not in ("nvidia", "amd") or d.csa2 is None:
        return None
    pages = dsv41_pages(
        d,
        block_tokens=block or v41_default_block(hardware),
        sm100=hardware in SM100_FAMILY,
        draft_layers=draft_layers,
        num_speculative_tokens=spec_tokens,
        release=release if release is not None else NEWEST_RELEASE,  # the engine's pool reads the same (memory.py)
    )
    batches = in_flight if in_flight is not None else default_in_flight()
    return _charge(
        pages,
        chunk=chunk,
        context=context,
        batches=batches,
        said=f"; on an AMD GPU: {V41_ROCM_SOURCE}" if vendor == "amd" else "",
    )


def _charge(pages: Dsv4Pages, *, chunk: int, context: int, batches: int, said: str = "") -> RequestCharge:
    """A request's charge from an engine's groups: the compressed group's blocks of context, every other group's
    (windows holding ``batches`` x ``chunk`` tokens in flight, rings) whatever the context, at the pool's block."""
    from k3plan.engines.dsv4_layout import RequestCharge
    from k3plan.engines.vllm.releases import IN_FLIGHT_SOURCE

    tokens = chunk * batches  # what a windowed group holds pages for (IN_FLIGHT_SOURCE)
    comp = pages.groups[0]
    total = pages.blocks_per_request(max_model_len=context, max_num_batched_tokens=tokens)
    held = comp.pages_per_request(max_model_len=context, max_num_batched_tokens=tokens)
    return RequestCharge(
        block_tokens=comp.block_tokens,
        block_bytes=pages.block_bytes,
        fixed_blocks=total - held,
        source=pages.text(max_model_len=context, max_num_batched_tokens=tokens)
        + (f" ({batches} batches of {chunk:,} in flight: {IN_FLIGHT_SOURCE})" if batches > 1 else "")
        + said,
    )


def v4_request_charge(
    d: DSV4Dims,
    *,
    hardware: str,
    vendor: str,
    chunk: int,
    context: int,
    draft_layers: int = 0,
    spec_tokens: int = 0,
    in_flight: int | None = None,
    release: Release | None = None,
    block: int | None = None,
) -> RequestCharge | None:
    """What vLLM's pool charges a DeepSeek-V4 request of ``context`` tokens (max_model_len) on one GPU, as the engine's
    start check sizes it (engines/vllm/memory.py): ``dsv4_pages`` at the block vLLM resolves for V4 (V4_DEFAULT_BLOCK),
    ``release``'s groups (None: the newest read, engines/vllm/releases.py), the windowed groups holding ``in_flight``
    batches of ``chunk`` (None: the newest release's default), the MTP drafter's ``draft_layers`` layers in the pool
    where speculative decoding runs: the compressed group's blocks of context, every other group's whatever the
    context, a block costing what the pool's does; ``block`` a command's --block-size (the engine sizes V4's groups at a
    multiple of 128 only: another is priced at the default, as without). None off NVIDIA and AMD GPUs, and for V4.1
    (``v41_request_charge``)."""
    from k3plan.engines.vllm.releases import NEWEST_RELEASE, default_in_flight

    if vendor not in ("nvidia", "amd") or d.csa2 is not None:
        return None
    d = with_mtp_layers(d, tuple(d.mtp_compress_ratios[:draft_layers]))
    given = v4_groups_block(block) if block is not None else None
    tokens = given or V4_DEFAULT_BLOCK
    pages = dsv4_pages(d, block_tokens=tokens, release=release if release is not None else NEWEST_RELEASE)
    return _charge(
        pages,
        chunk=chunk,
        context=context,
        batches=in_flight if in_flight is not None else default_in_flight(),
        said=f", at --block-size {tokens}"
        if given
        else f", at the {V4_DEFAULT_BLOCK}-token block vLLM resolves for V4 ({V4_BLOCK_SOURCE})",
    )
