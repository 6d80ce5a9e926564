"""The SGLang releases k3plan's pool rules follow (fit --engine-version; k3plan.engines.release), each rule with the
first release whose code has it, read in the sglang wheels (PyPI) 0.5.15-0.5.23; the default fraction and chunk of
0.4.2-0.5.2 in engines/sglang/fraction_eras.py. A GPU question that names no release
is read as NEWEST_RELEASE, 0.5.23 (fit with or without --serve, plan); one read as no release (None) is priced by the
code each rule cites, 0.5.15's."""

from __future__ import annotations

from k3plan.engines.release import Release
from k3plan.engines.sglang.dsv4_pool import BY_RELEASE as DSV4_BY_RELEASE
from k3plan.engines.sglang.dsv4_pool import BY_RELEASE_MODELS as DSV4_MODELS
from k3plan.engines.sglang.flags import KV

# the newest SGLang release k3plan prices, 0.5.23 (the sglang wheel on PyPI, built 2026-10-30): a GPU question without
# fit --engine-version is read as it (Engine.newest_release_read), as vLLM's is read as engines/vllm/releases.py
# NEWEST_RELEASE. The rules that changed between releases were read in the 0.5.12-0.5.23 wheels, each naming its first
# release below; the option names by release in engines/sglang/server_flags.py. A planner is asked about the engine
# people install today; a log or a command of an older release is read with its own --engine-version
# (tests/engines/cases, tests/engines/public_commands.yaml: each names the release it ran or precedes). What 0.5.23
# changed that k3plan does not price is listed below (NOT_PRICED); the budget's DeepSeek-V4.1 charge prices the V4
# layout's pages where 0.5.23's flashmla_mega (attention TP 1 on SM100) stores the V4.1 layouts, which --serve's start
# check prices (engines/sglang/dsv4_pool.py dsv4_request_charge)
NEWEST_RELEASE: Release = (0, 5, 23)

# The state (mamba) pool's padding slot: from 0.5.17 the pool allocates max_mamba_cache_size + 1 slots and the
# memory-ratio path solves for them ((K + 1) x per_req = the budget: K = (budget - per_req) // per_req); 0.5.15 and
# 0.5.16 charge K slots and solve K = budget // per_req
MAMBA_PAD_FROM: Release = (0, 5, 17)
MAMBA_PAD_SOURCE = (
    "sglang 0.5.17 wheel (PyPI), sglang/srt/mem_cache/kv_cache_configurator.py KVCacheConfigurator."
    "_handle_max_mamba_cache: '+1: the pool's padding slot is allocated alongside the request slots' (mamba_state_"
    "memory = (max_mamba_cache_size + 1) x per_req; the ratio path max_mamba_cache_size = int((mamba_budget_bytes - "
    "per_slot) // per_slot)); the same in the 0.5.23 wheel; the 0.5.16 wheel charges max_mamba_cache_size x per_req"
)

# A multimodal model's runtime reservation: from 0.5.18 the KV budget leaves out what its embedding cache takes after
# the pool is sized, SGLANG_VLM_CACHE_SIZE_MB (100 MiB by default; + SGLANG_MM_FEATURE_CACHE_MB for the cuda_ipc /
# cuda_vmm feature transports, which SGLang picks only where asked or on multi-node GB200 / GB300 with IMEX)
MM_RESERVE_FROM: Release = (0, 5, 18)
MM_RESERVE_MIB = 100  # environ.py SGLANG_VLM_CACHE_SIZE_MB's default
MM_RESERVE_SOURCE = (
    "sglang 0.5.18 wheel (PyPI), sglang/srt/mem_cache/kv_cache_configurator.py mm_runtime_reservation_gb (is_multimodal: "
    "SGLANG_VLM_CACHE_SIZE_MB, environ.py default 100; the cpu feature transport adds nothing: arg_groups/"
    "serving_hook.py handle_multimodal_feature_transport resolves unset to cpu on one node) and "
    "_profile_available_bytes (rest_memory = available - slack - mm_reservation_gb); the same in the 0.5.23 wheel"
)


