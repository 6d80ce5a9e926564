"""vLLM's storage of DeepSeek-V4's cache and where it keeps DeepSeek-V4.1's Engram tables, each cited
(k3plan.engines.dsv4_layout; step/dsv4_cache derives the figures)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.engines.dsv4_layout import CSA, Dsv4Layout, EngramPlacement, RequestCharge, Source

if TYPE_CHECKING:  # a type only: the registry that reads this loads no model code
    from k3plan.models.spec import DSV4Dims

_VLLM_ATTN = "vllm/model_executor/layers/deepseek_v4_attention.py"
_VLLM_COMP = "vllm/model_executor/layers/deepseek_compressor.py"


def request_charge(d: DSV4Dims, **at: int | str) -> RequestCharge | None:
    """DeepSeek-V4 and V4.1 as vLLM's pool charges a request on a GPU (engines/vllm/dsv4_pages.py v4_request_charge,
    v41_request_charge)."""
    from k3plan.engines.vllm.dsv4_pages import v4_request_charge, v41_request_charge

    rule = v41_request_charge if d.csa2 is not None else v4_request_charge
    return rule(d, **at)  # type: ignore[arg-type]


LAYOUT = Dsv4Layout(
    engine="vllm",
    request_charge=request_charge,
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

# Engram: in pinned host memory (EngramConfig.cpu_offload True), one copy of each TP shard a node: vLLM 0.31.0's
# default (dp_shared_memory None, resolved on wherever cpu_offload holds and data_parallel_size > 1; embedding_across_dp
# False), the release k3plan reads a command without --engine-version as; @13ab20ec and 0.30.0 keep a copy a DP
# replica (dp_shared_memory False), which a serve command of those releases sets (engines/vllm/engram.py read_engram)
ENGRAM_COMMIT = "13ab20ecf72666374e58f0b199eb95ebde02460b"
ENGRAM = EngramPlacement(
    placement="host",
    source=Source(
        "vllm-project/vllm",
        "vllm/config/engram.py",
        "EngramConfig.cpu_offload (default True: 'Store embedding weights in pinned CPU memory for UVA lookup'); "
        "embedding_across_dp False ('each DP rank has a separate TP-sharded embedding replica'); dp_shared_memory "
        "None, resolve_dp_shared_memory: on with data_parallel_size > 1 ('Each node stores one copy of every TP "
        "shard'; 'Share host tables by default wherever the configuration permits'), read in the vllm 0.31.0 wheel "
        "(PyPI)",
        "v0.31.0",
    ),
    host_copies="node",
)
