"""tpu-inference's side of vLLM's KV-pool sizing (k3plan.engines.vllm.memory runs the pool with it): its worker
sizes the pool from the HBM its devices report, with no profile run before it, and its compact KDA-state slots fall
back to vLLM's uniform pages when they leave no attention block. Each rule is read in vllm-project/tpu-inference at
811f8e20 (the K3 branch the stack prices; the same code at main b8692ff0)."""

from __future__ import annotations

from k3plan.engines.engine import HbmWorker
from k3plan.engines.tpu_inference.dsv4_smem import smem_refusal
from k3plan.engines.tpu_inference.serve import JAX_KIMI_ARCHS, NO_DP_CHOICES, NO_DP_OPTION, VLLM_CODE

COMMIT = "811f8e20"
WORKER_SOURCE = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(total_hbm_avail = int(sum of the devices' bytes_limit x gpu_memory_utilization - sum of their bytes_in_use); "
    "no profile run before it: the step is compiled in compile_or_warm_up_model -> runner.capture_model, after the "
    "KV cache is allocated)"
)
NO_POOL_AT = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(ValueError when total_hbm_avail <= 0)"
)
WEIGHTS_OOM_AT = (
    f"the sharded weights' allocation in vllm-project/tpu-inference@{COMMIT} tpu_inference/models/common/"
    "model_loader.py get_model, before TPUWorker.determine_available_memory sizes any KV cache (XLA's own error text "
    "was not read)"
)
COMPACT_AT = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/runner/kv_cache_manager.py "
    "KVCacheManager._maybe_set_compact_mamba_num_blocks_override (N_attn = (avail // group_size - num_mamba_groups x "
    "mamba_num_blocks x mamba_unpadded) // (num_attn_groups x attn_page), both counts rounded to the sharding "
    "divisor, the attention-DP axes under DP attention: a device's share is max_num_seqs + 1 state slots; when the "
    "slots leave no attention block it logs 'Compact-mamba sizing skipped' and vLLM sizes the uniform pages)"
)

# the compiled step's temporaries that the JAX Kimi model's MoE holds at the largest token bucket (issue: the Kimi-Linear
# 0.95 start): read at 811f8e20 and compiled deviceless for tpu7x under the engine's jax 0.11.0 / libtpu 0.0.44
STEP_SOURCE = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/layers/jax/moe/sparse_moe.py sparse_moe_distributed_fwd "
    "(output_shape = jnp.zeros((x_TD.shape[0] x num_experts_per_tok, hidden_size)), the ragged_all_to_all's output "
    "operand, updated in place: one buffer a MoE layer that depends on no activation); models/jax/kimi_k3.py "
    "KimiLinearForCausalLM._select_moe_backend (MEGABLX_GMM when the expert axis is split) and KimiSparseMoeBlock "
    "(activation_ffw_td P(MLP_DATA = 'data', None): every device holds the whole bucket); runner/tpu_runner.py "
    "_init_inputs (the largest bucket: max_num_batched_tokens x the DP ranks); compiled in "
    "reports/compile/tpu-inference-kimi-linear-step (benchmarks/tpu_inference_sparse_moe_compile.py: 608,198,816 B "
    "for 1 layer, 1,220,131,008 B for 3, +302 MB a layer = one [65,536, 2,304] bf16 buffer each, all live at once; "
    "the first 8 layers in order 4,811,650,112 B, every pool aliased in place): a lower bound, the step's other "
    "temporaries not counted"
)

