"""SGLang's own KV-pool sizing and start rule, as its code does it: pure functions over numbers passed in (fit
--serve's engine verdict for ``python3 -m sglang.launch_server``).

    rest        = mem_fraction_static x total HBM - weights     (_profile_available_bytes: what the fraction leaves
                                                                  after loading; activations and CUDA graphs run in
                                                                  the 1 - fraction share)
    KV pool     = rest - the state (mamba) pool                  (handle_max_mamba_cache)
    max_total_num_tokens = KV pool // bytes a token, page size 1
    starts      when max_total_num_tokens > 0 (MemoryPoolConfig.__post_init__: RuntimeError "Not enough memory.
                Please try to increase --mem-fraction-static.") and the longest request it can take,
                max_req_len = min(context_len - 1, max_total_num_tokens - 1), leaves max_req_input_len = max_req_len
                - 5 > 0 (TpModelWorker.__init__: AssertionError "Memory pool size is too small").

The rules are those of the sglang 0.5.15 wheel, re-read to 0.5.23; what changed is followed from the release the
command is read as (engines/sglang/releases.py: the state pool's padding slot, a multimodal model's reservation,
DeepSeek-V4's window-pool floor).

So SGLang starts whenever its pool holds a handful of tokens: a context longer than the pool is not refused at
start, a request is capped at what the pool holds (max_req_len) -- unlike vLLM, which refuses to start when one
--max-model-len request does not fit.
"""

from __future__ import annotations

from k3plan.engines.engine import WEIGHTS_SOURCE
from k3plan.engines.release import Release
from k3plan.engines.sglang.dsv4_pool import SglangDsv4Pool
from k3plan.engines.sglang.releases import (
    MAMBA_PAD_FROM,
    MAMBA_PAD_SOURCE,
    MM_RESERVE_FROM,
    MM_RESERVE_MIB,
    MM_RESERVE_SOURCE,
    SWA_FLOOR_FROM,
    SWA_FLOOR_SOURCE,
    follows,
)
from k3plan.engines.sglang.spec import DRAFT_KV_SOURCE, SglangDraft, draft_cell_bytes
from k3plan.engines.vllm.memory import EngineSizing, Figure
from k3plan.units import GiB

SGLANG_NO_POOL_AT = (
    "sgl-project/sglang@003fca80 python/sglang/srt/model_executor/pool_configurator.py MemoryPoolConfig.__post_init__ "
    "(RuntimeError when max_total_num_tokens <= 0)"
)
SGLANG_TOO_SMALL_AT = (
    "sgl-project/sglang@0045f98e python/sglang/srt/managers/tp_worker.py TpModelWorker.__init__ (assert max_req_len > 0 "
    "and max_req_input_len > 0, max_req_len = min(context_len - 1, max_total_num_tokens - 1), max_req_input_len = "
    "max_req_len - 5)"
)
SGLANG_RUNNING = (
    "sgl-project/sglang@0045f98e python/sglang/srt/managers/tp_worker.py TpModelWorker.__init__ (max_running_requests "
    "= --max-running-requests, else max_total_num_tokens // 2, capped by the request pool)"
)
SGLANG_POOL = (
    "sgl-project/sglang python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py _profile_available_bytes "
    "(rest_memory = available after loading - total x (1 - mem_fraction_static)) and handle_max_mamba_cache (the "
    "state pool out of rest_memory); read in stored versions"
)
SGLANG_CAP = (
    "sgl-project/sglang python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py: max_total_num_tokens = "
    "min(the profiled count, server_args.max_total_tokens) before the pool is allocated; read in stored versions"
)
SGLANG_PAGE = (
    "sgl-project/sglang python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py: max_total_num_tokens rounded "
    "down to whole pages of --page-size tokens before the pool is allocated; read in stored versions"
)
SGLANG_DCP = (
    "decode context parallelism: each rank's pool is sized as without it (sgl-project/sglang@6fde4f6f "
    "python/sglang/srt/model_executor/pool_configurator.py DefaultPoolConfigurator._compute_cell_size: an MLA token "
    "costs (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes, no DCP or TP term), and the allocator holds "
    "max_total_num_tokens x dcp tokens in pages of page_size x dcp, every rank holding 1/dcp of each page "
    "(sgl-project/sglang@00fe477f python/sglang/srt/mem_cache/kv_cache_builder.py build_kv_cache: 'When dcp enabled, "
    "kv_pool_allocator.page_size is page_size * dcp_size'; sgl-project/sglang@bebe28c3 "
    "test/registered/dcp/test_dsv31_dcp8_gsm8k.py: 'When DCP is enabled, max_total_num_tokens is multiplied by "
    "dcp_world_size', ~8x the non-DCP value at DCP 8)"
)
SGLANG_MAMBA_AT = (
    "sgl-project/sglang@5435ebae python/sglang/srt/mem_cache/kv_cache_configurator.py "
    "KVCacheConfigurator._handle_max_mamba_cache"
)
SGLANG_REQS_AT = SGLANG_MAMBA_AT.replace("_handle_max_mamba_cache", "resolve_max_num_reqs")
SGLANG_MAMBA = (
    f"{SGLANG_MAMBA_AT}: the state (mamba) pool out of the memory the fraction leaves after the weights -- "
    "--max-mamba-cache-size slots where given (// the attention-DP size), else --max-running-requests slots with "
    "--disable-radix-cache, else mamba_full_memory_ratio r / (1 + r) of that memory in whole slots (ServerArgs' "
    "default r 0.9: 'mamba_full_memory_ratio=0.9' in the server_args SGLang logs at start); the KV pool takes the "
    "rest; resolve_max_num_reqs caps the running requests at the slots // _calculate_mamba_ratio() (3 with the "
    "radix cache, 1 without)"
)
SGLANG_MAMBA_RATIO = 0.9  # ServerArgs.mamba_full_memory_ratio's default (SGLANG_MAMBA)
# the tokens the engine keeps off the longest request: max_req_input_len = min(context_len, pool) - 1 - 5 > 0
SGLANG_MIN_POOL_TOKENS = 7
# what SGLang's free-memory reading after the load holds that k3plan does not price: the pool an upper bound
SGLANG_UNPRICED = "SGLang's non-torch memory (the CUDA context and NCCL's buffers, in the free memory it reads)"
# what SGLang runs after sizing its pool, out of the 1 - mem_fraction_static share, that k3plan does not size (model_runner.py
# ModelRunner.initialize: init_memory_pool, then init_cuda_graphs; the warm-up request once the server is up): its
# capture is where commands near the share's edge fail ('Capture cuda graph failed: CUDA out of memory', the
# sglang-38861 cases)
SGLANG_AFTER_POOL = "the CUDA graphs it captures and the warm-up it runs after the pool"
# where a log of the GPU gives the free memory before loading (FREE_BEFORE_LOAD), the context and NCCL are in it, at
# the logged split; what the load adds outside the weights still is not
SGLANG_UNPRICED_AFTER_LOG = (
    "SGLang's non-torch memory beyond the logged free memory before loading (NCCL's buffers at another split than the "
    "logged one; what the load adds outside the weights: cuBLAS, kernel modules)"
)