# The decode CUDA graphs' max batch the derived mem_fraction_static reserves for (2 MiB a batch, more under DP
# attention): from 0.5.22 a default max_bs (no --cuda-graph-max-bs[-decode], no --cuda-graph-bs[-decode] list) is
# capped at --max-running-requests before the fraction is derived; earlier releases keep the GPU class's
GRAPH_CAP_FROM: Release = (0, 5, 22)
GRAPH_CAP_SOURCE = (
    "sglang 0.5.22 wheel (PyPI), sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings (decode_max_bs_is_"
    "default and max_running_requests set: decode max_bs = min(max_bs, max_running_requests), before "
    "reserve_for_graph_mb); the same in the 0.5.23 wheel, not in 0.5.21's"
)

# --kv-cache-dtype auto resolved from the checkpoint's quantization config: where the model's quant_config carries
# kv_cache_quant_algo 'FP8' (ModelOptFp4Config keeps the checkpoint's, the NVFP4 checkpoints' config) the runner takes
# float8_e4m3fn, else the model's dtype. First in the 0.5.3 wheel; the 0.5.1 and 0.5.2 wheels' init_memory_pool keeps
# self.dtype for auto (their ModelOptFp4Config already holds the field, unread); 0.5.0 was not read (no final 0.5.0 on
# PyPI), 0.4.10's model_runner.py has no kv_cache_quant_algo
# SGLang's DeepseekV4ForCausalLM (k3plan's deepseek_v4, and deepseek_v41, whose config SGLang maps to that class:
# configs/deepseek_v41.py) on a GPU: --kv-cache-dtype auto -> fp8_e4m3, the only dtype 0.5.12-0.5.13 accept;
# bfloat16 accepted when given from 0.5.14 (bfloat16 forced on NPU only)
DSV4_KV_ARCHITECTURES = frozenset({"deepseek_v4", "deepseek_v41"})
DSV4_BF16_FROM: Release = (0, 5, 14)
DSV4_KV_AT = (
    "sglang 0.5.12-0.5.13 wheels (PyPI), sglang/srt/arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults "
    "(kv_cache_dtype auto -> 'fp8_e4m3', 'Setting KV cache dtype to fp8_e4m3 for DeepseekV4ForCausalLM'; assert "
    "kv_cache_dtype in ['fp8_e4m3']), 0.5.14 the same hook with ['fp8_e4m3', 'bfloat16'], 0.5.15-0.5.23 "
    "sglang/srt/arg_groups/overrides.py _deepseek_v4_kv_cache_dtype (auto -> fp8_e4m3; bfloat16 on NPU; assert "
    "fp8_e4m3 or bfloat16)"
)
# the assert compares the string as given: no hook before it rewrites --kv-cache-dtype bf16 (a kv_cache_dtype choice,
# which DeepSeek V3.2's DSA hook alone turns into bfloat16: 0.5.12-0.5.14 server_args.py ServerArgs.
# _set_default_dsa_kv_cache_dtype, 0.5.15-0.5.23 arg_groups/overrides.py _dsa_kv_cache_dtype_default), so 'bf16' is
# refused ('bf16 is not supported for DeepseekV4ForCausalLM') and a bf16 cache is written bfloat16
DSV4_KV_FLAGS = {"fp8": "fp8_e4m3", "bf16": "bfloat16"}  # k3plan's KV dtype -> what DeepseekV4ForCausalLM takes


def dsv4_kv_taken(release: Release | None) -> tuple[str, ...]:
    """The --kv-cache-dtype values SGLang's DeepseekV4ForCausalLM starts with on a GPU at ``release`` (None: the
    newest read): auto (set to fp8_e4m3), fp8_e4m3, and bfloat16 from DSV4_BF16_FROM (DSV4_KV_AT)."""
    bf16 = release is None or release >= DSV4_BF16_FROM
    return ("auto", "fp8_e4m3", "bfloat16") if bf16 else ("auto", "fp8_e4m3")


def sglang_kv_flag(kv_dtype: str, architecture: str) -> str | None:
    """SGLang's --kv-cache-dtype for k3plan's KV dtype ``kv_dtype`` on a model of ``architecture``
    (ModelSpec.architecture): DeepseekV4ForCausalLM's spelling (DSV4_KV_FLAGS) for DeepSeek-V4 / V4.1, else the
    kv_cache_dtype choice (flags.py KV); None where SGLang has none."""
    return DSV4_KV_FLAGS.get(kv_dtype) if architecture in DSV4_KV_ARCHITECTURES else KV.get(kv_dtype)