# the same MoE at 32 devices (tpu7x:2x2x4, expert_parallelism 32 under DP attention: 32 DP ranks) and its largest
# bucket (the vllm serve default 2,048 x 32 = 65,536 tokens, 524,288 routed rows): compiled deviceless at 4598bf05,
# the commit of the dev pipeline's 4-host Kimi-Linear-48B serve (tpu-inference-kimi-linear-v7x32-dpattn-ep32-gmu060-
# served), under jax 0.10.2 / libtpu 0.0.42.1 (reports/compile/tpu-inference-kimi-linear-moe-2x2x4/records.json).
# At this mesh the layers do not each keep a whole [524,288, 2,304] bf16 buffer (2,415,919,104 B): 3 layers
# 4,884,601,568 B, 8 layers 9,720,455,168 B, 26 layers (Kimi-Linear's MoE count) 9,740,247,776 B -- flat past 8, XLA
# reusing the buffers (one layer alone 9,128,645,248 B: a lone layer is scheduled differently). The records price
# this point; the one-buffer-a-layer law stays the 8-device one
MESH32_STEP_COMMIT = "4598bf05"
MESH32_POINT = (32, 65536 * 8, 2304, 8)  # (DP ranks, routed rows, hidden, top_k) the records were compiled at
MESH32_TEMPS = {3: 4_884_601_568, 8: 9_720_455_168, 26: 9_740_247_776}  # MoE layers -> temp_size_in_bytes a device
MESH32_STEP_SOURCE = (
    f"vllm-project/tpu-inference@{MESH32_STEP_COMMIT} tpu_inference/layers/jax/moe/sparse_moe.py "
    "sparse_moe_distributed_fwd at 32 DP ranks (layers/common/sharding.py ShardingConfigManager.from_vllm_config: "
    "tensor_parallelism 1 x expert_parallelism 32 under enable_dp_attention -> attn_dp_expert 32, total_dp_size 32; "
    "runner/tpu_runner.py _init_inputs: the largest bucket max_num_batched_tokens x 32); compiled in "
    "reports/compile/tpu-inference-kimi-linear-moe-2x2x4 (benchmarks/tpu_inference_sparse_moe_compile.py --target "
    "tpu7x:2x2x4 --tokens 65536: 4,884,601,568 B for 3 layers, 9,720,455,168 B for 8, 9,740,247,776 B for 26; "
    "between records the largest compiled count not above the model's): a lower bound, the step's other temporaries "
    "not counted"
)


def _mesh32_step(n_moe: int, rows: int, expert_in: int, top_k: int, dp: int) -> tuple[int, str] | None:
    """The MEGABLX_GMM MoE's compiled temporaries at the 32-rank point MESH32_TEMPS was compiled at (None elsewhere,
    and below 3 layers): the record at the largest compiled layer count not above n_moe, a lower bound."""
    if (dp, rows, expert_in, top_k) != MESH32_POINT or n_moe < min(MESH32_TEMPS):
        return None
    layers = max(n for n in MESH32_TEMPS if n <= n_moe)
    size = MESH32_TEMPS[layers]
    return size, (
        f"{n_moe} MoE layers at {rows:,} routed rows (max_num_batched_tokens {rows // dp // top_k:,} x DP {dp} x "
        f"top-{top_k}), hidden {expert_in:,}: {size:,} B (compiled for {layers}): {MESH32_STEP_SOURCE}"
    )


# without DP attention (stack option unsafe_mla_without_dp_attention=1) the same buffers at one DP rank: the routed
# experts' expert axis ATTN_DATA_EXPERT = (attn_dp_expert, expert) is sharding_strategy's expert_parallelism, so
# _select_moe_backend takes MEGABLX_GMM whenever it is above 1, and the tokens are the whole bucket on every device
# (MLP_DATA = 'data', 1); layers/jax/moe/ is the same at e65bd14c as at 811f8e20 (git diff: no change)
NO_DP_STEP_SOURCE = (
    "vllm-project/tpu-inference@e65bd14c models/jax/kimi_k3.py KimiLinearForCausalLM._select_moe_backend "
    "(num_expert_parallelism > 1 -> MEGABLX_GMM; ATTN_DATA_EXPERT = expert_parallelism without DP attention, "
    "layers/common/sharding.py) and layers/jax/moe/sparse_moe.py sparse_moe_distributed_fwd, unchanged since 811f8e20; "
    "the bucket max_num_batched_tokens x 1 DP rank; compiled at this mesh among K3's first layers in "
    "reports/compile/tpu-inference-kimi-k3-nodp-step (benchmarks/tpu_inference_k3_nodp_step_compile.py), the "
    "buffers not compiled apart there: the step's temporaries grew ~0.48 GB a layer at 512 tokens, more than these, so "
    "a lower bound"
)