SGLANG_DEEPEP_OOM_AT = (
    "DeepEP's Buffer.__init__ (deepseek-ai/DeepEP@9af0e0d0 csrc/deep_ep.cpp Buffer::Buffer: CUDA_CHECK(cudaMalloc) of "
    "the NVLink buffer and workspace; Buffer::sync: internode::alloc of the RDMA bytes from NVSHMEM), built by sglang "
    "0.5.15 / 0.5.23 wheels' sglang/srt/layers/moe/token_dispatcher/deepep.py DeepEPBuffer.get_deepep_buffer at the "
    "first dispatch: the decode CUDA graphs' warm-up (Scheduler.init_all_cuda_graphs, after init_memory_pools) under "
    "--deepep-mode auto / low_latency, the first request's forward under normal"
)
SGLANG_SYMM_OOM_AT = (
    "sglang 0.5.16-0.5.23 wheels (PyPI), sglang/srt/distributed/device_communicators/pynccl_allocator.py "
    "prealloc_symmetric_memory_pool (0.5.11-0.5.15: sglang/srt/model_executor/model_runner.py "
    "ModelRunner.prealloc_symmetric_memory_pool), after the KV pool and the CUDA graphs"
)
# --enable-symm-mem's NCCL settings (engines/sglang/serve.py symm_mem): NCCL sizes its own NVLS buffers by topology
SGLANG_SYMM_UNPRICED = (
    "; under --enable-symm-mem NCCL's NVLS buffers (NCCL_NVLS_ENABLE=1, NCCL_CUMEM_ENABLE=1: sglang 0.5.12 wheel "
    "sglang/srt/entrypoints/engine.py _set_envs_and_config), sized by NCCL for the topology, and the symmetric pool's "
    "growth past its preallocation at run time"
)


# The request table SGLang allocates with the KV pool, after the profile (so out of the 1 - mem_fraction_static share,
# before the attention backend and the CUDA graphs): ReqToTokenPool's req_to_token, an int32 (size, context_len + 4)
# tensor, size max_num_reqs = --max-running-requests where given, else min(max(int(max_total_num_tokens / context_len
# x 512), 2048), 4096) from the profiled (uncapped) token count. What SGLang's "Memory pool end. avail mem" is below
# "Load weight end. avail mem" less the KV pool.
REQ_TABLE_FIRST: Release = (0, 4, 2)
REQ_TABLE_LAST: Release = (0, 5, 8)
REQ_TABLE_PLUS_ONE_LAST: Release = (0, 4, 6)  # size = max_num_reqs + 1 to 0.4.6.post5; max_num_reqs from 0.4.7
REQ_TABLE_SOURCE = (
    "sglang 0.4.2.post4, 0.4.3, 0.4.5, 0.4.6, 0.4.6.post1, 0.4.6.post5, 0.4.7, 0.4.8, 0.4.9.post2, 0.4.10, 0.5.3, 0.5.6 "
    "wheels (PyPI) sglang/srt/model_executor/model_runner.py ModelRunner.init_memory_pool, 0.5.7 / 0.5.8 wheels "
    "model_runner_kv_cache_mixin.py init_memory_pool (max_num_reqs = max_running_requests, else min(max(int("
    "max_total_num_tokens / context_len * 512), 2048), 4096); ReqToTokenPool(size=max_num_reqs + 1 to 0.4.6.post5, "
    "max_num_reqs from 0.4.7, max_context_len=context_len + 4, from 0.5.3 at the latest + speculative_num_draft_tokens), "
    "mem_cache/memory_pool.py ReqToTokenPool.__init__: torch.zeros((size, max_context_len), dtype=torch.int32)), "
    "allocated after profile_max_num_token"
)


