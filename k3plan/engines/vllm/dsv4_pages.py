"""vLLM's KV groups and block accounting for DeepSeek-V4 (v0.25.0), as its code builds them: what one block id
costs and how many block ids a request at ``max_model_len`` holds, from config.json's numbers alone.

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

Not applied: vllm-project/vllm#48993 (merged 2026-07-17, after v0.25.0 of 2026-07-12) packs the groups densely,
a block costing the compressed group's pages summed over its layers (V4-Pro on FlashMLA: 1,315,008 B instead of
1,473,408 B); #52495 (open) counts the windowed groups' in-flight tokens once a pool.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from k3plan.models.spec import DSV4Dims

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

    def pages_per_request(self, *, max_model_len: int, max_num_batched_tokens: int) -> int:
        if not self.window:
            return _cdiv(max_model_len, self.block_tokens)
        tokens = min(self.window - 1 + max_num_batched_tokens, max_model_len)
        return _cdiv(tokens, self.block_tokens) + 1


@dataclass(frozen=True)
class Dsv4Pages:
    groups: tuple[Group, ...]
    num_layer_tuples: int
    layer_tuple_bytes: int

    @property
    def block_bytes(self) -> int:
        """What one block id costs in the packed layout: each page size as many times as the group holding most
        pages of that size has them (the layout vllm-project/vllm#48993 calls its baseline, 'buckets layers by
        page size': V4-Pro's 1,473,408 B a block on FlashMLA there; tests/engines/test_vllm_dsv4_pages.py)."""
        sizes = {p for g in self.groups for p in g.pages}
        return sum(size * max(g.pages.count(size) for g in self.groups) for size in sizes)

    @property
    def check_block_bytes(self) -> int:
        """What the start check charges a block: the tuple count x the compressed group's page sizes summed
        (_max_memory_usage_bytes_from_groups)."""
        return self.num_layer_tuples * self.layer_tuple_bytes

    def blocks_per_request(self, *, max_model_len: int, max_num_batched_tokens: int) -> int:
        return sum(
            g.pages_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
            for g in self.groups
        )

    def text(self, *, max_model_len: int, max_num_batched_tokens: int) -> str:
        parts = ", ".join(
            f"{g.name} {g.pages_per_request(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens):,}"
            for g in self.groups
        )
        return (
            f"vLLM v0.25.0's DeepSeek-V4 groups ({self.num_layer_tuples} layer tuples of {self.layer_tuple_bytes:,} B): "
            f"a block costs {self.block_bytes:,} B; a request at {max_model_len:,} tokens holds {parts} blocks "
            f"(max_num_batched_tokens {max_num_batched_tokens:,}): engines/vllm/dsv4_pages.py ({SOURCES[2]})"
        )


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the d in [lower_bound, max] padding the values least (ties: larger d)."""
    best_d, best_pad = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


def dsv4_pages(d: DSV4Dims, *, block_tokens: int, swa_layers: int | None = None) -> Dsv4Pages:
    """vLLM's V4 groups for ``--block-size`` ``block_tokens`` (module docstring). ``swa_layers``: the layers with
    a window cache (default every decoder layer; an MTP draft layer adds one)."""
    nope, rope = d.head_dim - d.rope_dim, d.rope_dim
    entry = nope + 2 * rope + nope // 64 + 1  # 584: head_bytes
    index_entry = d.index_head_dim + d.index_head_dim // 128 * F32  # 132
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
    counts = [Counter(mla).most_common(1)[0][1]] + [Counter(p).most_common(1)[0][1] for p in buckets.values()]
    tuples = _approximate_gcd(counts, lower_bound=counts[0])
    groups = [Group("compressed", tuple(mla), block_tokens, 0)]
    for (block, window), pages in buckets.items():
        padded = [min(x for x in mla_sizes if x >= p) for p in pages]
        per_size = Counter(padded).most_common(1)[0][1]
        n_groups = _cdiv(per_size, tuples)
        kind = "window" if block == SWA_BLOCK else f"state/{block}"
        for i in range(n_groups):
            groups.append(Group(f"{kind}[{i}]", tuple(padded[i::n_groups]), block, window))
    return Dsv4Pages(groups=tuple(groups), num_layer_tuples=tuples, layer_tuple_bytes=sum(mla_sizes))