# without DP attention the step's jit (models/common/model_loader.py run_model @e65bd14c: donate_argnums=1, the caches'
# out_shardings kv_cache_sharding = P(BATCH, KV_CONTEXT, KV_HEAD) for every cache leaf) returns an MLA cache split over
# KV_HEAD = ('model', 'expert'), 32 ways here, where create_kv_caches allocated it P(BATCH, KV_CONTEXT), whole on every
# device (its packing axis, MLA_KV_PACKING_SIZE 32, is the one split): the donated cache cannot alias its output (jax:
# "Some donated buffers were not usable: bfloat16[512,32,32,640]") and the MLA kernel's in-place write
# (input_output_aliases) runs on a copy of it. Compiled deviceless for tpu7x:2x2x4 at 'model' 8 x 'expert' 4 under jax
# 0.10.2 / libtpu 0.0.42.1 (reports/compile/tpu-inference-kimi-k3-nodp-step/records.json,
# benchmarks/tpu_inference_k3_nodp_step_compile.py): the KDA state arrays alias in place, the MLA caches do not
NO_DP_CACHE_COPY_SOURCE = (
    "vllm-project/tpu-inference@e65bd14c models/common/model_loader.py run_model (out_shardings kv_cache_sharding = "
    "P(BATCH, KV_CONTEXT, KV_HEAD) for every cache) against runner/kv_cache.py create_kv_caches (an MLA cache "
    "P(BATCH, KV_CONTEXT)), the MLA v2 kernel's in-place cache write (kernels/mla/v2/kernel.py): each MLA cache "
    "copied in the step, its donation refused; compiled in reports/compile/tpu-inference-kimi-k3-nodp-step "
    "(benchmarks/tpu_inference_k3_nodp_step_compile.py)"
)


def attention_cache_copies(*, options: dict[str, str]) -> str | None:
    """Where the JAX Kimi step without DP attention (stack option unsafe_mla_without_dp_attention=1, which the command
    reader allows for kimi_k3.py alone) copies every MLA cache: NO_DP_CACHE_COPY_SOURCE; None elsewhere and where
    SKIP_JAX_PRECOMPILE=1 compiles no step at start."""
    if options.get(NO_DP_OPTION) not in NO_DP_CHOICES or options.get("skip_jax_precompile") == "1":
        return None
    return NO_DP_CACHE_COPY_SOURCE


