"""SGLang's storage of DeepSeek-V4's cache and where it keeps DeepSeek-V4.1's Engram tables, each cited
(k3plan.engines.dsv4_layout; step/dsv4_cache derives the figures)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.engines.dsv4_layout import CSA, Dsv4Layout, EngramPlacement, RequestCharge, Source

if TYPE_CHECKING:  # a type only: the registry that reads this loads no model code
    from k3plan.models.spec import DSV4Dims


def request_charge(d: DSV4Dims, **at: int | str) -> RequestCharge | None:
    """DeepSeek-V4 as SGLang's pool charges a request (engines/sglang/dsv4_pool.py dsv4_request_charge), in the pool
    form of the release the budget runs: a serve command's (``release``), else the newest read (engines/sglang/
    releases.py NEWEST_RELEASE), as a GPU question that names none is read, so the budget and the start check read
    one form."""
    from k3plan.engines.sglang.dsv4_pool import dsv4_request_charge
    from k3plan.engines.sglang.releases import NEWEST_RELEASE

    if at.get("release") is None:
        at = {**at, "release": NEWEST_RELEASE}  # type: ignore[dict-item]
    return dsv4_request_charge(d, **at)  # type: ignore[arg-type]


_SGL_POOL = "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py"

LAYOUT = Dsv4Layout(
    engine="sglang",
    request_charge=request_charge,
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

# Engram: in device memory, rows split over the TP group (--engram-config placement gpu, replication none)
ENGRAM = EngramPlacement(
    placement="hbm",
    source=Source(
        "sgl-project/sglang",
        "docs/advanced_features/engram (docs.sglang.io)",
        "--engram-config: placement gpu (default), replication none (one table, rows split across the TP group)",
        "",
        note="read on docs.sglang.io/docs/advanced_features/engram; commit not pinned",
    ),
)
