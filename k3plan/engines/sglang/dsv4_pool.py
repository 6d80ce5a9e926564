"""SGLang's DeepSeek-V4 pool: one full-token count sizes every sub-pool (full / swa / c4 / c128 + their compressor
states), so a full token costs ``bytes_per_full_token`` (DSV4PoolConfigurator._get_bytes_per_full_token):

    swa_ratio x K x N                    the sliding-window KV, N layers (the nextn layer's entry in
                                         config.compress_ratios counted)
  + K x N4 / 4 + K x N128 / 128          the c4 / c128 compressed KV
  + I x N4 / 4                           the c4 indexer keys
  + swa_ratio x R4 / W x S4 x N4         the c4 compressor state rings, per window page
  + swa_ratio x R128 / W x S128 x N128   the c128 compressor state rings
  + swa_ratio x R4 / W x SI x N4         the c4 indexer's compressor state rings

with K = qk_nope + 2 x qk_rope + 8 (584 B), I = index_head_dim + index_head_dim / 128 x 4 (132 B), A = qk_nope +
qk_rope, S4 = 2 x 2 x A x 4, S128 = 2 x A x 4, SI = 2 x 2 x index_head_dim x 4 (f32 states), ring sizes R4 / R128 =
8 / 128 (16 / 256 with speculative decoding: get_compress_state_ring_size), W the window (config window_size, the swa
page), swa_ratio ``--swa-full-tokens-ratio``; then max_total_num_tokens = int(available / bytes_per_full_token) in
whole pages. This is the form SGLang's DeepSeek-V4 builds log: kvcache-ai/ktransformers#1978 prints
'bytes_per_full_token=15955.85' for DeepSeek-V4-Flash at swa ratio 0.1, which it reproduces exactly
(tests/engines/test_sglang_dsv4_pool.py). sgl-project/sglang@003fca80 (python/sglang/srt/model_executor/
pool_configurator.py DSV4PoolConfigurator) has since moved the c128 state rings to a per-request charge sized by
max_running_requests; k3plan keeps the logged form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.models.spec import DSV4Dims
from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.engines.dsv4_layout import RequestCharge

SOURCE = (
    "SGLang's DSV4PoolConfigurator._get_bytes_per_full_token in the form its DeepSeek-V4 builds log (kvcache-ai/"
    "ktransformers#1978: bytes_per_full_token=15955.85 for V4-Flash at swa ratio 0.1, reproduced exactly); "
    "sgl-project/sglang@003fca80 python/sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator: "
    "max_total_num_tokens = int(available / bytes_per_full_token) in whole pages"
)
# SGLang's own defaults for DeepSeek-V4, as its server_args.py logs them at start (kvcache-ai/ktransformers#1998:
# 'server_args.py:1207: Use compressed attention backend for DeepseekV4ForCausalLM, setting page_size to 256.',
# 'server_args.py:1240: Setting swa_full_tokens_ratio to 0.1 for DeepseekV4ForCausalLM.'); #1978's pools agree
# (swa 3,072 = 0.1 x full 32,768 in whole 256-token pages)
PAGE = 256
SWA_RATIO = 0.1
DEFAULTS_SOURCE = (
    "SGLang's server_args.py for DeepseekV4ForCausalLM, as its start log prints it (kvcache-ai/ktransformers#1998: "
    "'setting page_size to 256', 'Setting swa_full_tokens_ratio to 0.1')"
)
F32 = 4
RING = {4: 8, 128: 128}  # get_compress_state_ring_size, not speculative


class SglangDsv4Pool(Frozen):
    """A full token's bytes in SGLang's DeepSeek-V4 pool and the page its token count is rounded to."""

    bytes_per_full_token: float
    page: int
    swa_ratio: float
    source: str


def sglang_dsv4_pool(d: DSV4Dims, *, swa_ratio: float | None = None, page: int | None = None) -> SglangDsv4Pool:
    """SGLang's bytes a full token for DeepSeek-V4 (module docstring); ``swa_ratio``: --swa-full-tokens-ratio,
    ``page``: --page-size (None: SGLang's V4 defaults, DEFAULTS_SOURCE)."""
    asked = swa_ratio
    swa_ratio = SWA_RATIO if swa_ratio is None else swa_ratio
    ratios = tuple(d.compress_ratios) + tuple(d.mtp_compress_ratios)
    n, n4, n128 = len(ratios), ratios.count(4), ratios.count(128)
    nope, rope = d.head_dim - d.rope_dim, d.rope_dim
    kv = nope + 2 * rope + 8
    index = d.index_head_dim + d.index_head_dim // 128 * 4
    a = nope + rope
    s4, s128, si = 2 * 2 * a * F32, 2 * a * F32, 2 * 2 * d.index_head_dim * F32
    w = d.sliding_window
    bpft = (
        swa_ratio * kv * n
        + kv * n4 / 4
        + kv * n128 / 128
        + index * n4 / 4
        + swa_ratio * RING[4] / w * s4 * n4
        + swa_ratio * RING[128] / w * s128 * n128
        + swa_ratio * RING[4] / w * si * n4
    )
    return SglangDsv4Pool(
        bytes_per_full_token=bpft,
        page=page or PAGE,
        swa_ratio=swa_ratio,
        source=(
            f"{bpft:,.2f} B a full token at --swa-full-tokens-ratio {swa_ratio:g}"
            + ("" if asked is not None else f" ({DEFAULTS_SOURCE})")
            + f" ({n} layers, {n4} c4, {n128} "
            f"c128; {kv} B entries, {index} B index keys, f32 compressor rings of {RING[4]} / {RING[128]} rows a "
            f"{w}-token window page): {SOURCE}"
        ),
    )


def dsv4_request_charge(d: DSV4Dims, *, vendor: str, **_: int | str) -> RequestCharge | None:
    """What SGLang's pool charges a DeepSeek-V4 request on a GPU: its full tokens at ``bytes_per_full_token`` in whole
    pages, at its V4 defaults (the swa ratio and page a command that sets neither runs; the start check reads the
    command's), the windows and compressor rings inside that figure, nothing apart; None for DeepSeek-V4.1 (its V4.1
    pool accounting not read) and off a GPU."""
    from k3plan.engines.dsv4_layout import RequestCharge

    if d.csa2 is not None or vendor not in ("nvidia", "amd"):
        return None
    pool = sglang_dsv4_pool(d)
    return RequestCharge(
        block_tokens=pool.page,
        block_bytes=pool.page * pool.bytes_per_full_token,
        fixed_blocks=0,
        source=f"SGLang's DeepSeek-V4 pool, {pool.source}",
    )