# the fused decode loop (additional_config enable_continue_decode, stack option continue_decode=1): capture_model's
# Phase 3 compiles runner/decode_loop.py _decode_core after the backbone, with the pool allocated: a jax.lax.while_loop
# over the model step at each request bucket (one token a request), the caches carried and donated, no out_shardings,
# every weight a loop-invariant operand of the body. Compiled deviceless from the engine's own code at 6a1cb1cca (the
# 13f attempt's; decode_loop.py, the MoE, MXFP4 and MLA kernels the same at a33687184 and 6bedf39e5, before the
# optimization_barrier of f9c647a86) for tpu7x:2x2x4 at 'model' 8 x 'expert' 4, the request bucket 64, each layer its
# own weights (reports/compile/tpu-inference-kimi-k3-nodp-decode-loop/records.json, benchmarks/
# tpu_inference_k3_nodp_step_compile.py --loop --own-weights): the caches alias in place, and every MoE layer added
# adds its own live temporaries (with one set of weights for every layer it adds ~28 MB: what grows is held for each
# layer's own weights -- the experts' staging XLA hoists out of the loop, 'LICM-hoisted MoE dequant staging' in
# 1313a4b53's message, which f9c647a86 pins per step; the same three MLA layers as a step, not a loop, hold 137 MB
# against the loop's 553 MB). The loop's temporaries for K3 are the records' linear law in the MoE layers by attention
# kind, a device: K3's first 4 layers (KKKM) 898,943,200 B, where MK's 400,535,520 B plus a KDA and an MLA MoE
# layer's growth give 884,935,224 B (-1.6%); its first 8 layers 1,862,367,648 B, where KKKM plus 3 KDA and 1 MLA MoE
# layers' growth give 1,888,922,208 B (+1.4%): the growth a MoE layer eases past 4 layers. The law: K3's first 8
# layers and layers 5-8's growth a MoE layer (240,856,112 B) for each of the 85 more, 22,335,137,168 B at 92 MoE
# layers. A linear extrapolation from 8 layers to 93 (XLA's own rematerialization under the HBM limit, which a
# deviceless compile of a few layers does not meet, may hold less), the sampler, logits and embedding left out
LOOP_COMMIT = "6a1cb1cca"
LOOP_POINT = (64, 8, 4)  # (the request bucket max_num_reqs, 'model', 'expert') the records were compiled at
LOOP_BASE = 1_862_367_648  # temp_size_in_bytes of the loop over K3's first 8 layers (KKKMKKKM)
LOOP_BASE_MOE = (5, 2)  # the (KDA, MLA) MoE layers LOOP_BASE holds (layer 0's MLP dense)
LOOP_FIRST_FOUR = 898_943_200  # K3's first 4 layers (KKKM: 2 KDA MoE, 1 MLA MoE)
LOOP_A_MOE = (LOOP_BASE - LOOP_FIRST_FOUR) // 4  # a MoE layer more, K3's layers 5-8 (3 KDA, 1 MLA): 240,856,112 B
LOOP_A_MLA_MOE = 552_500_224 - 320_888_672  # MMM - MM, 231,611,552 B (by kind, at 2-3 layers)
LOOP_A_KDA_MOE = 653_324_672 - 400_535_520  # MKK - MK, 252,789,152 B
LOOP_SOURCE = (
    f"vllm-project/tpu-inference@{LOOP_COMMIT} tpu_inference/runner/compilation_manager.py "
    "CompilationManager._precompile_continue_decode -> runner/decode_loop.py _decode_core (jax.lax.while_loop, "
    "donate_argnames kv_caches, the weights loop-invariant); compiled in reports/compile/"
    "tpu-inference-kimi-k3-nodp-decode-loop (benchmarks/tpu_inference_k3_nodp_step_compile.py --loop --own-weights: "
    "the caches aliased, each MoE layer's own temporaries live for the whole loop); K3's first 8 layers and layers "
    "5-8's growth a MoE layer, a linear law to 93 layers, the sampler and logits left out"
)


def loop_temporaries(
    *, options: dict[str, str], n_moe: int, n_attention: int, max_num_seqs: int
) -> tuple[int, str] | None:
    """The fused decode loop's temporaries a device (LOOP_SOURCE) where the command compiles it (stack option
    continue_decode=1) on the JAX Kimi model without DP attention at the point the records were compiled (request
    bucket 64 on 'model' 8 x 'expert' 4; the serve reader refuses the loop elsewhere): LOOP_BASE for K3's first eight
    layers and layers 5-8's growth for every further MoE layer (n_attention MLA layers, the others KDA; layer 0's
    dense MLP no MoE). None where no loop is compiled at start."""
    if options.get("continue_decode") != "1" or options.get("skip_jax_precompile") == "1":
        return None
    if options.get(NO_DP_OPTION) != "1" or n_moe < 1:
        return None
    reqs = max(max_num_seqs, 8)  # tpu_runner.py: max_num_reqs = max(max_num_seqs, MIN_NUM_SEQS 8) at one DP rank
    if reqs != LOOP_POINT[0]:
        return None
    mla_moe = min(n_attention, n_moe)  # every MLA layer of K3 (layers 4, 8, ..., 93) holds a MoE
    kda_moe = n_moe - mla_moe
    more_kda, more_mla = kda_moe - LOOP_BASE_MOE[0], mla_moe - LOOP_BASE_MOE[1]
    if more_kda < 0 or more_mla < 0:
        return None
    size = LOOP_BASE + (more_mla + more_kda) * LOOP_A_MOE
    return size, (
        f"{LOOP_BASE:,} B (K3's first 8 layers) + {more_mla + more_kda} MoE layers x {LOOP_A_MOE:,} B (layers 5-8's "
        f"growth) = {size:,} B at request bucket {reqs}: {LOOP_SOURCE}"
    )