def sglang_request_table(
    *, release: Release | None, max_running_requests: int | None, profiled_tokens: int, context_len: int
) -> tuple[int, str] | None:
    """(bytes a GPU, how) of SGLang's request table (REQ_TABLE_SOURCE) in the releases read, 0.4.2-0.5.8; None
    elsewhere (not read: 0.5.11's configurator and later) or without a context length."""
    if release is None or not REQ_TABLE_FIRST <= release <= REQ_TABLE_LAST or context_len <= 0:
        return None
    if max_running_requests is not None:
        reqs, how = max_running_requests, f"--max-running-requests {max_running_requests:,}"
    else:
        reqs = min(max(int(profiled_tokens / context_len * 512), 2048), 4096)
        how = f"min(max(int({profiled_tokens:,} profiled tokens / context {context_len:,} x 512), 2048), 4096)"
    rows = reqs + 1 if release <= REQ_TABLE_PLUS_ONE_LAST else reqs
    nbytes = rows * (context_len + 4) * 4
    return nbytes, (
        f"SGLang's request table {rows:,} x ({context_len:,} + 4) int32 = {nbytes:,} B ({how}"
        + (" + 1" if rows != reqs else "")
        + f"), allocated with the KV pool out of the 1 - mem_fraction_static share ({REQ_TABLE_SOURCE})"
    )


# SGLang sizes the pool from the memory free before it loads the model, not the device's total: rest_memory =
# available after loading - pre_model_load_memory x (1 - mem_fraction_static), pre_model_load_memory the free memory
# after the parallel groups are up (the minimum over ranks), so the CUDA context and NCCL's communicators are out of
# it (sglang 0.5.23 wheel (PyPI), sglang/srt/distributed/bootstrap.py measure_pre_model_load_memory,
# sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes; 0.4.x: ModelRunner.init_torch_distributed's
# get_available_gpu_memory). A log gives it as the load line's avail mem + mem usage (SGLang's GB is GiB: /(1 << 30)):
# hardware -> (bytes, source), transferred to other splits of the same GPU (the communicators' buffers grow with the
# ranks a group spans, so the figure is the logged split's). Elsewhere the device's usable HBM stands, said unpriced.
FREE_BEFORE_LOAD: dict[str, tuple[int, str]] = {
    "nvidia-h200": (
        round((12.25 + 125.65) * GiB),
        "SGLang's free memory before loading on an H200 at TP 8, 137.90 GiB: 'Load weight end. quant=fp8, fmt=e4m3, "
        "avail mem=12.25 GB, mem usage=125.65 GB' (SemiAnalysisAI/InferenceX#2128, DeepSeek-V4-Pro: "
        "tests/engines/cases/sglang-inferencex-2128-dsv4-pro-h200-tp8.yaml)",
    ),
    "amd-mi355x": (
        round((209.98 + 73.58) * GiB),
        "SGLang's free memory before loading on an MI355X at TP 8, 283.56 GiB: TP0's 'Load weight end. ... avail "
        "mem=209.98 GB, mem usage=73.58 GB', the lowest rank (TP1's 283.96; the minimum over ranks is taken) "
        "(Kimi-K2.5: tests/engines/cases/sglang-amdissues-kimi-k2.5-mi355x-tp8.yaml)",
    ),
    "nvidia-b200": (
        round((80.84 + 94.50) * GiB),
        "SGLang's free memory before loading on a B200 at TP 4, 175.34 GiB: '[2025-08-13 14:34:24 TP0] Load weight end. "
        "type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=80.84 GB, mem usage=94.50 GB', the figure its 'Load "
        "weight begin. avail mem=175.34 GB' prints (sgl-project/sglang#9162, SGLang main of 2025-08-13, between the 0.5.0rc0 "
        "and 0.5.0rc2 wheels (built 2025-08-08 and 2025-08-14), with a DeepSeek-R1 NVFP4 checkpoint k3plan does not "
        "bundle: the figure is the GPU's before any weight, not the model's)",
    ),
    "nvidia-b300": (
        round((161.06 + 104.24) * GiB),
        "SGLang's free memory before loading on a B300 at TP 8, 265.30 GiB: '[2026-08-13 05:02:26 TP0] Load weight end. "
        "elapsed=230.97 s, type=DeepseekV4ForCausalLM, quant=fp8, fmt=e4m3, avail mem=161.06 GB, mem usage=104.24 GB' "
        "(TP1's 161.03 + 104.27, the same) (SemiAnalysisAI/InferenceX-app@a9df318e agentic-memory-sglang.json, log "
        "439758, SGLang 0.5.17, DeepSeek-V4-Pro: tests/engines/cases/sglang-inferencex-app-dsv4-pro-b300-tp8-mtp.yaml)",
    ),
    "nvidia-h100-sxm": (
        round(77.33 * GiB),
        "SGLang's free memory before loading on an H100 80GB at TP 8, 77.33 GiB: '[2026-08-27 05:00:50 TP1] Load weight "
        "begin. avail mem=77.33 GB', the lowest rank (TP0 77.38, TP7 77.57; 'Init torch distributed ends. ... mem "
        "usage=1.25 GB' on TP0), SGLang of 2026-08 serving DeepSeek-R1-0528 at --tp-size 8 on 'H100 80 GB x 8' "
        "(mystous/vllm_hybrid@f0569117 shadow_assists/features/IDE_023/whitepaper/IDE_023_TSK_043_RAW_DATA.md, section "
        "31, eval/results/20260827_140008_tsk043_main_r1/r1_kt_hybrid/server.log: its experts on the CPU, so the load "
        "line's mem usage is not the model's; the free memory before it is the GPU's)",
    ),
    "amd-mi300x": (
        round((100.32 + 90.07) * GiB),
        "SGLang's free memory before loading on an MI300X at TP 16 over two nodes, 190.39 GiB: 'Load weight end. ... "
        "avail mem=100.32 GB, mem usage=90.07 GB' (sgl-project/sglang#7847, SGLang 0.4.9, DeepSeek-R1: "
        "tests/engines/cases/sglang-7847-r1-mi300x-tp16-dp16-ep.yaml)",
    ),
}


