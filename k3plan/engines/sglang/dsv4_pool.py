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
whole pages. The form moved between releases, each reproduced to the cent by a public start log
(tests/engines/test_sglang_dsv4_pool.py), so ``FORMS`` names them and the current release's is the default:

- "ktransformers-1978": the build kvcache-ai/ktransformers#1978 ran ('bytes_per_full_token=15955.85' for
  DeepSeek-V4-Flash at swa ratio 0.1): every ring term above, N counting the nextn layer's entry of
  config.compress_ratios;
- "0.5.13": the same terms over the target's layers only (model_runner's start_layer:end_layer slice); a public
  0.5.13 log of DeepSeek-V4-Pro at swa ratio 0.15 prints 'bytes_per_full_token=32781.44';
- "0.5.15" (the default: the release SGLang's DeepSeek-V4 cookbook measured): the c128 rings leave the per-token
  figure ('C128 state is request-scoped': c128_state_ratio = 0) and are taken before the division as a fixed
  charge, rows = ceil((slots x R128 + R128 + 1) / 128) x 128 of 2 x A f32 a ratio-128 layer, slots =
  max_running_requests // dp_size + 1 (_get_c128_state_fixed_bytes); public logs print 'bytes_per_full_token=
  7705.45' (V4-Flash, ratio 0.1) and '13735.04, available_bytes=118.93 GB, c128_state_fixed=1.01 GB,
  full_token=9217792' (V4-Pro, ratio 0.15, 64 running a worker); the 0.5.16-0.5.20 wheels keep it;
- "0.5.21" (0.5.21 to 0.5.23, read in their wheels; no public log of it yet): 0.5.15's with two changes -- the c4
  compressor rings are addressed by the engine's page, so their share is R4 / page (256), not R4 / W
  (sgl-project/sglang#40337: the ring had been sized by the window and indexed by the page, 2x the rows it could
  reach), and each KV entry costs what the V4 paged layout stores it in: a page of P tokens is P x 584 B padded to
  whole 576-B rows, 585 B a token in the window's and c4's pages (256, 64 tokens) and 864 B in c128's (2 tokens).
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
SPEC_RING = {4: 16, 128: 256}  # get_compress_state_ring_size(ratio, is_speculative=True) (sglang 0.5.15 wheel)
FORMS = ("0.5.15", "0.5.21", "0.5.13", "ktransformers-1978")  # the cited release's first (module docstring)
# the forms whose c128 states are a fixed charge a request slot, and whose draft under speculative decoding was read
FIXED_C128_FORMS = ("0.5.15", "0.5.21")
# the release each release form starts at (fit --engine-version): 0.5.14's wheel (PyPI) still has 0.5.13's form
# (pool_configurator.py DSV4PoolConfigurator._get_bytes_per_full_token: c128_state_ratio = c128_ring_size /
# swa_page_size, the target's start_layer:end_layer), 0.5.15's the fixed charge; earlier releases were not read. The
# 0.5.16-0.5.20 wheels keep 0.5.15's form on a GPU at SGLang's defaults (the same _get_bytes_per_full_token and
# _get_c128_state_fixed_bytes; 0.5.20 adds the unified-KV ring mode, HIP only under SGLANG_HACK_FLASHMLA_BACKEND=
# unified_kv_triton, and prices HIP's FP4 indexer keys: engines/sglang/serve.py FP4_INDEXER_HIP). 0.5.21 rebuilt it,
# not priced here: the sliding-window pool in cap mode for V4 too where --swa-full-tokens-ratio is not given
# (_resolve_swa_cap_tokens), the c4 state rings per engine page (ring_size / page_size, was / window), the KV bytes a
# token from the paged layout SGLang picks by GPU (_get_paged_kv_bytes_per_token: select_dsv4_kv_layout, the V4.1
# layout on SM100), the low-ratio pages' padding (sglang 0.5.21 and 0.5.23 wheels, pool_configurator.py
# DSV4PoolConfigurator). For DeepSeek-V4 on SGLang's defaults that is the "0.5.21" form (FORM_0521_SOURCE): the
# operator's or the model override's --swa-full-tokens-ratio (0.1) keeps ratio mode, the flashmla backend and
# SGLANG_DSV4_KV_LAYOUT's default "v4" keep the V4 layout, whose pages pad a token's bytes
FORM_RELEASES = (((0, 5, 21), "0.5.21"), ((0, 5, 15), "0.5.15"), ((0, 5, 13), "0.5.13"))
# what of SGLang's pricing follows fit --engine-version (Engine.by_release of the sglang and dp-attention stacks)
BY_RELEASE = (
    "DeepSeek-V4's pool form follows it (0.5.13-0.5.14: the c128 rings a full token; 0.5.15-0.5.20: a fixed charge a "
    "request slot; 0.5.21 on: the c4 rings per engine page and the V4 layout's padded pages; earlier releases not "
    "read, priced as 0.5.13's; engines/sglang/dsv4_pool.py FORMS)"
)
BY_RELEASE_MODELS = ("deepseek-v4",)  # the pool forms are DeepSeek-V4's (V4.1's pool: sglang_dsv41_pool)
# the oldest SGLang wheel k3plan read a memory rule in: 0.4.2.post4, the default mem_fraction_static and
# chunked_prefill_size of ServerArgs.__post_init__ and ModelRunner.profile_max_num_token's pool, read in the 0.4.2.post4-
# 0.5.11 wheels (engines/sglang/fraction_eras.py); the weights' layouts of releases before 0.5.12 were not read
# (engines/sglang/releases.py NOT_PRICED)
OLDEST_READ = (0, 4, 2)


def form_for_release(release: tuple[int, int, int] | None) -> str:
    """The pool form of a SGLang release (``FORM_RELEASES``); None (no release: a GPU command that names none is read
    as engines/sglang/releases.py NEWEST_RELEASE before it gets here) or a release before the first one read: the
    cited 0.5.15 form and the earliest read, respectively."""
    if release is None:
        return FORMS[0]
    return next((form for first, form in FORM_RELEASES if release >= first), FORM_RELEASES[-1][1])


FORM_0515_SOURCE = (
    "sglang 0.5.15 wheel (PyPI), python/sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator: "
    "_get_bytes_per_full_token (c128_state_ratio = 0), _get_c128_state_fixed_bytes (state_pool_size = num_req_slots "
    "x c128_ring_size; rows = ceil_div(state_pool_size + ring + 1, 128) x 128; 2 x head_dim f32 a row, each ratio-128 "
    "layer), _get_num_req_slots (max_running_requests + 1), calculate_pool_sizes (the fixed bytes taken before "
    "full_token = int(available / bytes_per_full_token)); requested_max_running_requests_per_worker = "
    "max_running_requests // dp_size; compression_ratios = config.compress_ratios[start_layer:end_layer]"
)


FORM_0521_SOURCE = (
    "sglang 0.5.21 wheel (PyPI), sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator: "
    "_get_bytes_per_full_token (swa_ratio x _get_bytes_per_swa_token + each owning layer's "
    "_compressed_bytes_per_full_token), _get_bytes_per_swa_token (the paged KV bytes x layers + ring_sizes[4] / "
    "page_size x (c4 state + c4 indexer state) x c4 layers: sgl-project/sglang#40337, the c4 ring addressed by the "
    "page), _compressed_bytes_per_full_token (ratio 4: paged / 4 + index bytes / 4; ratio 128: paged / 128), "
    "_get_paged_kv_bytes_per_token (KVLayout.page_bytes(page // ratio) / (page // ratio): sglang/kernels/ops/attention/"
    "dsv4/kv_layout.py, V4 = 576 data + 8 scale bytes a token, pages padded to 576 B; mem_cache/"
    "deepseek_v4_memory_pool.py select_dsv4_kv_layout with environ.py SGLANG_DSV4_KV_LAYOUT's default 'v4'), "
    "_get_c128_state_fixed_bytes as 0.5.15's; the same in the 0.5.22 and 0.5.23 wheels"
)


def paged_token_bytes(d: DSV4Dims, tokens: int) -> float:
    """A token's bytes in a page of ``tokens`` of SGLang's V4 KV layout (FORM_0521_SOURCE): ``tokens`` x (nope +
    2 x rope + 8) bytes padded up to whole rows of the layout's nope + 2 x rope data bytes."""
    nope, rope = d.head_dim - d.rope_dim, d.rope_dim
    data, kv = nope + 2 * rope, nope + 2 * rope + 8
    return -(-tokens * kv // data) * data / tokens


class SglangDsv4Pool(Frozen):
    """A full token's bytes in SGLang's DeepSeek-V4 pool and the page its token count is rounded to; ``fixed_bytes``
    what the pool takes before it divides by them (DeepSeek-V4.1's sliding-window pool in cap mode, below)."""

    bytes_per_full_token: float
    page: int
    swa_ratio: float
    source: str
    fixed_bytes: int = 0
    fixed_source: str = ""  # what the fixed bytes are
    # V4.1 in cap mode: the sliding-window tokens a running request holds (its window, the eviction interval, a page
    # of padding, its next decode's page, and the radix cache's prefix tails) at bytes_per_swa_token
    swa_tokens_per_request: int = 0
    bytes_per_swa_token: float = 0.0
    window: int = 0  # the model's sliding window, for the sliding-window pool's start check (SWA_FLOOR_SOURCE)


# DeepSeek-V4.1 (V41_SOURCE): SGLang serves it through DeepseekV4ForCausalLM with DSV4PoolConfigurator. Its ratio-1 / 2
# KV-source layers keep one 584-B latent (kv_bytes) and one fp4 index key (index_head_dim / 2 + index_head_dim / 32:
# the low-ratio index pools are built with force_fp4) per compressed position; no ratio-4 or ratio-128 layer, so no c4
# / c128 terms. Left without --swa-full-tokens-ratio (the automatic 0.1 does not count as the operator's) and with
# max_running_requests and a chunk known, the sliding-window pool is sized in cap mode: ceil_align(cap + headroom,
# page) tokens at bytes_per_swa_token = kv_bytes x the target's layers, taken before the division; cap =
# (window + SGLANG_SWA_EVICTION_INTERVAL x draft tokens + page + the next decode's page) x max_running_requests +
# 2 chunks in flight (the overlap scheduler) + a page; headroom = prefix_tails x (window + page), prefix_tails =
# 4 x max_running_requests with the radix cache on, 0 with it off. Speculative decoding (DSpark) scales both
# per-token figures by (layers + 1) / layers, and with D draft tokens (SGLang's speculative_num_draft_tokens: DSpark's
# verify width, the checkpoint's dspark_block_size + 1 unless set) a request's trailing tokens hold the eviction
# interval D times and its next decode 2 x get_alloc_len_per_decode = 2 x max(steps x topk, D) tokens in place of a
# page (compute_swa_request_cap, spec-v2 under the overlap scheduler: the allocator keeps 2 x alloc_len outstanding);
# k3plan's verify width at topk 1 is that D (V41_SPEC_SOURCE)
V41_SOURCE = (
    "sgl-project/sglang@8bf69b4f python/sglang/srt/model_executor/pool_configurator.py (DSV4PoolConfigurator: "
    "low_ratio_bytes_per_full_token, _get_bytes_per_full_token, _get_bytes_per_swa_token, _resolve_swa_cap_tokens, "
    "_resolve_swa_prefix_tails, _get_swa_fixed_bytes; compute_swa_request_cap); mem_cache/deepseek_v4_memory_pool.py "
    "get_dsv4_indexer_bytes_per_token (use_fp4_indexer: index_head_dim // 2 + index_head_dim // 32); a public SGLang "
    "V4.1-Flash start log with DSpark prints 'bytes_per_full_token=1670.75' and 'swa_fixed=0.30 GB' for "
    "'swa_tokens=13312' (tests/engines/test_sglang_dsv4_pool.py reproduces both)"
)
V41_SPEC_SOURCE = (
    "sgl-project/sglang python/sglang/srt/model_executor/pool_configurator.py compute_swa_request_cap (trailing = "
    "window + eviction_interval x speculative_num_draft_tokens + page; spec-v2 decode_alloc = 2 x "
    "get_alloc_len_per_decode()) and mem_cache/allocation_sizing.py get_alloc_len_per_decode (max(steps x topk, "
    "num_draft_tokens) at topk 1), read in a stored copy, commit not pinned; DSpark's verify width is the checkpoint's "
    "dspark_block_size + 1 (arg_groups model overrides: q_len = speculative_num_draft_tokens or "
    "speculative_dspark_block_size + 1). With D = 6 (V4.1-Flash's block 5) the public DSpark start log's "
    "'swa_tokens=13312' at 4 requests and 1,024-token chunks is reproduced exactly; the same rules in the sglang 0.5.21 "
    "wheel (PyPI), model_executor/pool_configurator.py compute_swa_request_cap and mem_cache/allocation_sizing.py "
    "get_alloc_len_per_decode, and DSpark's width there from arg_groups/speculative_hook.py _handle_dspark "
    "(speculative_num_draft_tokens = gamma + 1), which reproduce InferenceX#3347's 439,040 SWA slots exactly"
)
# apply_deepseek_v4_defaults (python/sglang/srt/arg_groups/deepseek_v4_hook.py @006cbb66, and @a32a55cf in its older
# form: "if server_args.max_running_requests is None: server_args.max_running_requests = 256"), which runs for
# DeepseekV4ForCausalLM (V4 and V4.1): max_running_requests 256 where the command sets none ('Setting
# max_running_requests to 256 for ...'), the whole server's (resolve_max_num_reqs divides it by the attention-DP size)
DSV4_RUNNING = 256
DSV4_RUNNING_SOURCE = (
    "SGLang's DeepSeek-V4 default, max_running_requests 256 where the command sets none (sgl-project/sglang@a32a55cf "
    "python/sglang/srt/arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults; @006cbb66 the same), divided by the "
    "attention-DP size (mem_cache/kv_cache_configurator.py resolve_max_num_reqs @003fca80)"
)
EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL's default (environ.py)
PREFIX_TAILS_PER_REQUEST = 4  # _resolve_swa_prefix_tails: 4 x max_running_requests with the radix cache on
CHUNKS_IN_FLIGHT = 2  # compute_swa_request_cap: 2 chunked prefills in flight under the overlap scheduler (default)
# --swa-prefix-tails N (0.5.21 on): the cap mode's headroom is N x (window + page) tokens for the worker, in place of
# 4 x max_running_requests a worker with the radix cache on (0 with it off); the flag is read only there
PREFIX_TAILS_SOURCE = (
    "sglang 0.5.21 wheel (PyPI), sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator."
    "_resolve_swa_prefix_tails ('prefix_tails = get_schedule().swa_prefix_tails; if prefix_tails is not None: return "
    "prefix_tails'; else 0 with --disable-radix-cache, else 4 x requested_max_running_requests_per_worker) and "
    "_resolve_swa_cap_tokens (headroom = swa_prefix_tails x (sliding_window_size + page_size); ceil_align(cap + "
    "headroom, page)); arg_groups/kv_cache_hook.py ('--swa-prefix-tails should be a non-negative integer'); no other "
    "reader of swa_prefix_tails in the wheel; the same in the 0.5.22 and 0.5.23 wheels"
)


# DeepSeek-V4.1's pool by release (fit --engine-version): "main" is the main-branch read V41_SOURCE cites (a release
# named none: its public log reproduced); the 0.5.21 and 0.5.22 wheels add the sliding-window slots' paged bytes (the
# V4 layout, 585 B a token in 256-token pages) and the ratio-2 layers' pending-pair state, fixed a request slot; 0.5.23
# pages the ratio-1 / 2 latents too, and on an SM100 GPU with attention TP 1 and FP8 KV (its flashmla_mega backend)
# stores them in the V4.1 layouts (V41_FORM_SOURCE)
V41_FORM_RELEASES = (((0, 5, 23), "0.5.23"), ((0, 5, 21), "0.5.21"))
V41_FORM_SOURCE = (
    "sglang 0.5.21 / 0.5.23 wheels (PyPI), sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator: "
    "_get_bytes_per_swa_token (_get_paged_kv_bytes_per_token() x layers), _compressed_bytes_per_full_token (ratio 1 / "
    "2: (kv_bytes + low_ratio_index_bytes) / ratio in 0.5.21, the paged bytes in 0.5.23), _get_c2_state_fixed_bytes "
    "(ceil((slots x ring + ring + 1) / 2) x 2 rows of 2 x head_dim f32 a ratio-2 layer, slots = max_running_requests "
    "// attn_dp_size + 1, ring 2 or 1 << (draft tokens + 1).bit_length(): mem_cache/deepseek_v4_memory_pool.py "
    "get_compress_state_ring_size); select_dsv4_kv_layout and kernels/ops/attention/dsv4/kv_layout.py KVLayout (V4: "
    "nope + 2 x rope + 8 B a token padded to rows of nope + 2 x rope; V41: head_dim + head_dim / 32 in rows of "
    "head_dim; V41_FP4 for ratios 1 / 2: head_dim / 2 + head_dim / 16 in rows of head_dim / 2); 0.5.23's flashmla_mega "
    "(arg_groups/deepseek_v4_hook.py _default_dsv4_attention_backend: V4.1, CUDA SM100, kv fp8_e4m3, attention TP 1) "
    "forces the V41 layouts. Not priced: 0.5.23's low-ratio pages' padding (_get_low_ratio_kv_padding_bytes, a few "
    "pages, its index page by DeepGEMM's build)"
)


# SGLANG_DSV4_COMPRESS_STATE_DTYPE (engines/sglang/serve.py STATE_DTYPE_SOURCE) does not reach DeepSeek-V4.1's pool: the
# variable sizes the c4 and c128 compressor states only, and V4.1's layers have ratios 0 / 1 / 2 (none of 4 or 128),
# while its ratio-2 pending-pair ring is float32 whatever the variable says, in the allocator and the sizing alike
V41_PAIR_DTYPE_SOURCE = (
    "sglang 0.5.21-0.5.23 wheels (PyPI): sglang/srt/mem_cache/deepseek_v4_memory_pool.py _make_pair_state_pool "
    "(CompressStatePool(..., dtype=torch.float32): 'the fp32 (kv, score) of an even token until its odd partner "
    "arrives'; the variable's c4_state_dtype / c128_state_dtype reach _make_compress_state_pool, ratios 4 and 128, "
    "alone), model_executor/pool_configurator.py DSV4PoolConfigurator._get_c2_state_fixed_bytes (state_rows x 2 x "
    "head_dim x torch.float32.itemsize; _get_dsv4_compress_state_dtype_sizes read by the c4 and c128 terms only)"
)


def v41_form_for_release(release: tuple[int, int, int] | None) -> str:
    """DeepSeek-V4.1's pool form of a SGLang release (``V41_FORM_RELEASES``); None (no release): the main-branch read."""
    if release is None:
        return "main"
    return next((form for first, form in V41_FORM_RELEASES if release >= first), "main")


def padded_token_bytes(tokens: int, token_bytes: int, row: int) -> float:
    """A token's bytes in a page of ``tokens`` stored ``token_bytes`` each, the page padded to whole ``row``-byte rows
    (KVLayout.page_bytes)."""
    return -(-tokens * token_bytes // row) * row / tokens


def sglang_dsv41_pool(
    d: DSV4Dims,
    *,
    chunk: int,
    max_running_requests: int,
    radix_cache: bool = True,
    swa_ratio: float | None = None,
    page: int | None = None,
    draft_layers: int = 0,
    draft_tokens: int = 0,
    form: str = "main",
    v41_layout: bool = False,
    prefix_tails: int | None = None,
) -> SglangDsv4Pool:
    """SGLang's pool for DeepSeek-V4.1 (V41_SOURCE): bytes a full token and, in cap mode (``swa_ratio`` None: the
    operator gave no --swa-full-tokens-ratio), the sliding-window pool taken first, at ``chunk`` tokens a prefill
    (--chunked-prefill-size) and ``max_running_requests``. ``draft_layers``: a DSpark drafter's (1: SGLang counts one
    draft layer) scales the per-token figures by (layers + 1) / layers; ``draft_tokens``: the tokens it verifies a
    step (SGLang's speculative_num_draft_tokens; 0: no speculative decoding), which set a request's cap terms
    (V41_SPEC_SOURCE). ``form``: the release's (``v41_form_for_release``); ``v41_layout``: 0.5.23's V4.1 layouts
    (flashmla_mega: V41_FORM_SOURCE); ``prefix_tails``: --swa-prefix-tails, the cap mode's prefix tails for the whole
    worker in place of 4 a running request (PREFIX_TAILS_SOURCE; None: the default)."""
    assert d.csa2 is not None
    page = page or PAGE
    layers = len(d.compress_ratios)
    nope, rope = d.head_dim - d.rope_dim, d.rope_dim
    kv = nope + 2 * rope + 8
    index = d.index_head_dim // 2 + d.index_head_dim // 32
    sources = [d.compress_ratios[i] for i in d.csa2.kv_source_layer_ids if d.compress_ratios[i] in (1, 2)]
    head = d.head_dim
    if form == "main":
        swa_kv, low_kv = float(kv), {1: float(kv), 2: float(kv)}
    elif (
        v41_layout and form == "0.5.23"
    ):  # 0.5.23 under flashmla_mega: V41 (fp8) for the window, V41_FP4 for ratios 1 / 2
        swa_kv = padded_token_bytes(page, head + head // 32, head)
        low_kv = {r: padded_token_bytes(page // r, head // 2 + head // 16, head // 2) for r in (1, 2)}
    else:  # the V4 layout's pages: the window's from 0.5.21, the low ratios' from 0.5.23
        swa_kv = padded_token_bytes(page, kv, nope + 2 * rope)
        low_kv = {
            r: padded_token_bytes(page // r, kv, nope + 2 * rope) if form == "0.5.23" else float(kv) for r in (1, 2)
        }
    low = sum((low_kv[r] + index) / r for r in sources)
    per_swa = swa_kv * layers
    infl = (layers + 1) / layers if draft_layers else 1.0
    # the ratio-2 layers' pending-pair state, a ring a request slot (0.5.21 on: V41_FORM_SOURCE), f32 under any
    # SGLANG_DSV4_COMPRESS_STATE_DTYPE (V41_PAIR_DTYPE_SOURCE)
    ring2 = 1 << (draft_tokens + 1).bit_length() if draft_tokens else 2
    c2_rows = -(-((max_running_requests + 1) * ring2 + ring2 + 1) // 2) * 2
    c2 = 0 if form == "main" else c2_rows * 2 * head * F32 * sources.count(2)
    c2_said = (
        f"; + the ratio-2 layers' pending-pair state, {c2_rows:,} rows x {2 * head * F32:,} B x {sources.count(2)} "
        f"layers = {c2:,} B, and the {form} pages ({swa_kv:g} B a window token, {low_kv[1]:g} / {low_kv[2]:g} B a "
        f"ratio-1 / 2 latent: {V41_FORM_SOURCE})"
        if form != "main"
        else ""
    )
    if swa_ratio is None:  # cap mode
        window = d.sliding_window
        # trailing tokens (window, the eviction interval a draft token, a page) and the next decode's allocation
        decode = 2 * draft_tokens if draft_tokens else page
        per_request = window + EVICTION_INTERVAL * max(draft_tokens, 1) + page + decode
        tails = PREFIX_TAILS_PER_REQUEST * (window + page) if radix_cache else 0
        cap = per_request * max_running_requests + CHUNKS_IN_FLIGHT * chunk + page
        # the headroom: the flag's prefix tails for the worker, or 4 a request with the radix cache on
        headroom = tails * max_running_requests if prefix_tails is None else prefix_tails * (window + page)
        if prefix_tails is not None:  # a request's share of the worker's tails, for the budget's charge
            tails = prefix_tails * (window + page) // max(max_running_requests, 1)
        tokens = -(-(cap + headroom) // page) * page
        bpft, bpst = low * infl, per_swa * infl
        fixed = int(tokens * bpst) + c2
        terms = (
            f"window {window} + eviction {EVICTION_INTERVAL} x {draft_tokens} draft tokens + a page of {page} + the "
            f"next decode's 2 x {draft_tokens}"
            if draft_tokens
            else f"window {window} + eviction {EVICTION_INTERVAL} + 2 pages of {page}"
        )
        how = (
            f"{bpft:,.2f} B a full token (the KV sources' {f'{kv} B' if form == 'main' else 'paged'} latents and "
            f"{index} B fp4 index keys over their "
            f"ratios), the sliding-window pool apart in cap mode: {tokens:,} tokens (({terms}"
            + (f" + radix tails 4 x {window + page}" if tails and prefix_tails is None else "")
            + f") x {max_running_requests} requests + 2 x {chunk:,} + {page}"
            + (
                f" + --swa-prefix-tails {prefix_tails:,} x (window + page) {window + page}"
                if prefix_tails is not None
                else ""
            )
            + f") x {bpst:,.0f} B = {fixed - c2:,} B"
            + (f" ({V41_SPEC_SOURCE})" if draft_tokens else "")
            + (f" ({PREFIX_TAILS_SOURCE})" if prefix_tails is not None else "")
            + c2_said
        )
        return SglangDsv4Pool(
            bytes_per_full_token=bpft,
            page=page,
            swa_ratio=0.0,
            source=f"{how}: {V41_SOURCE}",
            fixed_bytes=fixed,
            fixed_source="DeepSeek-V4.1's sliding-window pool, taken before the full tokens (cap mode)"
            + (", and its ratio-2 layers' pending-pair state" if c2 else ""),
            swa_tokens_per_request=per_request + tails,
            bytes_per_swa_token=bpst,
        )
    bpft = (swa_ratio * per_swa + low) * infl
    return SglangDsv4Pool(
        bytes_per_full_token=bpft,
        page=page,
        swa_ratio=swa_ratio,
        source=f"{bpft:,.2f} B a full token at --swa-full-tokens-ratio {swa_ratio:g}{c2_said}: {V41_SOURCE}",
        bytes_per_swa_token=per_swa * infl,
        fixed_bytes=c2,
        fixed_source="DeepSeek-V4.1's ratio-2 layers' pending-pair state" if c2 else "",
        window=d.sliding_window,
    )


def c128_row_bytes(d: DSV4Dims, state_bytes: int = F32) -> int:
    """A c128 compressor-state row: 2 x head_dim elements of ``state_bytes`` (f32, SGLang's default; 2 under
    SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16: engines/sglang/serve.py STATE_DTYPE_SOURCE) (FORM_0515_SOURCE)."""
    return 2 * d.head_dim * state_bytes


def c128_state_rows(max_running_requests: int, ring: int = RING[128]) -> int:
    """The c128 compressor-state rows SGLang 0.5.15 preallocates for ``max_running_requests`` a worker
    (FORM_0515_SOURCE): (requests + 1) slots of a ``ring``-row ring (128; 256 under speculative decoding), + a ring +
    1, in whole 128-row blocks."""
    return -(-((max_running_requests + 1) * ring + ring + 1) // 128) * 128


def sglang_dsv4_pool(
    d: DSV4Dims,
    *,
    swa_ratio: float | None = None,
    page: int | None = None,
    max_running_requests: int | None = None,
    form: str = FORMS[0],
    speculative: bool = False,
    state_bytes: int = F32,
) -> SglangDsv4Pool:
    """SGLang's bytes a full token for DeepSeek-V4 (module docstring); ``swa_ratio``: --swa-full-tokens-ratio,
    ``page``: --page-size (None: SGLang's V4 defaults, DEFAULTS_SOURCE); ``max_running_requests``: a worker's (the
    server's // its dp_size; None: SGLang's V4 default, DSV4_RUNNING), which sizes the current release's fixed c128
    states; ``form``: the release's (``FORMS``); ``speculative``: EAGLE's draft on (engines/sglang/spec.py
    DSV4_SPEC_SOURCE): the rings of 16 / 256 rows and a full token's bytes x (T + 1) / T, read in 0.5.15's form only;
    ``state_bytes``: a compressor-state element (4: f32, SGLang's default; 2 under SGLANG_DSV4_COMPRESS_STATE_DTYPE=
    bf16, engines/sglang/serve.py STATE_DTYPE_SOURCE)."""
    if form not in FORMS:
        raise ValueError(f"SGLang DeepSeek-V4 pool form {form!r}: expected one of {', '.join(FORMS)}")
    if speculative and form not in FIXED_C128_FORMS:
        raise ValueError(f"SGLang DeepSeek-V4 pool form {form!r} under speculative decoding was not read")
    from k3plan.engines.sglang.spec import DSV4_SPEC_SOURCE

    ring = SPEC_RING if speculative else RING
    asked = swa_ratio
    swa_ratio = SWA_RATIO if swa_ratio is None else swa_ratio
    ratios = tuple(d.compress_ratios) + (tuple(d.mtp_compress_ratios) if form == "ktransformers-1978" else ())
    n, n4, n128 = len(ratios), ratios.count(4), ratios.count(128)
    nope, rope = d.head_dim - d.rope_dim, d.rope_dim
    kv = nope + 2 * rope + 8
    index = d.index_head_dim + d.index_head_dim // 128 * 4
    a = nope + rope
    s4, s128, si = 2 * 2 * a * state_bytes, c128_row_bytes(d, state_bytes), 2 * 2 * d.index_head_dim * state_bytes
    w = d.sliding_window
    current = form in FIXED_C128_FORMS
    if form == "0.5.21":  # the paged layout's bytes, the c4 rings per engine page (FORM_0521_SOURCE)
        pg = page or PAGE
        swa_token = paged_token_bytes(d, pg) * n + ring[4] / pg * (s4 + si) * n4
        bpft = (
            swa_ratio * swa_token
            + (paged_token_bytes(d, pg // 4) / 4 + index / 4) * n4
            + paged_token_bytes(d, pg // 128) / 128 * n128
        )
    else:
        bpft = (
            swa_ratio * kv * n
            + kv * n4 / 4
            + kv * n128 / 128
            + index * n4 / 4
            + swa_ratio * ring[4] / w * s4 * n4
            + (0.0 if current else swa_ratio * ring[128] / w * s128 * n128)
            + swa_ratio * ring[4] / w * si * n4
        )
    target_layers = n
    if speculative:  # the draft's one layer budgeted into a full token (DSV4_SPEC_SOURCE)
        bpft *= (target_layers + 1) / target_layers
    running = DSV4_RUNNING if max_running_requests is None else max_running_requests
    fixed = c128_state_rows(running, ring[128]) * s128 * n128 if current and n128 else 0
    v21 = form == "0.5.21"
    pg = page or PAGE
    rings = (
        f"{'f32' if state_bytes == F32 else f'{state_bytes} B'} compressor rings of {ring[4]} rows a "
        + (f"{pg}-token engine page (c4)" if v21 else f"{w}-token window page (c4)")
        + f", the c128 rings apart: {c128_state_rows(running, ring[128]):,} rows x {s128:,} B x {n128} layers = "
        f"{fixed:,} B for {running:,} running requests a worker ({FORM_0515_SOURCE})"
        + (
            f"; the V4 layout's pages: {paged_token_bytes(d, pg):g} / {paged_token_bytes(d, pg // 4):g} / "
            f"{paged_token_bytes(d, pg // 128):g} B a window / c4 / c128 token ({FORM_0521_SOURCE})"
            if v21
            else ""
        )
        if current
        else f"{'f32' if state_bytes == F32 else f'{state_bytes} B'} compressor rings of {ring[4]} / {ring[128]} rows "
        f"a {w}-token window page (SGLang {form}'s form)"
    )
    return SglangDsv4Pool(
        bytes_per_full_token=bpft,
        page=page or PAGE,
        swa_ratio=swa_ratio,
        window=w,
        source=(
            f"{bpft:,.2f} B a full token at --swa-full-tokens-ratio {swa_ratio:g}"
            + ("" if asked is not None else f" ({DEFAULTS_SOURCE})")
            + f" ({n} layers, {n4} c4, {n128} c128; {kv} B entries, {index} B index keys, {rings}): {SOURCE}"
            + (
                f"; speculative decoding: rings of {ring[4]} / {ring[128]} rows and x ({n} + 1) / {n} for the draft's "
                f"layer ({DSV4_SPEC_SOURCE})"
                if speculative
                else ""
            )
        ),
        fixed_bytes=fixed,
        fixed_source=(
            f"the c128 compressor states of {running:,} running requests, taken before the full tokens "
            f"(SGLang {form}: {FORM_0515_SOURCE})"
            if fixed
            else ""
        ),
    )


def dsv4_request_charge(
    d: DSV4Dims,
    *,
    vendor: str,
    chunk: int = 0,
    spec_tokens: int = 0,
    release: tuple[int, int, int] | None = None,
    swa_ratio: float | None = None,
    state_bytes: int = F32,
    **_: int | str,
) -> RequestCharge | None:
    """What SGLang's pool charges a DeepSeek-V4 request on a GPU: its full tokens at ``bytes_per_full_token`` in whole
    pages, at its V4 defaults (the swa ratio and page a command that sets neither runs; the start check reads the
    command's), the windows and compressor rings inside that figure, nothing apart. DeepSeek-V4.1 (``sglang_dsv41_pool``
    at its defaults, ``chunk`` tokens a prefill): its KV sources' full tokens, and apart its share of the
    sliding-window pool, the tokens a running request adds to the cap (the pool's 2 chunks and page in flight are not
    a request's: not charged), with speculative decoding (``spec_tokens`` k: SGLang verifies k + 1 draft tokens a step)
    its one draft layer in the per-token figures and the draft tokens in its cap terms (V41_SPEC_SOURCE); None off a
    GPU. ``release``: the pool form's (the budget's: engines/sglang/dsv4.py request_charge passes the newest read
    where a question names none; None here: the cited forms, 0.5.15's and V4.1's main-branch read). V4.1's pages in
    the V4 layout: 0.5.23's V4.1 layouts (flashmla_mega at attention TP 1 on SM100) are the start check's alone, the
    charge not being told the split. ``swa_ratio``: a command's --swa-full-tokens-ratio (None: SGLang's V4 default;
    V4.1's cap mode), as its start check reads it (engines/sglang/memory.py), so the budget and the check charge one
    figure a token; ``spec_tokens`` > 0 (V4): the draft's layer and rings as the check's pool reads a draft
    (``sglang_dsv4_pool``'s ``speculative``); ``state_bytes``: a compressor-state element (SGLANG_DSV4_COMPRESS_STATE_DTYPE: 4 f32, its default;
    2 bf16), V4's rings in a full token and its slot's c128 ring, as the check's pool reads it (V4.1's pool is read at
    f32 by both: the variable reaches no V4.1 state, V41_PAIR_DTYPE_SOURCE)."""
    from k3plan.engines.dsv4_layout import RequestCharge
    from k3plan.engines.release import release_text

    if vendor not in ("nvidia", "amd"):
        return None
    at = None if release is None else (release[0], release[1], release[2])
    said = "no release: the cited" if at is None else f"sglang {release_text(at)}: the"
    if d.csa2 is not None:
        draft = spec_tokens + 1 if spec_tokens else 0
        form41 = v41_form_for_release(at)
        v41 = sglang_dsv41_pool(
            d,
            chunk=chunk,
            max_running_requests=1,
            draft_layers=int(draft > 0),
            draft_tokens=draft,
            form=form41,
            swa_ratio=swa_ratio,  # given: ratio mode, the window in each full token and no cap pool apart
        )
        # a request slot's ratio-2 pending-pair ring (0.5.21 on; the pool's fixed_bytes at one request hold two slots
        # and a spare ring, so the slot's share is taken from the ring itself)
        ring2 = 1 << (draft + 1).bit_length() if draft else 2
        n2 = sum(1 for i in d.csa2.kv_source_layer_ids if d.compress_ratios[i] == 2)
        c2_slot = 0 if form41 == "main" else ring2 * 2 * d.head_dim * F32 * n2
        apart = int(v41.swa_tokens_per_request * v41.bytes_per_swa_token) + c2_slot
        return RequestCharge(
            block_tokens=v41.page,
            block_bytes=v41.page * v41.bytes_per_full_token,
            fixed_blocks=0,
            source=f"SGLang's DeepSeek-V4.1 pool ({said} {form41} form), "
            + (
                f"{v41.bytes_per_full_token:,.2f} B a full token at its defaults: {V41_SOURCE}"
                if swa_ratio is None
                else v41.source
            ),
            apart_bytes=apart,
            apart_source=(
                (
                    f"its slot's ratio-2 pending-pair ring, {ring2} rows x {2 * d.head_dim * F32:,} B x {n2} layers "
                    f"(sglang {form41}: {V41_FORM_SOURCE})"
                    if c2_slot
                    else ""
                )
                if swa_ratio is not None
                else f"its share of the sliding-window pool (cap mode, SGLang's default for V4.1): "
                f"{v41.swa_tokens_per_request:,} tokens (window {d.sliding_window} + eviction {EVICTION_INTERVAL}"
                + (f" x {draft} draft tokens + a page + the next decode's 2 x {draft}" if draft else " + 2 pages")
                + f" + the radix cache's 4 prefix tails of window + page) x {v41.bytes_per_swa_token:,.0f} B, "
                f"SGLang sizing the pool for --max-running-requests at the sequences priced (k3plan's launch line "
                f"writes it); left at its default {DSV4_RUNNING} it holds that many requests' windows whatever runs"
                + (
                    f"; and its slot's ratio-2 pending-pair ring, {ring2} rows x {2 * d.head_dim * F32:,} B x {n2} "
                    f"layers (sglang {form41}: {V41_FORM_SOURCE})"
                    if c2_slot
                    else ""
                )
            ),
        )
    form = form_for_release(at)
    # speculative decoding (a draft verifying spec_tokens + 1 tokens): the draft's layer in a full token and the longer
    # rings, as the start check's pool reads a command's draft (sglang_dsv4_pool's ``speculative``)
    speculative = spec_tokens > 0
    pool = sglang_dsv4_pool(d, form=form, swa_ratio=swa_ratio, state_bytes=state_bytes, speculative=speculative)
    n128 = tuple(d.compress_ratios).count(128)
    # a request slot's c128 ring (FORM_0515_SOURCE), a fixed charge from 0.5.15; 0.5.13's form counts the rings in
    # its bytes a full token
    row, rows = c128_row_bytes(d, state_bytes), (SPEC_RING if speculative else RING)[128]
    ring = rows * row * n128 if form in FIXED_C128_FORMS else 0
    if not ring:
        return RequestCharge(
            block_tokens=pool.page,
            block_bytes=pool.page * pool.bytes_per_full_token,
            fixed_blocks=0,
            source=f"SGLang's DeepSeek-V4 pool ({said} {form} form), {pool.source}",
        )
    return RequestCharge(
        block_tokens=pool.page,
        block_bytes=pool.page * pool.bytes_per_full_token,
        fixed_blocks=0,
        source=f"SGLang's DeepSeek-V4 pool ({said} {form} form), {pool.source}",
        apart_bytes=ring,
        apart_source=(
            f"its slot's c128 compressor-state ring, {rows} rows x {row:,} B x {n128} layers "
            f"(SGLang from 0.5.15 preallocates one a running request: {FORM_0515_SOURCE})"
        ),
    )


def dsv41_mega(d: DSV4Dims, *, hardware: str, attn_tp: int, kv_raw: str | None) -> bool:
    """0.5.23's flashmla_mega attention runs for DeepSeek-V4.1: an SM100 GPU, attention TP 1, FP8 KV (auto or
    fp8_e4m3; V41_FORM_SOURCE): the pool's V4.1 layout and the model's extra RoPE tables (dsv4_buffers.py)."""
    from k3plan.engines.sglang.kernels import BLACKWELL

    return d.csa2 is not None and hardware in BLACKWELL and attn_tp == 1 and kv_raw in (None, "auto", "fp8_e4m3")