# the compiled step of vLLM's DeepSeek-V3-family model code under attention DP (issue: Kimi-K2.6's 0.977 mlperf start,
# tpu-inference-kimi-k2.6-v7x8-mlperf-0977-oom): read at e0e04e95 and compiled deviceless for tpu7x:2x2x1 under jax
# 0.10.2 / libtpu 0.0.42.1 (reports/compile/tpu-inference-kimi-k2.6-step/records.json). What the compile gives at
# the shapes it was run for (hidden 7,168, moe_intermediate 2,048, top-8, 8 devices, 8,192 tokens): the step's
# temporaries, flat in the layers (each layer's reuse the last's), most of them the MoE's (1,682,337,504 B, linear in
# the routed rows: 841,806,816 B at 4,096 tokens); and the step's generated code, one copy of the MLA and MoE Pallas
# kernels a layer, which XLA:TPU loads into HBM and counts in its compile-time check as the program's "overlays"
# (benchmarks/tpu_compile_code_in_hbm.py on a v5e, same records)
DSV3_STEP_COMMIT = "e0e04e95"
DSV3_STEP_ROWS = 8192 * 8  # the compiled bucket's routed rows (8,192 tokens x top-8)
DSV3_STEP_TEMP_BYTES = 1_954_202_368  # the smallest temp_size_in_bytes a device of the step records (1 dense + k MoE)
DSV3_CODE_A_MOE_LAYER = 15_906_304  # the step's generated code a MoE layer more: the smallest growth in the records
DSV3_COMPILED_SHAPE = (7168, 8)  # (hidden, top_k) the records were compiled at; elsewhere not priced
# the config model_type of vLLM's DeepseekV2/V3ForCausalLM checkpoints k3plan's model spec keeps as its architecture
VLLM_DSV3_MODEL_TYPES = frozenset({"deepseek_v3", "kimi_k2", "kimi_k25"})
DSV3_STEP_SOURCE = (
    f"vllm-project/tpu-inference@{DSV3_STEP_COMMIT} models/vllm/vllm_model_wrapper.py jit_step_func (one jit of the "
    "whole model, the caches donated) over vLLM's DeepseekV2DecoderLayer with tpu-inference's MLA "
    "(layers/vllm/backends/flash_attn_mla.py PallasMLAttentionBackendImpl.forward -> layers/common/"
    "attention_interface.py mla_attention, the MLA v2 Pallas kernel) and MoE (layers/vllm/interface/moe.py "
    "vllm_moe_apply -> layers/common/fused_moe_gmm.py fused_moe_func, GMM_EP, scatter_results under attention DP: "
    "the tokens all-gathered, top_k routed rows each); runner/tpu_runner.py _init_inputs (the largest bucket: "
    "max_num_batched_tokens x the DP ranks); compiled in reports/compile/tpu-inference-kimi-k2.6-step "
    "(benchmarks/tpu_inference_dsv3_step_compile.py: the embedding, 1 dense and k MoE layers, the final norm; "
    "benchmarks/tpu_inference_moe_compile.py: the MoE alone; benchmarks/tpu_compile_code_in_hbm.py: the code counts "
    "as the program's 'overlays' in XLA:TPU's compile-time HBM check). A lower bound: the dense layer's and the "
    "embedding's code not counted; the step's temporaries taken linear in the routed rows as the MoE's are (compiled "
    "at 8,192 tokens only); compared with the 1 - utilization share as if every weight were a step argument (the "
    "lm_head, which the step does not use, is not one)"
)
# the same step without --enable-expert-parallel: vLLM's FusedMoEConfig.use_ep is False, so
# layers/vllm/interface/moe.py select_moe_backend_from_fused_moe_config picks GMM_TP ("[MoE]: Using GMM TP kernel";
# GMM_EP when use_ep, at 56b1e079, e0e04e95 and b8692ff0 alike) and fused_moe_func's tensor_parallel_gmm holds every
# token's routed rows whole on every device (the experts' width split over MLP_TENSOR): the gathered rows and the
# second gmm's output, [tokens x dp x top_k, hidden] bf16 each. Compiled deviceless for tpu7x:2x2x1 under jax 0.10.2 /
# libtpu 0.0.42.1 at 56b1e079 (main of 2026-04-30, the code of Jacob Platin's Kimi-K2.6 lm_eval runs, nohup.out
# @0998d381) with the int4 experts and fp32 group-32 scales that commit holds
# (reports/compile/tpu-inference-kimi-k2.6-gmm-tp/records.json, benchmarks/tpu_inference_moe_tp_compile.py): the MoE's
# temporaries, flat in the layers (1 layer 1,947,925,856 B, 2 layers 1,950,905,344 B at 8,192 tokens) and linear in
# the routed rows (3,895,131,488 B at 16,384 tokens), where the engine's own CompileTimeHbmOom report for the whole
# step at 16,384 tokens (tpu-inference-kimi-k2.6-v7x8-dpattn-8k-chunk4096-compile-oom) reads "HLO temp 3.73G
# (Unpadded (3.58G) ... 4.1% fragmentation)", its two largest allocations the MoE's bf16[131072,7168] gather and gmm
# output: the MoE alone is the step's temporaries within 3%. That report's program requirement lists reserved,
# global, scoped and HLO temp and no overlays: the generated code is not counted on this path
GMM_TP_STEP_COMMIT = "56b1e079"
GMM_TP_STEP_TEMP_BYTES = 1_947_925_856  # the MoE's temp_size_in_bytes a device at 8,192 tokens, 1 layer
GMM_TP_STEP_SOURCE = (
    f"vllm-project/tpu-inference@{GMM_TP_STEP_COMMIT} layers/vllm/interface/moe.py "
    "select_moe_backend_from_fused_moe_config (use_ep False -> GMM_TP) -> layers/common/fused_moe_gmm.py "
    "fused_moe_func, tensor_parallel_gmm (every token's top_k routed rows on every device, the experts' width over "
    "MLP_TENSOR); compiled in reports/compile/tpu-inference-kimi-k2.6-gmm-tp (benchmarks/tpu_inference_moe_tp_compile.py: "
    "flat in the layers, linear in the rows; at 16,384 tokens 3,895,131,488 B against the engine's own 'HLO temp "
    "3.73G (Unpadded (3.58G))' for the whole step, whose program requirement lists no overlays: the code not counted)"
)
# the config model_type of the checkpoints kimi_k3.py serves (JAX_KIMI_ARCHS: KimiLinearForCausalLM's config says
# kimi_linear, KimiK3ForConditionalGeneration's kimi_k3), which k3plan's model spec keeps as its architecture
JAX_KIMI_MODEL_TYPES = frozenset({"kimi_linear", "kimi_k3"})