def sglang_kv_pool(
    *,
    mem_fraction_static: float,
    visible_bytes: int,
    visible_source: str,
    weights_bytes: int,
    state_pool_bytes: int,
    state_source: str,
    kv_bytes_per_token: int,
    max_model_len: int,
    max_running_requests: int | None,
    max_total_tokens: int | None = None,
    page_size: int = 1,
    dsv4: SglangDsv4Pool | None = None,
    vision_bytes: int = 0,
    buffers: tuple[int, str] = (0, ""),
    dcp: int = 1,
    state_slot_bytes: int = 0,
    state_slots_ratio: int = 3,
    mamba_cache_size: int | None = None,
    mamba_ratio: float | None = None,
    disable_radix_cache: bool = False,
    attn_dp: int = 1,
    draft: SglangDraft | None = None,
    target_layers: int = 0,
    weights_source: str = WEIGHTS_SOURCE,
    release: Release | None = None,
    multimodal: bool = False,
    symm_mem_bytes: int = 0,
    symm_mem_source: str = "",
    mega_moe: tuple[int, str] | None = None,
    deepep: tuple[int, str] | None = None,
    hardware: str = "",
    build_refusal: tuple[str, str] | None = None,
    draft_in_weights: bool = False,
) -> EngineSizing:
    """SGLang's KV pool a device and its start rule (module docstring). ``max_total_tokens``: --max-total-tokens,
    the most tokens the pool holds ('The maximum number of tokens that can be stored into the KV cache',
    sgl-project/sglang/docs/backend/server_arguments.md); the runner caps max_total_num_tokens to it and sizes the
    pool by the capped count (SGLANG_CAP). ``dsv4``: DeepSeek-V4's sub-pools, one full-token count at
    bytes_per_full_token sizing them all in the engine's pages (engines/sglang/dsv4_pool.py); the compressor states
    are inside that figure, not a state pool. ``dcp``: --dcp-size, the allocator's tokens and page ``dcp`` x a
    rank's (SGLANG_DCP); the state pool is a rank's as without it. ``state_slot_bytes``: a hybrid linear-attention
    model's state a request a device (SGLang's mamba_cache_per_req): the state pool is then sized by SGLang's own
    rule (SGLANG_MAMBA: ``mamba_cache_size``, else ``disable_radix_cache`` with ``max_running_requests``, else
    ``mamba_ratio``), not by ``state_pool_bytes``, and the running requests are capped at its slots //
    ``state_slots_ratio``. ``draft``: speculative decoding's draft (engines/sglang/spec.py): its weights resident at
    the profile, and its KV layers budgeted into a token's bytes over ``target_layers`` (the pool's own layers);
    DeepSeek-V4's ``dsv4`` carries them already (sglang_dsv4_pool's ``speculative``). ``weights_source``: where
    ``weights_bytes`` comes from (fit passes the budget's own weights line). ``release``: the SGLang release the
    command is read as (engines/sglang/releases.py: the state pool's padding slot from 0.5.17, a multimodal model's
    reservation from 0.5.18; None: 0.5.15's code); ``multimodal``: SGLang counts the model multimodal (it builds its
    vision tower). ``symm_mem_bytes``: --enable-symm-mem's pool a GPU (engines/sglang/serve.py symm_mem), allocated
    after the KV pool and the CUDA graphs: the pool is sized as without it, and SGLang fails at start where the
    1 - mem_fraction_static share it comes out of is smaller (SGLANG_SYMM_OOM_AT; the graphs and activations share
    it, so the check is a floor). ``mega_moe``: --moe-a2a-backend megamoe's symmetric buffer a GPU and its source
    (engines/sglang/mega_moe.py sglang_mega_moe), made on the first forward after the pool is sized: out of the same
    share, checked with the symmetric-memory pool. ``deepep``: --moe-a2a-backend deepep's buffer a GPU and its source
    (engines/sglang/deepep.py sglang_deepep_buffer), made at the first dispatch after the pool is sized
    (SGLANG_DEEPEP_OOM_AT): out of the same share, one accounting with MegaMoE's buffer and the symmetric pool.
    ``build_refusal``: the error SGLang raises while it builds the model (engines/sglang/fp8_block.py), met before any
    memory is measured: the verdict when given. ``draft_in_weights``: ``weights_bytes`` holds the draft's weights
    already (fit's budget, whose weights carry ``sglang_loaded_extras``' terms)."""
    unpriced = SGLANG_UNPRICED
    if hardware in FREE_BEFORE_LOAD:  # what SGLang counts from, where a log of this GPU gives it
        visible_bytes, visible_source = FREE_BEFORE_LOAD[hardware]
        unpriced = SGLANG_UNPRICED_AFTER_LOG
    weights_src = weights_source
    if draft is not None and draft.bytes_per_device and not draft_in_weights:
        weights_bytes += draft.bytes_per_device
        weights_src += f", + {draft.bytes_per_device:,} B: the speculative draft, {draft.source}"
    kv_source = ""
    if draft is not None and dsv4 is None and draft.draft_layers:
        scaled = draft_cell_bytes(kv_bytes_per_token, target_layers=target_layers, draft_layers=draft.draft_layers)
        kv_source = (
            f"{scaled:,} B a token: int({kv_bytes_per_token:,} x (1 + {draft.draft_layers} / {target_layers})), the "
            f"draft's {draft.draft_layers} KV layer(s) at the target's max_total_num_tokens ({DRAFT_KV_SOURCE})"
        )
        kv_bytes_per_token = scaled
    if vision_bytes:  # a multimodal model's tower (the ENGINE's loads_vision_tower, engines/sglang/__init__.py)
        weights_bytes += vision_bytes
        weights_src += (
            f", + {vision_bytes:,} B: the vision tower and projector SGLang builds with the model (counted whole on "
            "every device: its split in the engine was not read)"
        )
    if buffers[0]:  # built with the model, inside SGLang's "Load weight end ... mem usage"
        weights_bytes += buffers[0]
        weights_src += f", + {buffers[1]}"
    rest = int(mem_fraction_static * visible_bytes) - weights_bytes
    mm_reserve = MM_RESERVE_MIB * 2**20 if multimodal and follows(release, MM_RESERVE_FROM) else 0
    rest -= mm_reserve
    slots = None
    if state_slot_bytes and dsv4 is None:  # SGLang's own state pool (SGLANG_MAMBA)
        pad = int(follows(release, MAMBA_PAD_FROM))  # the pool's padding slot (MAMBA_PAD_SOURCE)
        if mamba_cache_size is not None:
            slots, how = mamba_cache_size // attn_dp, f"--max-mamba-cache-size {mamba_cache_size:,}"
        elif disable_radix_cache and max_running_requests is not None:
            slots, how = (
                max_running_requests // attn_dp,
                f"--max-running-requests {max_running_requests:,}, no radix cache",
            )
        else:
            r = SGLANG_MAMBA_RATIO if mamba_ratio is None else mamba_ratio
            slots = int((rest * r / (1 + r) - pad * state_slot_bytes) // state_slot_bytes)
            how = f"mamba_full_memory_ratio {r:g}: {r:g} / {1 + r:g} of {rest:,} B"
        state_pool_bytes = (slots + pad) * state_slot_bytes
        state_source = f"{slots:,} slots x {state_slot_bytes:,} B a request ({how}; {SGLANG_MAMBA})" + (
            f", + 1 padding slot ({MAMBA_PAD_SOURCE})" if pad else ""
        )
    pool = rest - state_pool_bytes
    tokens = max(pool, 0) // kv_bytes_per_token if kv_bytes_per_token > 0 else 0
    if dsv4 is not None:
        state_pool_bytes, state_source = (
            (0, "none apart: DeepSeek-V4's compressor states are in bytes_per_full_token")
            if not dsv4.fixed_bytes
            else (dsv4.fixed_bytes, dsv4.fixed_source)
        )
        pool = rest - dsv4.fixed_bytes
        page_size = dsv4.page if page_size == 1 else page_size
        tokens = int(max(pool, 0) / dsv4.bytes_per_full_token)
    profiled = tokens // page_size * page_size  # the full tokens the pool's sizes are computed from, in whole pages
    # the request table, sized from the uncapped count and allocated with the pool (REQ_TABLE_SOURCE); not read for
    # DeepSeek-V4's pools, a state pool's cap or speculative decoding's table
    table = (
        sglang_request_table(
            release=release,
            max_running_requests=max_running_requests,
            profiled_tokens=tokens,
            context_len=max_model_len,
        )
        if dsv4 is None and slots is None and draft is None
        else None
    )
    table_bytes = table[0] if table is not None else 0
    # by how much the pool clears SGLang's checks (the smallest pool that starts holds SGLANG_MIN_POOL_TOKENS tokens)
    margin = int(pool - SGLANG_MIN_POOL_TOKENS * (kv_bytes_per_token if dsv4 is None else dsv4.bytes_per_full_token))
    capped = max_total_tokens is not None and 0 < max_total_tokens < tokens
    if capped:
        assert max_total_tokens is not None
        tokens, pool = (
            max_total_tokens,
            (
                max_total_tokens * kv_bytes_per_token
                if dsv4 is None
                else int(max_total_tokens * dsv4.bytes_per_full_token)
            ),
        )
    tokens = tokens // page_size * page_size  # whole pages (SGLANG_PAGE)
    if dcp > 1 and dsv4 is not None:
        raise ValueError("DeepSeek-V4's sub-pools under DCP are not priced (fit refuses the command first)")
    # the allocator's logical tokens and page under DCP (SGLANG_DCP): the scheduler's max_total_num_tokens
    rank_tokens, tokens, page_size = tokens, tokens * dcp, page_size * dcp
    running = (
        f"{max_running_requests:,}"
        if max_running_requests is not None
        else "its default (min(max_total_num_tokens // 2, the request pool))"
    )
    reqs = None
    if slots is not None:  # resolve_max_num_reqs (SGLANG_MAMBA): the state slots cap the running requests
        estimated = max(min(int(rank_tokens / max_model_len * 512), 4096), 2048) if max_model_len else 2048
        asked = estimated if max_running_requests is None else max_running_requests // attn_dp
        reqs = min(asked, rank_tokens // 2, slots // state_slots_ratio)
        running = f"{reqs:,} (the state pool's {slots:,} slots // {state_slots_ratio} a request: {SGLANG_REQS_AT})"
    conc = tokens / max_model_len if max_model_len else 0.0
    # the engine's start failures in the order it meets them; the first that holds is the verdict: a layer refused
    # while the model is built (``build_refusal``: engines/sglang/fp8_block.py) before any memory is measured
    failures: list[tuple[bool, str, str]] = [
        (build_refusal is not None, *(build_refusal or ("", ""))),
        (
            weights_bytes > visible_bytes,
            f"torch.OutOfMemoryError: CUDA out of memory while loading the weights: {weights_bytes / GiB:.2f} GiB a "
            f"device of the {visible_bytes / GiB:.2f} GiB the engine sees",
            "the model's weight loading (ModelRunner.load_model), before any pool is sized",
        ),
        (
            slots is not None and slots <= 0,
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            f"max_mamba_cache_size={slots}",
            SGLANG_MAMBA_AT,
        ),
        (
            tokens <= 0,
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
            f"mem_fraction_static={mem_fraction_static} (weights {weights_bytes / GiB:.2f} GiB and the state pool "
            f"{state_pool_bytes / GiB:.2f} GiB of the {mem_fraction_static * visible_bytes / GiB:.2f} GiB it allows)",
            SGLANG_NO_POOL_AT,
        ),
        (
            table_bytes > visible_bytes - int(mem_fraction_static * visible_bytes),
            "torch.OutOfMemoryError: CUDA out of memory allocating the request table (ReqToTokenPool): "
            f"{table_bytes / GiB:.2f} GiB a device of the 1 - mem_fraction_static ({mem_fraction_static}) share",
            REQ_TABLE_SOURCE,
        ),
        (
            tokens < SGLANG_MIN_POOL_TOKENS,
            f"AssertionError: Memory pool size is too small (max_total_num_tokens={tokens})",
            SGLANG_TOO_SMALL_AT,
        ),
        (
            reqs is not None and reqs <= 0,
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={slots}, mamba_ratio={state_slots_ratio}, resulting max_num_reqs={reqs}",
            SGLANG_REQS_AT,
        ),
    ]
    # --enable-symm-mem's pool, preallocated once the KV pool is sized and the graphs captured: out of what the
    # static fraction leaves (SGLang measures that share from the free memory before loading, <= visible_bytes)
    slack = visible_bytes - int(mem_fraction_static * visible_bytes)
    mega_bytes, mega_source = mega_moe if mega_moe is not None else (0, "")
    deepep_bytes, deepep_source = deepep if deepep is not None else (0, "")
    # the all-to-all buffer made at the first forward (MegaMoE's, DeepEP's: one backend a command), then the symmetric
    # pool after the graphs: one accounting of what SGLang allocates after its pool, out of the same share
    a2a_bytes = mega_bytes + deepep_bytes
    failures.append(
        (
            table_bytes + mega_bytes > slack,
            f"torch.OutOfMemoryError: CUDA out of memory allocating the MegaMoE symmetric buffer: "
            f"{mega_bytes / GiB:.2f} GiB a device of the {slack / GiB:.2f} GiB 1 - mem_fraction_static "
            f"({mem_fraction_static}) leaves beside the KV pool",
            "the first forward after the KV pool (engines/sglang/mega_moe.py MEGA_MOE_SOURCE)",
        )
    )
    failures.append(
        (
            table_bytes + a2a_bytes > slack,
            f"RuntimeError: CUDA out of memory allocating DeepEP's buffer (cudaMalloc / NVSHMEM): "
            f"{deepep_bytes / GiB:.2f} GiB a device of the {slack / GiB:.2f} GiB 1 - mem_fraction_static "
            f"({mem_fraction_static}) leaves beside the KV pool",
            SGLANG_DEEPEP_OOM_AT,
        )
    )
    failures.append(
        (
            table_bytes + a2a_bytes + symm_mem_bytes > slack,
            f"torch.OutOfMemoryError: CUDA out of memory pre-allocating the symmetric memory pool: "
            f"{symm_mem_bytes / GiB:.2f} GiB a device of the {slack / GiB:.2f} GiB 1 - mem_fraction_static "
            f"({mem_fraction_static}) leaves beside the KV pool"
            + (f" and the {mega_bytes / GiB:.2f} GiB MegaMoE buffer" if mega_bytes else "")
            + (f" and the {deepep_bytes / GiB:.2f} GiB DeepEP buffer" if deepep_bytes else ""),
            SGLANG_SYMM_OOM_AT,
        )
    )
    post_pool = symm_mem_bytes + a2a_bytes
    after_pool = slack - post_pool - table_bytes  # what the share leaves for the graphs and the warm-up
    if dsv4 is not None and dsv4.window and dsv4.swa_ratio > 0 and follows(release, SWA_FLOOR_FROM):
        # DeepSeek-V4's sliding-window pool in ratio mode, checked as its sizes are computed (SWA_FLOOR_SOURCE): before
        # MemoryPoolConfig's check of the full tokens
        swa = int(profiled * dsv4.swa_ratio) // page_size * page_size
        floor = (
            dsv4.window + page_size >= swa,
            f"ValueError: SWA pool ({swa} tokens) cannot hold even one request: the prefill admission floor is "
            f"sliding_window_size ({dsv4.window}) + page_size ({page_size}). Increase --swa-full-tokens-ratio or the "
            "total KV budget.",
            SWA_FLOOR_SOURCE,
        )
        failures.insert(1, floor)
    failed = next(((m, at) for holds, m, at in failures if holds), None)
    starts = failed is None
    if failed is not None:
        message, raised_at = failed
    else:
        raised_at = ""
        message = f"max_total_num_tokens={tokens:,}, max_running_requests={running}, context_len={max_model_len:,}" + (
            f"; a request is capped at {tokens - 1:,} tokens (max_req_len = min(context_len - 1, "
            "max_total_num_tokens - 1)): SGLang starts and truncates, it does not refuse"
            if tokens < max_model_len
            else ""
        )
    pool_src = (
        f"int({mem_fraction_static} x {visible_bytes:,} B visible ({visible_source})) - weights {weights_bytes:,} B - "
        + (f"the multimodal reservation {mm_reserve:,} B ({MM_RESERVE_SOURCE}) - " if mm_reserve else "")
        + f"state pool {state_pool_bytes:,} B ({state_source}): {SGLANG_POOL}"
    )
    if capped:
        pool_src = (
            f"--max-total-tokens {rank_tokens:,} x {kv_bytes_per_token:,} B a token, under {pool_src} ({SGLANG_CAP})"
        )
    return EngineSizing(
        engine="sglang",
        weights_bytes=Figure(weights_bytes, weights_src),
        kv_pool_bytes=Figure(max(pool, 0), pool_src),
        kv_pool_tokens=Figure(
            tokens,
            (
                f"KV pool // {kv_bytes_per_token:,} B a token, in whole pages of {page_size // dcp}: max_total_num_tokens"
                + (f" ({kv_source})" if kv_source else "")
                if dsv4 is None
                else f"int(KV pool / {dsv4.source}), in whole pages of {page_size}"
            )
            + (f"; {rank_tokens:,} a rank x DCP {dcp} ({SGLANG_DCP})" if dcp > 1 else ""),
        ),
        block_tokens=Figure(
            page_size,
            (
                f"--page-size {page_size // dcp} ({SGLANG_PAGE})"
                if page_size != dcp
                else "SGLang's default page_size 1 (token-granular pages)"
            )
            + (f" x DCP {dcp}: the allocator's page ({SGLANG_DCP})" if dcp > 1 else ""),
        ),
        num_blocks=Figure(tokens // page_size, f"pages of {page_size} token(s)"),
        max_concurrency=Figure(
            round(conc, 2),
            f"max_total_num_tokens / context_len {max_model_len:,} (sequences the pool holds at full length; the "
            f"scheduler admits up to max_running_requests {running}: {SGLANG_RUNNING})",
        ),
        activation_bytes=Figure(0, "activations and CUDA graphs run in the 1 - mem_fraction_static share"),
        # --enable-symm-mem's pool: NCCL's symmetric memory, outside torch's allocator (engines/sglang/serve.py)
        non_torch_bytes=(
            Figure(
                post_pool,
                "; ".join(x for x in (symm_mem_source if symm_mem_bytes else "", mega_source, deepep_source) if x)
                + f", in the 1 - mem_fraction_static share ({slack:,} B) beside the activations and CUDA graphs (not "
                "priced): the pool is sized before "
                + ("them" if sum(1 for x in (symm_mem_bytes, mega_bytes, deepep_bytes) if x) > 1 else "it"),
            )
            if post_pool
            else Figure(0, "not found: no cited non-torch figure for this GPU; 0 assumed")
        ),
        starts=starts,
        message=message,
        raised_at=raised_at,
        layout="full-token" if dsv4 is not None else "",
        # a verdict never rests silently on a lower bound: what SGLang runs after its pool and k3plan does not size
        unpriced=unpriced
        + (SGLANG_SYMM_UNPRICED if symm_mem_bytes else "")
        + f"; nor {SGLANG_AFTER_POOL} in the {max(after_pool, 0) / GiB:.2f} GiB the 1 - "
        f"mem_fraction_static ({mem_fraction_static}) share leaves beside the pool",
        check_margin_bytes=(max(min(margin, after_pool) if post_pool + table_bytes else margin, 0) if starts else 0),
        free_after_pool_bytes=(
            Figure(
                visible_bytes - weights_bytes - state_pool_bytes - rank_tokens * kv_bytes_per_token - table[0],
                f"{visible_bytes:,} B visible ({visible_source}) - weights {weights_bytes:,} B - state pool "
                f"{state_pool_bytes:,} B - KV pool {rank_tokens:,} x {kv_bytes_per_token:,} B - {table[1]}: SGLang's "
                "'Memory pool end. avail mem' (the allocator's index arrays, tokens x 8 B at most, not priced)",
            )
            if table is not None and starts
            else None
        ),
    )


def sglang_dsv4_swa_tokens(setup, weights_bytes: int) -> tuple[int, str] | None:
    """SGLang's sliding-window pool a worker for DeepSeek-V4 (not V4.1's cap mode) at ``setup``'s stack defaults:
    --swa-full-tokens-ratio x the full tokens of its start check (memory.sglang_kv_pool: its static memory after
    ``weights_bytes``, the c128 states taken first; the setup's weights hold the model's RoPE tables already,
    Stack.extra_weights from Stack.engine_held or a serve command's reading), in whole pages (DSV4PoolConfigurator._compute_dsv4_sizes), in
    the pool form of the release the setup runs (a serve command's, Stack.engine_release; else the newest read,
    engines/sglang/releases.py NEWEST_RELEASE); with the source. None for another model."""
    from k3plan.engines.sglang.dsv4_pool import DSV4_RUNNING, form_for_release, sglang_dsv4_pool
    from k3plan.engines.sglang.releases import NEWEST_RELEASE

    d = setup.model.spec.dsv4
    if d is None or d.csa2 is not None:
        return None
    frac = round(1 - setup.stack.reserve.fraction_of_usable_hbm, 12)
    running = DSV4_RUNNING // max(setup.parallel.dp, 1)
    release = setup.stack.engine_release if setup.stack.engine_release is not None else NEWEST_RELEASE
    pool = sglang_dsv4_pool(d, max_running_requests=running, form=form_for_release(release))
    sized = sglang_kv_pool(
        mem_fraction_static=frac,
        visible_bytes=setup.hardware.usable_bytes_per_device,
        visible_source=setup.hardware.name,
        hardware=setup.hardware.name,
        weights_bytes=weights_bytes,
        state_pool_bytes=0,
        state_source="",
        kv_bytes_per_token=0,
        max_model_len=setup.model.spec.max_context or 0,
        max_running_requests=running,
        dsv4=pool,
    )
    full = int(sized.kv_pool_tokens.value)
    swa = int(full * pool.swa_ratio) // pool.page * pool.page
    return swa, (
        f"{swa:,} tokens: {pool.swa_ratio:g} x the {full:,} full tokens of SGLang's start check "
        f"(mem_fraction_static {frac:g}), in pages of {pool.page} ({pool.source})"
    )


def sglang_loaded_extras(
    model,
    *,
    draft: SglangDraft | None,
    release: Release | None,
    hardware: str,
    vendor: str,
    attn_tp: int,
    kv_raw: str | None,
) -> tuple[tuple[str, int, str], ...]:
    """(role, bytes a GPU, source) of what SGLang holds with the weights, beside the model's own tensors, once the
    model is loaded (inside its "Load weight end ... mem usage", so in the weights its start check subtracts): the
    speculative draft's weights (engines/sglang/spec.py draft_pricing), DeepSeek-V4's RoPE tables, the draft's own
    among them (dsv4_buffers.py sglang_dsv4_model_buffers), and V4.1's wo_a dequantized to bf16 over the attention TP
    group ``attn_tp`` (dsv4_buffers.py sglang_wo_a_bf16). One computation for the start check and k3plan's budget:
    a serve command's stack carries them into the budget's weights (Stack.extra_weights), and the check reads those
    weights. ``model``: the model the command serves; ``kv_raw``: its --kv-cache-dtype as given (None: auto)."""
    from k3plan.engines.sglang.dsv4_buffers import sglang_dsv4_model_buffers, sglang_wo_a_bf16
    from k3plan.engines.sglang.dsv4_pool import dsv41_mega

    out: list[tuple[str, int, str]] = []
    if draft is not None and draft.bytes_per_device:
        out.append(("draft_weights", draft.bytes_per_device, f"the speculative draft, {draft.source}"))
    d4 = model.spec.dsv4
    if d4 is None:
        return tuple(out)
    target, own, how = sglang_dsv4_model_buffers(
        d4,
        release=release,
        vendor=vendor,
        mega=dsv41_mega(d4, hardware=hardware, attn_tp=attn_tp, kv_raw=kv_raw),
        draft=draft.algorithm if draft is not None else None,
    )
    if target + own:
        out.append(("rope_tables", target + own, how))
    wo_a, wo_a_how = sglang_wo_a_bf16(model.inventory.text, attn_tp=attn_tp)
    if wo_a:
        out.append(("wo_a_bf16", wo_a, wo_a_how))
    return tuple(out)


def plain_loaded_extras(
    model, *, release: Release | None, hardware: str, vendor: str, attn_tp: int, kv_dtype: str
) -> tuple[tuple[str, int, str], ...]:
    """``sglang_loaded_extras`` for a question without a serve command (Engine.loaded_extras, read through
    Stack.engine_held by fit's setup and plan's weight columns): no draft, the release the stack runs (None: the
    newest read, NEWEST_RELEASE, as a serve command that names none is read), and ``kv_dtype`` (k3plan's) as the launch
    line writes it for the model (releases.py sglang_kv_flag), so fit without --serve holds what fit --serve of the
    same command holds, to the byte."""
    from k3plan.engines.sglang.releases import NEWEST_RELEASE, sglang_kv_flag

    return sglang_loaded_extras(
        model,
        draft=None,
        release=release if release is not None else NEWEST_RELEASE,
        hardware=hardware,
        vendor=vendor,
        attn_tp=attn_tp,
        kv_raw=sglang_kv_flag(kv_dtype, model.spec.architecture),
    )
