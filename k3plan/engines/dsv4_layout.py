"""DeepSeek-V4's cache as a serving engine stores it: the byte format of one engine's compressed entries,
indexer keys and compressor rings (``Dsv4Layout``), and where it keeps DeepSeek-V4.1's Engram tables
(``EngramPlacement``). Engine-neutral types: each engine's values, cited, live in its folder
(``engines/<engine>/dsv4.py``); step/dsv4_cache derives the figures from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

if TYPE_CHECKING:  # a type only: the registry that reads these loads no model code
    from k3plan.models.spec import DSV4Dims

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
class RequestCharge:
    """What an engine's own pool accounting charges one request of DeepSeek-V4's cache on one device, where it charges
    otherwise than the model's bytes a token (``Dsv4Layout.request_charge``): ``block_bytes`` a block of
    ``block_tokens`` tokens of context (a float where the engine's bytes a token are one: SGLang's full token), and
    ``fixed_blocks`` blocks whatever the context (vLLM's V4.1 windows holding the tokens in flight, its compressor
    rings); ``source``: the engine's accounting, cited."""

    block_tokens: int
    block_bytes: int | float
    fixed_blocks: int
    source: str
    # bytes a request holds apart from its blocks whatever its context (SGLang's V4.1 sliding-window pool, sized in
    # tokens a request: engines/sglang/dsv4_pool.py), and what they are
    apart_bytes: int = 0
    apart_source: str = ""

    @property
    def fixed_bytes(self) -> int:
        return int(self.fixed_blocks * self.block_bytes) + self.apart_bytes


# (dims; keywords: hardware name, vendor, chunk = max_num_batched_tokens, context = max_model_len, draft_layers = the
# speculative drafter's layers in the pool, spec_tokens = its tokens a step, and where a command set them in_flight =
# the batches of chunk a windowed group holds pages for, release = the engine release, block = its --block-size) ->
# the engine's charge, or None
# where its
# accounting is the model's bytes a token there (another model version, another vendor's backend)
ChargeRule = Callable[..., Optional[RequestCharge]]


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class EntrySizes:
    """Bytes of one record of each kind an engine stores (``Dsv4Layout.sizes``): ints for one engine, or numpy
    columns over a plan's stacks (the op builders read either)."""

    csa: Any  # a CSA layer's compressed entry
    hca: Any  # an HCA layer's compressed entry
    window: Any  # a sliding-window entry (every layer)
    index: Any  # a CSA layer's indexer key


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
    # the engine's own charge a request where its pool accounting is not the model's bytes a token (DeepSeek-V4.1 on
    # vLLM's CUDA and ROCm backends: engines/vllm/dsv4_pages.py; DeepSeek-V4 and V4.1 on SGLang:
    # engines/sglang/dsv4_pool.py); None: the model's
    request_charge: Optional[ChargeRule] = None
    # an engine whose records are not all the fp8 entry above (the torch_tpu plugin): a CSA entry and an indexer key
    # padded up to a multiple of these bytes, and the kinds kept as raw bf16 values (head_dim x 2 B: "hca", "window")
    entry_align: int = 1
    index_align: int = 1
    raw_bf16: frozenset[str] = frozenset()
    # the KV block the engine sets for DeepSeek-V4 where the command gives no --block-size (the torch_tpu plugin:
    # 1,024), with its source; 0: the stack's paging
    block: int = 0
    block_source: str = ""

    def entry_bytes(self, d: DSV4Dims) -> int:
        """One fp8 record: no-rope fp8, rope bf16, scales, pad (584 for V4): every entry an engine does not pad or
        keep raw (``sizes``)."""
        nope = d.head_dim - d.rope_dim
        return nope + 2 * d.rope_dim + nope // self.scale_block + self.scale_pad

    def index_bytes(self, d: DSV4Dims) -> int:
        """One indexer key: fp8 values and an f32 scale a quant block (132 for V4), padded to ``index_align``."""
        return _align(d.index_head_dim + F32 * (d.index_head_dim // self.index_quant_block), self.index_align)

    def sizes(self, d: DSV4Dims) -> EntrySizes:
        """The bytes of each of this engine's records: CSA's and HCA's compressed entries, a window entry, an
        indexer key (vLLM and SGLang: 584, 584, 584, 132; the torch_tpu plugin: 640, 1,024, 1,024, 256)."""
        fp8, raw = self.entry_bytes(d), 2 * d.head_dim
        return EntrySizes(
            csa=_align(fp8, self.entry_align),
            hca=raw if "hca" in self.raw_bf16 else fp8,
            window=raw if "window" in self.raw_bf16 else fp8,
            index=self.index_bytes(d),
        )

    def ring(self, ratio: int, speculative: bool = False) -> int:
        if ratio == CSA:
            return self.ring_csa_spec if speculative and self.ring_csa_spec else self.ring_csa
        return self.ring_hca_spec if speculative and self.ring_hca_spec else self.ring_hca


@dataclass(frozen=True)
class EngramPlacement:
    """Where an engine keeps DeepSeek-V4.1's Engram tables by default: in device memory ("hbm", rows split over
    the TP group) or in host memory ("host"), and the source that says so."""

    placement: Literal["hbm", "host"]
    source: Source
    # in host memory, how many copies a host holds: "node" one of each TP shard a node, "replica" one a DP replica
    # (each replica's own TP-sharded tables) on that node
    host_copies: Literal["replica", "node"] = "node"