def step_temporaries(
    *,
    architecture: str,
    options: dict[str, str],
    n_moe: int,
    top_k: int,
    expert_in: int,
    tokens: int,
    dp: int,
    expert_parallel: bool = True,
) -> tuple[int, str] | None:
    """The JAX Kimi model's (kimi_k3.py, MODEL_IMPL_TYPE flax_nnx / auto) MoE output buffers at the largest token
    bucket, a device: n_moe x (tokens x dp) x top_k x the experts' width x 2 (bf16), the MEGABLX_GMM backend's
    (the expert axis split, dp > 1); for vLLM's model code, the DeepSeek-V3 family's compiled step
    (_vllm_dsv3_step; ``expert_parallel``: --enable-expert-parallel, which picks its MoE backend). None for the
    other models, and where SKIP_JAX_PRECOMPILE=1 compiles no step at start (option skip_jax_precompile)."""
    if options.get("skip_jax_precompile") == "1":
        return None
    if options.get("model_impl") == VLLM_CODE:
        return _vllm_dsv3_step(
            architecture=architecture,
            n_moe=n_moe,
            top_k=top_k,
            hidden=expert_in,
            tokens=tokens,
            dp=dp,
            expert_parallel=expert_parallel,
        )
    jax_kimi = architecture in JAX_KIMI_ARCHS | JAX_KIMI_MODEL_TYPES
    no_dp = options.get(NO_DP_OPTION) in NO_DP_CHOICES  # the expert axis split over 'expert' (NO_DP_STEP_SOURCE)
    if not jax_kimi or n_moe == 0 or (dp <= 1 and not no_dp):
        return None
    rows = tokens * dp * top_k
    if not no_dp and (compiled := _mesh32_step(n_moe, rows, expert_in, top_k, dp)) is not None:
        return compiled
    size = n_moe * rows * expert_in * 2
    return size, (
        f"{n_moe} MoE layers x {rows:,} routed rows (max_num_batched_tokens {tokens:,} x DP {dp} x top-{top_k}) x "
        f"{expert_in:,} x 2 B = {size:,} B: {STEP_SOURCE}" + (f"; {NO_DP_STEP_SOURCE}" if no_dp else "")
    )