CHECKPOINT_KV_FROM: Release = (0, 5, 3)
CHECKPOINT_KV_AT = (
    "sglang 0.5.3-0.5.6 wheels (PyPI), sglang/srt/model_executor/model_runner.py ModelRunner.init_memory_pool, 0.5.7-"
    "0.5.15 ModelRunner.configure_kv_cache_dtype, 0.5.16-0.5.23 sglang/srt/mem_cache/kv_cache_dtype.py "
    "configure_kv_cache_dtype (kv_cache_dtype auto -> float8_e4m3fn where getattr(self.model.quant_config, "
    "'kv_cache_quant_algo') is 'FP8'); the 0.5.1 and 0.5.2 wheels' init_memory_pool keeps self.dtype"
)

# DeepEP's all-to-all buffers in the derived mem_fraction_static (2 GiB on top of the floor where the decode graphs
# are captured and --moe-a2a-backend is deepep): from 0.5.15; 0.5.3-0.5.14 reserve nothing for them (0.5.14's
# _handle_gpu_memory_settings ends at the floor: read in that wheel, where k3plan had put the term's first release)
DEEPEP_RESERVE_FROM: Release = (0, 5, 15)
DEEPEP_RESERVE_SOURCE = (
    "sglang 0.5.15 wheel (PyPI), sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings ('DeepEP "
    "all-to-all buffers captured in the decode graph are real extra allocations': reserved_mem += 2 * 1024 after the "
    "10 GiB floor), 0.5.16-0.5.18 ServerArgs.reserve_for_deepep_a2a_mb, 0.5.19-0.5.23 arg_groups/memory_hook.py; none "
    "in the 0.5.3-0.5.14 wheels' _handle_gpu_memory_settings"
)

# DeepSeek-V4's sliding-window pool must hold one request's admission floor: from 0.5.20 SGLang refuses at start a
# ratio-mode pool of at most window + page tokens (swa_tokens = int(full x ratio) in whole pages)
SWA_FLOOR_FROM: Release = (0, 5, 20)
SWA_FLOOR_SOURCE = (
    "sglang 0.5.20 wheel (PyPI), sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator."
    "validate_swa_pool_size, called from _compute_dsv4_sizes (ValueError when sliding_window_size + page_size >= "
    "swa_tokens); the same in the 0.5.23 wheel"
)

# DeepSeek-V3's shared expert fused into the routed MoE as tp_size clones (n_share_experts_fusion = tp_size): each clone
# is one more routed expert, TP-split (or whole on an EP rank), so every GPU holds one whole shared expert a MoE layer,
# not 1/tp of it. 0.4.6-0.4.6.post5 do so by default on a CUDA GPU of SM 90 and up (every NVIDIA GPU k3plan has) for
# DeepseekV3ForCausalLM with 256 routed experts, without --enable-deepep-moe; from 0.4.7 one copy is fused
# (num_fused_shared_experts = n_shared_experts, 1: TP-split as k3plan holds it). The 0.4.5 wheel fuses none by default
# (its model fuses tp_size only where n_share_experts_fusion is None, and ServerArgs defaults it to 0); 0.4.5.post3
# fuses as 0.4.6 does, but k3plan reads a post-release as its release (fraction_eras.py)
SHARED_CLONES_FROM: Release = (0, 4, 6)
SHARED_ONE_FROM: Release = (0, 4, 7)
SHARED_CLONES_SOURCE = (
    "sglang 0.4.6, 0.4.6.post1-0.4.6.post5 wheels (PyPI), sglang/srt/models/deepseek_v2.py DeepseekV2ForCausalLM."
    "determine_n_share_experts_fusion (n_share_experts_fusion 0, ServerArgs' default: tp_size where "
    "torch.cuda.get_device_capability() >= (9, 0), architectures[0] == 'DeepseekV3ForCausalLM', n_routed_experts == "
    "256 and not enable_deepep_moe; 0.4.6.post4-0.4.6.post5 also _is_cuda), DeepseekV2MoE.__init__ (FusedMoE "
    "num_experts = n_routed_experts + n_share_experts_fusion; no DeepseekV2MLP shared_experts then), load_weights "
    "('Cloning {n_share_experts_fusion} replicas of the shared expert into MoE'); the 0.4.7 wheel's "
    "determine_num_fused_shared_experts sets num_fused_shared_experts = n_shared_experts (1) and asserts 1"
)