def _vllm_dsv3_step(
    *, architecture: str, n_moe: int, top_k: int, hidden: int, tokens: int, dp: int, expert_parallel: bool = True
) -> tuple[int, str] | None:
    """vLLM's DeepSeek-V3-family model code under attention DP (dp > 1): the step's compiled temporaries, scaled from
    the compiled bucket's routed rows to this one's (tokens x dp x top_k), plus, on GMM_EP (--enable-expert-parallel),
    the generated code of its n_moe MoE layers; on GMM_TP (without it) the GMM_TP records' temporaries and no code
    (GMM_TP_STEP_SOURCE); None for other models, for shapes the records were not compiled at, and without attention
    DP (the MoE then takes another path, not compiled)."""
    if architecture not in VLLM_DSV3_MODEL_TYPES or n_moe == 0 or dp <= 1 or (hidden, top_k) != DSV3_COMPILED_SHAPE:
        return None
    rows = tokens * dp * top_k
    if not expert_parallel:
        temps = GMM_TP_STEP_TEMP_BYTES * rows // DSV3_STEP_ROWS
        return temps, (
            f"the step's temporaries on GMM_TP (no --enable-expert-parallel) {temps:,} B ({GMM_TP_STEP_TEMP_BYTES:,} B "
            f"compiled for {DSV3_STEP_ROWS:,} routed rows; here {rows:,}: max_num_batched_tokens {tokens:,} x DP {dp} x "
            f"top-{top_k}): {GMM_TP_STEP_SOURCE}"
        )
    temps = DSV3_STEP_TEMP_BYTES * rows // DSV3_STEP_ROWS
    code = n_moe * DSV3_CODE_A_MOE_LAYER
    return temps + code, (
        f"the step's temporaries {temps:,} B ({DSV3_STEP_TEMP_BYTES:,} B compiled for {DSV3_STEP_ROWS:,} routed rows; "
        f"here {rows:,}: max_num_batched_tokens {tokens:,} x DP {dp} x top-{top_k}) + {n_moe} MoE layers' generated "
        f"code x {DSV3_CODE_A_MOE_LAYER:,} B = {temps + code:,} B: {DSV3_STEP_SOURCE}"
    )