# --enable-symm-mem's symmetric-memory pool: from 0.5.11 ServerArgs sets SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to 4 where
# the flag is on and the variable unset, after mem_fraction_static is derived (nothing of the fraction is reserved
# for it), and each GPU's target worker (not a draft worker) allocates that many GiB through the NCCL allocator
# (ncclMemAlloc into a torch MemPool, registered as an NCCL window) once the KV pool is sized and the CUDA graphs are
# captured: the pool does not move, the pool's bytes come out of the 1 - mem_fraction_static share. The 0.5.7 wheel
# has the flag without the preallocation; 0.5.8-0.5.10 were not read
SYMM_PREALLOC_FROM: Release = (0, 5, 11)
SYMM_PREALLOC_GIB = 4  # the default SGLang sets (SYMM_PREALLOC_SOURCE)
SYMM_PREALLOC_ENV = "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE"  # environ.py EnvInt(-1): <= 0 allocates nothing
SYMM_PREALLOC_SOURCE = (
    "sglang 0.5.11-0.5.18 wheels (PyPI), sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings "
    "(SGLANG_SYMM_MEM_PREALLOC_GB_SIZE.set(4) after mem_fraction_static), 0.5.19-0.5.23 sglang/srt/arg_groups/"
    "memory_hook.py handle_gpu_memory_settings (the same); 0.5.11-0.5.15 sglang/srt/model_executor/model_runner.py "
    "ModelRunner.prealloc_symmetric_memory_pool, the last step of ModelRunner.initialize after init_memory_pool and "
    "the CUDA graphs, 0.5.16-0.5.23 sglang/srt/distributed/device_communicators/pynccl_allocator.py "
    "prealloc_symmetric_memory_pool from model_runner_components/cuda_graph_setup.py capture_cuda_graphs (0.5.21-0.5.23: "
    "finalize_cuda_graph_capture), which managers/scheduler.py runs after alloc_memory_pool (torch.empty(GB x 1024**3 "
    "uint8) under use_symmetric_memory(get_tp_group()); skipped on a draft worker)"
)

# what of SGLang's pricing follows fit --engine-version beside DeepSeek-V4's pool form (Engine.by_release of the sglang
# and dp-attention stacks, engines/sglang/dsv4_pool.py BY_RELEASE), each with the models it concerns (by prefix)
BY_RELEASE = DSV4_BY_RELEASE
BY_RELEASE_MODELS = DSV4_MODELS
BY_RELEASE_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("kimi-k3", "kimi-linear"),
        "the state (mamba) pool holds a padding slot from 0.5.17 (engines/sglang/releases.py MAMBA_PAD_FROM)",
    ),
    (
        ("deepseek-v3", "deepseek-r1"),
        "DeepSeek-V3's shared expert is held whole on every GPU in 0.4.6, fused into the routed MoE as tp_size clones on "
        "NVIDIA without DP attention (SHARED_CLONES_FROM), TP-split from 0.4.7 (SHARED_ONE_FROM), and from 0.5.6 one "
        "fused copy on every EP rank of an AMD GPU under expert parallelism (engines/sglang/serve.py SHARED_EP_FROM); "
        "the FP8 routed experts are held twice under --enable-ep-moe with SGLANG_USE_AITER on an AMD GPU in "
        "0.4.8.post1-0.4.9.post4 (engines/sglang/ep_moe_copy.py)",
    ),
    (
        ("kimi-k2.6",),
        "a multimodal model's KV budget leaves out its 100 MiB embedding cache from 0.5.18 (MM_RESERVE_FROM)",
    ),
    (
        ("deepseek-v4",),
        "DeepSeek-V4's sliding-window pool is refused below one request's floor from 0.5.20 (SWA_FLOOR_FROM); "
        "its shared expert split over --tp-size into partial 128 x 128 fp8 blocks is refused in 0.5.12-0.5.22 "
        "(engines/sglang/fp8_block.py CHECKED); "
        "DeepSeek-V4.1 is served from 0.5.21 (engines/sglang/serve.py V41_FROM), its vision tower built and counted "
        "whole, under --language-model-only too in 0.5.21 (V41_VISION_LM_ONLY_FROM), its pool paged from 0.5.21 "
        "with the ratio-2 pending-pair state, in the V4.1 layouts under 0.5.23's flashmla_mega "
        "(engines/sglang/dsv4_pool.py V41_FORM_RELEASES)",
    ),
    (
        (),
        "the default mem_fraction_static and chunked_prefill_size before 0.5.3 are the release's own (a table by "
        "parallel size to 0.4.7, a flat reserve by GPU class from 0.4.8: engines/sglang/fraction_eras.py); the derived "
        "mem_fraction_static reserves DeepEP's buffers from 0.5.15 (DEEPEP_RESERVE_FROM) and for a default decode graph batch capped at --max-running-requests "
        "from 0.5.22 (GRAPH_CAP_FROM), and for the prefill CUDA graph where the release captures one for the model "
        "(from 0.5.10 on NVIDIA GPUs: 1.5 GiB for an MLA model, engines/sglang/prefill_graph.py); k3plan's other SGLang rules are the code each cites, and what changed in "
        "0.4.x-0.5.23 without being priced is listed in engines/sglang/releases.py (NOT_PRICED)",
    ),
)