# the worker returns its devices' HBM summed (the loop over hbm_usage_bytes(self.devices)) and vLLM's KV manager
# divides that sum by one layer page x the layers (vllm/v1/core/kv_cache_utils.py get_num_blocks; tpu-inference's page:
# KVCacheManager.get_kv_cache_spec's padded MLA head), so its "GPU KV cache size" counts the blocks of every device;
# each device holds its share of them ("Default KV cache is sharded over (BATCH=(dp, attn_dp))",
# KVCacheManager.initialize_kv_cache: every device under the DP attention the platform requires of an MLA model).
# Kimi-K2.6 at 8 devices logged 10.08 GiB summed and 277,248 tokens = 1,083 blocks of 256 x 640 B x 61 layers
# (tests/engines/cases/tpu-inference-kimi-k2.6-v7x8-dpattn-8k-lmeval)
SUMS_DEVICES = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(total_hbm_avail over every device of the worker), runner/kv_cache_manager.py KVCacheManager.initialize_kv_cache "
    "(the blocks sharded over BATCH = (dp, attn_dp))"
)

# --num-gpu-blocks-override on a model with KDA state groups (read at e65bd14c, the K3 no-DP attempts' code): the compact
# sizing steps aside ("Skipped if the user pinned num_gpu_blocks_override"), vLLM sizes every KVCacheTensor at the pinned
# blocks x the uniform page (attn_page + num_mamba_groups x mamba_unpadded), and initialize_kv_cache, which cannot
# overlay a jax.Array of one type on another's bytes (duplicate_shared_layers), gives every layer of a tensor's shared_by
# its own array: num_blocks = min(the tensor's blocks, the override) rounded to the BATCH divisor, attention layers
# num_blocks pages (create_kv_caches), state layers mamba_num_blocks = num_blocks slots (the compact count unset)
PINNED_LAYERS = (
    "vllm-project/tpu-inference@e65bd14c tpu_inference/runner/kv_cache_manager.py KVCacheManager.initialize_kv_cache "
    "(duplicate_shared_layers: one array a layer of every shared_by group; num_blocks = min(num_blocks, "
    "cache_config.num_gpu_blocks_override) after the BATCH divisor; mamba_num_blocks = num_blocks when "
    "_maybe_set_compact_mamba_num_blocks_override returned on the pinned override), runner/kv_cache.py "
    "create_kv_caches (an MLA layer's pages P(BATCH, KV_CONTEXT)); the state arrays P(ATTN_DATA, ..., ATTN_HEAD)"
)

WORKER = HbmWorker(
    source=WORKER_SOURCE,
    # the worker's f-string ({total_hbm_used_gb=}GiB ...), over one device's share: it sums its devices
    no_pool=(
        "ValueError: total_hbm_used_gb={used}GiB exceeds total_hbm_limit_cap_gb={cap}GiB by {over}GiB. Please "
        "consider increasing --gpu-memory-utilization from {util} to a larger value. (a device's share: the worker "
        "sums its devices)"
    ),
    no_pool_at=NO_POOL_AT,
    weights_oom="RESOURCE_EXHAUSTED (XLA's allocator)",
    weights_oom_at=WEIGHTS_OOM_AT,
    compact_at=COMPACT_AT,
    compact_short="uniform",
    step_temporaries=step_temporaries,
    sums_devices=SUMS_DEVICES,
    pinned_layers=PINNED_LAYERS,
    attention_cache_copies=attention_cache_copies,
    loop_temporaries=loop_temporaries,
    dsv4_smem_refusal=smem_refusal,
)