# what changed in the releases read that k3plan does not price yet, each with the release it changed in
NOT_PRICED = (
    "0.4.x-0.5.12: the weights' layouts of those releases: under DP attention the embedding whole on every GPU (the "
    "0.4.3-0.4.8, 0.4.10 and 0.5.6 wheels, models/deepseek_v2.py VocabParallelEmbedding enable_tp=not "
    "enable_dp_attention; 0.4.9 and 0.5.11-0.5.23 split it over the attention-TP group, the same bytes at attention "
    "TP 1) and 0.4.3's LM head a bf16 ReplicatedLinear; 0.4.6.post2's absorbed w_kc / w_vc in FP8 with block scales on "
    "SM 90 (DeepseekV2ForCausalLM.post_load_weights use_deep_gemm_bmm under _ENABLE_JIT_DEEPGEMM; 0.4.6.post3 "
    "dequantizes unless SGL_USE_DEEPGEMM_BMM), priced in bf16: priced as the newest release holds them, but for the "
    "EP MoE's second copy of the FP8 experts under aiter in 0.4.8.post1-0.4.9.post4 (engines/sglang/ep_moe_copy.py) "
    "and the dense MLP / shared experts over the whole TP group under DP attention (serve.py mlp_whole_tp). "
    "DeepSeek-V3's shared expert cloned tp_size times is priced for 0.4.6 on NVIDIA (SHARED_CLONES_FROM); "
    "not on an AMD GPU, where 0.4.6-0.4.6.post3 clone it (gfx94x / gfx95x report capability >= (9, 0)) and "
    "0.4.6.post4-0.4.6.post5 do not (_is_cuda), nor under --n-share-experts-fusion in 0.4.5",
    "0.4.3.post3-0.4.6.post2: HiCache's controller threads leave a CUDA context of every other rank on GPU 0 after "
    "the KV pool is sized (engines/sglang/hicache.py; a driver's size: --serve names it as a caveat)",
    "0.5.3-0.5.11: the reserve derivation's GPU classes below 35 GiB (chunked_prefill_size 2048, cuda_graph_max_bs "
    "16 / 24 at TP < 4 and 80; none of k3plan's GPUs), priced as the stack's derivation",
    "0.5.6-0.5.9: the piecewise CUDA graph's reserve under --enable-piecewise-cuda-graph, opt-in there "
    "(piecewise_cuda_graph_max_tokens // 4 after the floor in 0.5.6-0.5.7, len(piecewise_cuda_graph_tokens) x 8 "
    "before it in 0.5.8-0.5.9: sglang wheels server_args.py _handle_gpu_memory_settings); from 0.5.10 the default "
    "prefill graph is priced (engines/sglang/prefill_graph.py)",
    "0.5.21: DeepSeek-V4's pool in the opt-in layouts and modes (--dsv4-attn-backend trtllm's uniform FP8 pages, "
    "SGLANG_DSV4_KV_LAYOUT v41, HiSparse, encoder SWA bounded replay; k3plan refuses the flags and variables "
    "unread)",
    "0.5.23: DeepSeek-V4.1's low-ratio pages' padding (pool_configurator.py _get_low_ratio_kv_padding_bytes: a few "
    "pages off the full tokens, its index page 64 or 128 by DeepGEMM's build)",
)


def follows(release: Release | None, first: Release) -> bool:
    """Whether a command read as ``release`` runs the rule that starts at ``first`` (None: the cited 0.5.15 code)."""
    return release is not None and release >= first
