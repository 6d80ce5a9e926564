"""How ``vllm serve`` reads tpu-inference's own command (issue 47 item 2), as far as k3plan prices it. On a TPU a
``vllm serve`` whose --additional-config holds a "sharding" key is tpu-inference's: that dict is its mesh
(vllm-project/tpu-inference@b8692ff0 tpu_inference/layers/common/sharding.py ShardingConfigManager.from_vllm_config
reads additional_config["sharding"]["sharding_strategy"]), which the torch_tpu plugin does not take. Anything else
on a TPU stays torchtpu-vllm's (engines/vllm/serve.py finish); an environment variable alone routes nothing, as
both platforms read MODEL_IMPL_TYPE and the MOE_REQUANTIZE_* variables (tpu-inference's
tpu_platform.py TpuPlatform.additional_env_vars, kowalski-4831/vllm-torchtpu@0095cdcb's own list).

What is priced: the split an MLA model gets under sharding_strategy's enable_dp_attention (with its
tensor_parallelism and expert_parallelism: from_vllm_config's attn_dp x attn_dp_expert mesh, read where it spans every
device), and for the JAX Kimi model the K3 bring-up branches' run without it (TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_
ATTENTION=1, enable_dp_attention false: 'model' x 'expert' over every device, stack option
unsafe_mla_without_dp_attention=1), --num-gpu-blocks-override, vLLM's model code under tpu-inference (MODEL_IMPL_TYPE=vllm: stack option model_impl=vllm), the JAX model
the stack itself is read from (MODEL_IMPL_TYPE flax_nnx or auto on the checkpoints kimi_k3.py serves, Kimi-Linear and
K3), the JAX DeepSeek-V3 model (flax_nnx or auto on DeepSeek-V3 / R1 at tensor_parallelism 1 x expert_parallelism =
the devices, where it holds vLLM's model code's tensors: JAX_DEEPSEEK_SOURCE), the experts' fp4 requantization at load
(MOE_REQUANTIZE_WEIGHT_DTYPE=fp4, MOE_REQUANTIZE_BLOCK_SIZE=512: option moe_requantize_weight_dtype=fp4: DeepSeek-V3 /
R1's fp8 experts and Kimi-K2.6 / K2-Thinking's int4 ones; DeepSeek-V4's fp4 experts are requantized alike whatever the
variables say), the int4 experts kept unrequantized with float32 group scales (DISABLE_WEIGHT_REQUANTIZATION=1, and
releases 0.20.0-0.21.x under fit --engine-version: _int4_scales), --enable-expert-parallel (the MoE backend the step
compiles: GMM_EP with it, GMM_TP without), the KV dtype, --gpu-memory-utilization, --max-model-len,
--max-num-batched-tokens (vllm serve's 2,048 when unset) and --max-num-seqs (vLLM's 256 when unset). What changes no
memory is listed as ignored (a sharding_strategy tensor_parallelism equal to
--tensor-parallel-size among it); anything else is refused in one line."""

from __future__ import annotations

import json

from k3plan.engines.serve_values import (
    Reading,
    env_on,
    flag_int,
    json_object,
    read_hf_overrides,
    refuse_unpriced,
    suffix_int,
)
from k3plan.engines.tpu_inference.commits import Gate, holds, named
from k3plan.engines.tpu_inference.llm_class import OFFLINE
from k3plan.errors import K3PlanError
from k3plan.units import fmt_gib

STACK = "tpu-inference"
SOURCE = "vllm-project/tpu-inference@b8692ff0"
ADDITIONAL = "--additional-config"

# from_vllm_config under enable_dp_attention: an MLA model has one KV head (num_kv_heads = 1 if use_mla), so
# num_kv_heads_per_device_in_kv_cache = max(1, 2 / packing) = 1 for bf16 and fp8 alike, and with no attn_dp_size
# attn_dp = tensor_parallelism // 1 = every device of --tensor-parallel-size, tensor_parallelism // attn_dp = 1;
# attn_dp > 1 moves expert_parallelism (default 1) to attn_dp_expert. The experts are sharded over
# ShardingAxisName.EXPERT = (attn_dp, attn_dp_expert, expert, model, dcp, pcp): every device
# (layers/vllm/quantization/fp8.py VllmFp8MoEMethod.process_weights_after_loading P(EXPERT)), with
# --enable-expert-parallel or without (the GMM_TP backend's MLP_TENSOR spans the same axes)
SPLIT_SOURCE = (
    f"{SOURCE} tpu_inference/layers/common/sharding.py ShardingConfigManager.from_vllm_config (enable_dp_attention, "
    "MLA: one KV head, attn_dp = --tensor-parallel-size, tensor_parallelism 1); layers/vllm/quantization/fp8.py "
    "VllmFp8MoEMethod.process_weights_after_loading (the experts over ShardingAxisName.EXPERT, every device)"
)
# the sharding_strategy keys k3plan reads; the others change the mesh in ways it has not priced
STRATEGY_READ = frozenset({"enable_dp_attention", "tensor_parallelism", "expert_parallelism"})
STRATEGY_EP = "expert_parallelism"
# from_vllm_config under enable_dp_attention for an MLA model (num_kv_heads = 1 if use_mla: one KV head a device's
# cache, num_kv_heads_per_device_in_kv_cache = max(1, 2 / packing) = 1 for bf16 and fp8): with no attn_dp_size,
# attn_dp = tensor_parallelism (sharding_strategy's where set and unlike --tensor-parallel-size, else the flag's),
# the 'model' axis tensor_parallelism // attn_dp = 1, and since the 'model' axis then saturates the one KV head
# (is_kv_fully_sharded_by_tp) every expert_parallelism (default 1) moves to attn_dp_expert, the 'expert' axis 1:
# attention DP over attn_dp x attn_dp_expert, every device of the mesh. ShardingAxisName.EXPERT (vLLM's model code)
# spans every axis; ATTN_DATA_EXPERT (kimi_k3.py's routed experts) spans attn_dp_expert and expert only
MESH_SOURCE = (
    f"{SOURCE} tpu_inference/layers/common/sharding.py ShardingConfigManager.from_vllm_config (enable_dp_attention, "
    "MLA: attn_dp = tensor_parallelism, the 'model' axis 1, attn_dp_expert = expert_parallelism; the mesh holds "
    "attn_dp x attn_dp_expert devices) and ShardingAxisNameBase (EXPERT: every axis; ATTN_DATA_EXPERT: attn_dp_expert, "
    "expert)"
)
# sharding_strategy "tensor_parallelism" replaces --tensor-parallel-size only where it is set and differs from it
# (from_vllm_config: `if pc_tensor_parallelism != ss_tensor_parallelsim and ss_tensor_parallelsim: tensor_parallelism =
# ss_tensor_parallelsim else: tensor_parallelism = pc_tensor_parallelism`): equal to the flag (or 0 / null) the mesh
# is the flag's, so nothing moves; the Kimi-K2.6 nightly's tests/e2e/benchmarking/mmlu.sh and mlperf.sh write it as
# the device count they pass to --tensor-parallel-size
STRATEGY_TP = "tensor_parallelism"
# tpu_runner.py _init_inputs: additional_config "compilation_sizes" are extra token paddings the step is compiled
# for (num_tokens_paddings), not memory held
# and "sparse_matmul" (its daily CI's run_jax_deepseek_v3_1k_8k.json, scripts/multihost/benchmarks/jax/
# run_deepseek_v3_1k_1k.sh): which matmul runs the experts (the grouped, sparse one) over the same weights
# and "replicate_attn_weights", which nothing in tpu_inference reads since #2135 (vllm-project/tpu-inference@350d3857,
# "[DSv3] Fix sharding of jax path DSV3 ...", an ancestor of b8692ff0 and of a9803230, removed the one reader:
# models/jax/deepseek_v3.py's `if additional_config.get("replicate_attn_weights")`, which had set the attention
# projections' shardings to ()); the daily multi-host DeepSeek-R1 benchmark (.buildkite/benchmark/cases/daily/
# run_jax_deepseek_v3_1k_8k.json) and mlperf.sh / mmlu.sh still pass it. The projections are over ATTN_HEAD =
# (model, expert, dcp), 1 x 1 x 1 under DP attention, so whole on every device with it or without
ADDITIONAL_IGNORED = frozenset({"compilation_sizes", "sparse_matmul", "replicate_attn_weights"})
# additional_config "enable_continue_decode": the fused decode loop, read with .get("enable_continue_decode", False) and
# tested for truth alone (platforms/tpu_platform.py TpuPlatform.check_and_update_config, core/sched/dp_scheduler.py,
# runner/tpu_runner.py TPUModelRunner.__init__ / _execute_model, runner/compilation_manager.py capture_model: `if
# self.runner.enable_continue_decode: self._precompile_continue_decode()`), in main (b8692ff0) and on the K3 bring-up
# branches (a33687184, 6a1cb1cca, 1313a4b53) alike. Off (false, 0, null, ""): the scheduler is not patched, no loop
# executable is compiled and no decode batch runs it -- the stock path, listed. On: capture_model's Phase 3, after the
# backbone's buckets and with the pool already allocated, compiles runner/decode_loop.py _decode_core, one more
# executable: a jax.lax.while_loop over the whole model step at each request bucket, the caches carried and donated,
# every weight a loop-invariant operand of the body; its own temporaries, not the step's, are what it needs at start
CONTINUE_DECODE = "enable_continue_decode"
CONTINUE_DECODE_OPTION = "continue_decode"  # stack.yaml options continue_decode
CONTINUE_DECODE_SOURCE = (
    "vllm-project/tpu-inference@6a1cb1cca tpu_inference/runner/compilation_manager.py CompilationManager.capture_model "
    "(Phase 3: if self.runner.enable_continue_decode: self._precompile_continue_decode(), after the backbone and with "
    "the KV caches allocated) and runner/decode_loop.py _decode_core (jax.lax.while_loop over model_fn, compute_logits "
    "and sampling; donate_argnames kv_caches; the weights loop-invariant); read with additional_config.get("
    "'enable_continue_decode', False) and tested for truth (platforms/tpu_platform.py, runner/tpu_runner.py; the same "
    "at a33687184, 1313a4b53 and main b8692ff0)"
)
# keys that change what a device holds in a way k3plan does not price: refused with what they do
ADDITIONAL_UNPRICED: dict[str, str] = {}

# --max-num-seqs unset: vLLM's EngineArgs.get_batch_defaults sizes its defaults by current_platform.
# get_device_total_memory(), in a try whose except sets device_memory = 0; tpu-inference's TpuPlatform.
# get_device_total_memory raises NotImplementedError, so vllm serve (UsageContext.OPENAI_API_SERVER) takes the
# else branch, 256 sequences, and the TPU branch after it moves max_num_batched_tokens only (read in the vllm 0.11.0,
# 0.26.0 and 0.28.0 wheels, vllm/engine/arg_utils.py; TpuPlatform at b8692ff0 and at fc99173d alike)
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_SEQS_SOURCE = (
    "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (the vllm 0.26.0 / 0.28.0 wheels): device_memory 0 "
    "when get_device_total_memory raises -> OPENAI_API_SERVER max_num_seqs 256; tpu_inference/platforms/"
    f"tpu_platform.py TpuPlatform.get_device_total_memory raises NotImplementedError ({SOURCE})"
)

# --max-num-batched-tokens unset: the same get_batch_defaults, under tpu-inference. get_device_total_memory raises
# NotImplementedError inside its try, so device_memory = 0 and device_name = "" (the except): the else branch,
# {LLM_CLASS: 8192, OPENAI_API_SERVER: 2048}; its TPU branch compares current_platform.get_device_name() with "V6E",
# "V5E" and "V5P", and TpuPlatform.get_device_name returns f"TPU {chip_type.name}" (or "TPU v6 lite" under Pathways,
# "TPU" on an error), none of them, so nothing moves. _set_default_max_num_seqs_and_batched_tokens_args then, chunked
# prefill on (vLLM's default for a generating model, model_config.is_chunked_prefill_supported), caps it at
# max_num_seqs x max_model_len. vllm serve is UsageContext.OPENAI_API_SERVER: min(2048, max_num_seqs x max_model_len);
# vLLM's LLM class (examples/offline_inference.py, lm_eval's vllm backend) takes 8192 instead, which k3plan does not
# read (its command is vllm serve). No file of tpu_inference sets scheduler_config.max_num_batched_tokens (git grep
# at b8692ff0, 0998d381, f5f1d337). Read in the vllm 0.13.0, 0.14.1, 0.15.1 and 0.16.0 wheels (the same code) and
# in 0.17.0, 0.20.0, 0.26.0, 0.28.0, 0.31.0 and 0.34.0, whose additions leave it: a doubling under --performance-mode
# throughput (0.17.0) and a batched-DP-MoE default under --data-parallel-size > 1 (0.20.0), neither taken by this
# reader; a floor for multimodal prefix-LM models (0.26.0: model_type gemma3, paligemma, ..., not Kimi's or
# DeepSeek's); a >= 160 GiB tier (0.28.0) that device_memory 0 does not reach
DEFAULT_CHUNK_SERVE = 2048
# the same table's LLM_CLASS entry: vLLM's LLM class (examples/offline_inference.py, lm_eval's vllm backend:
# engines/tpu_inference/llm_class.py), read in the vllm 0.16.0 and 0.20.0 wheels (device_memory 0: {LLM_CLASS: 8192,
# OPENAI_API_SERVER: 2048}; max_num_seqs {LLM_CLASS: 256, OPENAI_API_SERVER: 256}, so DEFAULT_MAX_NUM_SEQS holds)
DEFAULT_CHUNK_LLM_CLASS = 8192
DEFAULT_CHUNK_SOURCE = (
    "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args "
    "(the vllm 0.13.0-0.34.0 wheels: device_memory 0 when get_device_total_memory raises -> OPENAI_API_SERVER 2048; "
    "the TPU branch's chip names V6E / V5E / V5P unmatched; chunked prefill: min(max_num_seqs x max_model_len, ...)); "
    f"tpu_inference/platforms/tpu_platform.py TpuPlatform.get_device_total_memory (raises NotImplementedError) and "
    f"get_device_name (f'TPU {{chip_type.name}}') ({SOURCE}, 0998d381 and f5f1d337 alike)"
)

# TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION: the K3 bring-up branches' escape hatch (vllm-project/tpu-inference
# branches cuiq-k3-attempt10 .. 13*: 5d50c950, 20837beb, e65bd14c, 629facb4 tpu_inference/platforms/tpu_platform.py
# TpuPlatform.check_and_update_config: `unsafe_no_dp_attention = os.environ.get(...) == "1"`; with NEW_MODEL_DESIGN
# on, the MLA check then logs "[dev-only] Serving an MLA model WITHOUT DP attention" and goes on). Not in main
# (b8692ff0 raises). The mesh it runs is from_vllm_config's without DP attention (layers/common/sharding.py @e65bd14c:
# 'model' = tensor_parallelism, 'expert' = expert_parallelism, attn_dp = attn_dp_expert = 1), and on it kimi_k3.py
# @e65bd14c lays K3 out otherwise than the stack's 811f8e20 rules (one KV pool every device, its KDA split by heads)
UNSAFE_NO_DP_ATTENTION = "TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION"
UNSAFE_SOURCE = (
    "vllm-project/tpu-inference@e65bd14c tpu_inference/platforms/tpu_platform.py (the same at 5d50c950 and 20837beb, "
    "attempt 10)"
)
NO_DP_LAYOUT = (
    "the MLA cache over ShardingAxisName.BATCH = (data, attn_dp, attn_dp_expert), 1 x 1 x 1, so every block whole on "
    "every device (runner/kv_cache.py create_kv_caches), the MLA projections, the KDA projections and state, the "
    "shared experts and the dense MLP split by heads / width over ATTN_HEAD = (model, expert, dcp), every device "
    "(k3plan's tp; dp 1), the routed experts P(ATTN_DATA_EXPERT, None, MODEL) over 'expert' x 'model', every device "
    "(models/jax/kimi_k3.py, layers/common/kda_attention.py @e65bd14c): stack option "
    "unsafe_mla_without_dp_attention=1"
)
# --num-gpu-blocks-override: vLLM's pinned block count (vllm/v1/core/kv_cache_utils.py may_override_num_blocks, after
# the memory checks: engines/vllm/memory.py VLLM_OVERRIDE); tpu-inference's compact KDA-state sizing returns at once
# when it is set ("Skipped if the user pinned num_gpu_blocks_override"), so every layer group gets the pinned
# number of vLLM's uniform pages
BLOCKS_OVERRIDE_SOURCE = (
    "vllm-project/tpu-inference@e65bd14c tpu_inference/runner/kv_cache_manager.py "
    "KVCacheManager._maybe_set_compact_mamba_num_blocks_override (if cache_config.num_gpu_blocks_override is not None: "
    "return): vLLM's uniform pages, the pinned count (vllm/v1/core/kv_cache_utils.py may_override_num_blocks)"
)
# tpu-inference's JAX Kimi model serves the text stack only: adapt_wrapper_checkpoint drops every checkpoint tensor under
# VISION_SKIP_PREFIXES (vision_tower, multi_modal_projector, mm_projector, with or without 'model.') and builds no
# tower, whatever vLLM's --language-model-only says
KIMI_TEXT_ONLY_SOURCE = (
    "vllm-project/tpu-inference@811f8e20 (and e65bd14c) tpu_inference/models/jax/kimi_k3.py adapt_wrapper_checkpoint "
    "(VISION_SKIP_PREFIXES: '[kimi] skipped N vision/projector checkpoint tensors ...; this build serves the text "
    "stack only')"
)
# the stack option that lays K3 out without DP attention (stack.yaml options unsafe_mla_without_dp_attention)
NO_DP_OPTION = "unsafe_mla_without_dp_attention"
# its choice at a build before the K3 bring-up split the KDA parameters by heads (ad1af3ab, "Kimi: shard the KDA
# parameters over the head axis", branch cuiq-k3-shapes, 2026-08-01 22:08): kimi_k3.py KimiDeltaAttention creates every
# KDA parameter P() there (its NOTE(sharding): "the KDA parameters are replicated ... correctness comes first here";
# kda_attention.py _core_specs P(data, None) and P() for the parameters), the state pool still allocated by heads
# (runner/kv_cache_manager.py: P(ATTN_DATA, None, ATTN_HEAD) / P(ATTN_DATA, ATTN_HEAD, None, None)); read at
# bc1aa6a1 (branch cuiq-k3-mla-nodp), named with fit --engine-version (commits.py, a listed branch commit)
NO_DP_KDA_REPLICATED = "1-replicated-kda"
NO_DP_CHOICES = ("1", NO_DP_KDA_REPLICATED)
KDA_HEAD_SPLIT = Gate(None, "ad1af3ab")
KDA_REPLICATED_SOURCE = (
    "vllm-project/tpu-inference@bc1aa6a1 (branch cuiq-k3-mla-nodp, before ad1af3ab's head split) tpu_inference/models/"
    "jax/kimi_k3.py KimiDeltaAttention.__post_init__ (every _einsum kernel_init P(), the conv weights, A_log and "
    "dt_bias sharding=P()) and layers/common/kda_attention.py _core_specs (the parameters P())"
)
NO_DP_MESH_SOURCE = (
    "vllm-project/tpu-inference@e65bd14c tpu_inference/layers/common/sharding.py ShardingConfigManager."
    "from_vllm_config (enable_dp_attention false: attn_dp = attn_dp_expert = 1, 'model' = tensor_parallelism, "
    "'expert' = expert_parallelism)"
)

# the environment tpu-inference's command sets (tpu_inference/envs.py, vLLM's envs)
MODEL_IMPL = "MODEL_IMPL_TYPE"
REQUANT_DTYPE = "MOE_REQUANTIZE_WEIGHT_DTYPE"
REQUANT_BLOCK = "MOE_REQUANTIZE_BLOCK_SIZE"
NEW_MODEL_DESIGN = "NEW_MODEL_DESIGN"
# forwarded to the workers (tpu_platform.py TpuPlatform.additional_env_vars) and read nowhere else in
# tpu_inference @b8692ff0: no effect
BACKEND_TYPE = "TPU_BACKEND_TYPE"
# vLLM's switch off MLA (0, its default: MLA on, as k3plan prices)
MLA_DISABLE = "VLLM_MLA_DISABLE"
# the directory of its phase-based xprof capture (tpu_inference/envs.py PHASED_PROFILING_DIR, default ''; read in
# tpu_runner.py TPUModelRunner._init_phased_profiling -> runner/utils.py PhasedBasedProfiler, which starts and stops
# the JAX profiler around the served batches' phases, after the KV pool is sized): no memory the pool is sized
# against; its daily DeepSeek-R1 profile cases (.buildkite/benchmark/cases/daily/deepseek_profile.json) set it
PROFILING_DIR = "PHASED_PROFILING_DIR"
# the daily multi-host DeepSeek-R1 benchmark's environment (.buildkite/benchmark/cases/daily/
# run_jax_deepseek_v3_1k_8k.json), each listed for what it does at b8692ff0:
# - the dtype the GMM_EP / GMM_TP MoE backends all-gather the tokens in (layers/common/moe.py: all_gather_fp8), a
#   payload inside the compiled step, which runs after the pool is sized (memory.py WORKER_SOURCE)
ALL_GATHER_DTYPE = "MOE_ALL_GATHER_ACTIVATION_DTYPE"
# - vLLM's CUDA stream for the shared experts: tpu_inference/env_override.py sets it to "1" on import whatever the
#   command says
SHARED_STREAM = "VLLM_DISABLE_SHARED_EXPERTS_STREAM"
# - Ray's own settings for the multi-host cluster (its log routing, its autoscaler's polling period): no file of
#   tpu_inference reads them (git grep at b8692ff0), and Ray's head process holds no TPU memory
RAY_ENV = frozenset({"RAY_LOG_TO_STDERR", "AUTOSCALER_UPDATE_INTERVAL_S"})
# - the JAX path's MoE backend switch (layers/jax/moe/utils.py select_moe_backend: MEGABLX_GMM when on; envs.py
#   env_bool, default False): listed off, refused on (that backend's layout not read)
UNFUSED_MEGABLOCKS = "USE_UNFUSED_MEGABLOCKS"
# - the routing forced random for performance runs (envs.py env_bool, default False; layers/common/fused_moe_gmm.py
#   fused_moe_func: _override_token_indices_for_random_routing replaces the all-gathered top-k expert ids with draws
#   of the same [tokens, top_k] shape, jax.random.choice without replacement over the experts, seeded PRNGKey(42)):
#   the weights, the pool and the ids' shapes are unchanged; the draw (a shuffle of the experts a token) holds
#   [tokens, experts] sort keys and indices inside the compiled step (8 MiB each at 8,192 tokens and 256 experts),
#   which runs after the pool is sized (memory.py WORKER_SOURCE). Its multi-host DeepSeek-R1 random-routing dashboard sets it (scripts/multihost/benchmarks/torchax/
#   run_deepseek_v3_1k_8k_random_routing.sh, nightly_benchmarking.sh FORCE_MOE_RANDOM_ROUTING_ENV)
RANDOM_ROUTING = "FORCE_MOE_RANDOM_ROUTING"
LISTED_ENV = frozenset({ALL_GATHER_DTYPE, SHARED_STREAM, RANDOM_ROUTING}) | RAY_ENV
# the switch off the experts' requantization at load (envs.py env_bool, default False; moe_weights.py
# _process_quantized_moe_weights_impl -> _process_moe_weights_no_requant): stack option disable_weight_requantization
NO_REQUANT = "DISABLE_WEIGHT_REQUANTIZATION"
# the switch off the start's precompilation (envs.py env_bool, default False): CompilationManager.capture_model returns
# before compiling any token bucket, and TPUWorker skips the sampling / logprobs precompiles before the KV cache, so
# no step is compiled at start; the first batch reaching a bucket compiles it then. tpu-inference's
# examples/offline_inference.py sets it itself (os.environ.setdefault('SKIP_JAX_PRECOMPILE', '1')): stack option
# skip_jax_precompile
SKIP_PRECOMPILE = "SKIP_JAX_PRECOMPILE"
SKIP_PRECOMPILE_SOURCE = (
    "vllm-project/tpu-inference@56b1e079 tpu_inference/runner/compilation_manager.py CompilationManager.capture_model "
    "(if envs.SKIP_JAX_PRECOMPILE or enforce_eager: return) and worker/tpu_worker.py initialize_from_config (the "
    "sampling precompiles skipped alike); examples/offline_inference.py __main__ (os.environ.setdefault("
    "'SKIP_JAX_PRECOMPILE', '1'), @0998d381 and @56b1e079)"
)
# the K3 bring-up branches' per-host filtered checkpoint read (envs.py env_bool, default False; from 986c8ab85 / c140117b4,
# "Per-host sharded expert streaming for compressed-tensors MXFP4 MoE loads", at a33687184, 6bedf39e5, 6a1cb1cca and
# 1313a4b53 the same sharded_stream.py and mxfp4.py): models/common/model_loader.py _get_nnx_model calls
# models/jax/utils/sharded_stream.py maybe_load_with_sharded_expert_streaming, which drops from the Run:ai streamer's
# byte ranges every routed-expert tensor no device of this host keeps; the tensors it keeps are staged on the host
# (layers/jax/quantization/mxfp4.py CompressedTensorsMxfp4MoEMethod.load_weights: jax_array_from_reshaped_torch under
# cpu_mesh_context, the staging params on cpu_mesh()) and decoded by the same _decode_sharded the full read uses, one
# device shard at a time into the same edf / efd sharding (make_array_from_single_device_arrays), so every device holds
# the bytes it holds without it. Host memory and load time only; listed. Where it does not apply it logs why and takes
# the stock full read (not the Run:ai loader, its distributed mode, MXFP4_SHARD_THEN_DECODE=0, no MXFP4 MoE layer)
SHARDED_EXPERT_STREAMING = "K3_SHARDED_EXPERT_STREAMING"
SHARDED_STREAMING_SOURCE = (
    "vllm-project/tpu-inference@a33687184 tpu_inference/models/jax/utils/sharded_stream.py "
    "maybe_load_with_sharded_expert_streaming / sharded_expert_weights_iterator (the checkpoint read filtered by the "
    "host's expert ids) and layers/jax/quantization/mxfp4.py CompressedTensorsMxfp4MoEMethod.load_weights (staged on "
    "cpu_mesh) / process_weights_after_loading -> _decode_sharded (the same device shards either way); the same files "
    "at 6bedf39e5, 6a1cb1cca and 1313a4b53"
)
KNOWN_ENV = frozenset(
    {BACKEND_TYPE, MLA_DISABLE, PROFILING_DIR, UNFUSED_MEGABLOCKS, UNSAFE_NO_DP_ATTENTION, NO_REQUANT, SKIP_PRECOMPILE}
)
KNOWN_ENV |= LISTED_ENV | {SHARDED_EXPERT_STREAMING}
PRICED_ENV = frozenset(
    {MODEL_IMPL, REQUANT_DTYPE, REQUANT_BLOCK, NEW_MODEL_DESIGN, MLA_DISABLE, BACKEND_TYPE, NO_REQUANT, SKIP_PRECOMPILE}
)
PRICED_ENV |= {PROFILING_DIR, UNFUSED_MEGABLOCKS, SHARDED_EXPERT_STREAMING} | LISTED_ENV
# the fp8 checkpoints whose experts the fp4 requantization is priced for (fp8_block experts: the runtime format
# stack option moe_requantize_weight_dtype=fp4 maps), by the ids k3plan.engines.serve.HF_MODELS reads as deepseek-v3
FP8_EXPERT_MODELS = frozenset(
    {"deepseek-v3", "deepseek-ai/deepseek-r1", "deepseek-ai/deepseek-r1-0528", "deepseek-ai/deepseek-v3"}
    | {"deepseek-ai/deepseek-v3-0324"}
)
# the int4 group-32 checkpoints (compressed-tensors pack-quantized, Kimi-K2.6 / K2.5 / K2-Thinking) whose experts it
# is priced for as well: VllmCompressedTensorsW4A8MoEMethod (compressed_tensors_moe_w4a8.py, num_bits 4) unpacks the
# int4 codes and requantizes them through the same process_quantized_moe_weights (stack.yaml's fp4 choice, expert@int4_g32),
# by the ids engines.serve.model_of resolves to those bundles (models/bundled/*/provenance.json)
INT4_EXPERT_MODELS = frozenset(
    {"kimi-k2.6", "kimi-k2-thinking", "moonshotai/kimi-k2.6", "moonshotai/kimi-k2.5", "moonshotai/kimi-k2-thinking"}
)
# the dense-MLA checkpoints whose --block-size is read: the platform keeps a user's block (TpuPlatform.
# check_and_update_config sets PallasMLAttentionBackend.get_page_size only when not cache_config.
# user_specified_block_size) and the MLA v2 kernel pages it as (pages, block // kv_packing, kv_packing,
# align_to(kv_dim, 128)) (kernels/mla/v2/kernel.py get_kv_cache_shape; KVCacheManager.get_kv_cache_spec), so a page
# costs block x the same bytes a token as at the 1,024-token default (BLOCK_SOURCE); the hybrid KDA models' pages
# (install_hybrid_page_size_padding) and DeepSeek-V4's were not read for a given block, so it is refused there
DENSE_MLA_MODELS = FP8_EXPERT_MODELS | INT4_EXPERT_MODELS
BLOCK_SOURCE = (
    f"{SOURCE} tpu_inference/platforms/tpu_platform.py TpuPlatform.check_and_update_config (the MLA page only 'if "
    "cache_config and not cache_config.user_specified_block_size'), kernels/mla/v2/kernel.py get_kv_cache_shape"
)
# DeepSeek-V4's fp4 experts, requantized to fp4 in 512-blocks on vLLM's model code whatever MOE_REQUANTIZE_* say
# (deepseek_v4_fp8.py VllmDeepseekV4Fp8Config -> mxfp4.py VllmMxfp4MoEMethod, MXFP4_REQUANTIZED_BLOCK_SIZE; stack.yaml
# model_impl=vllm): the variables change nothing there; its nightly MMLU run sets them (.buildkite/pipeline_jax.yml
# "E2E MMLU for DeepSeek-V4-Flash torchax backend")
DSV4_EXPERT_MODELS = frozenset(
    {"deepseek-v4-flash", "deepseek-v4-flash-0731", "deepseek-v4-pro", "deepseek-ai/deepseek-v4-flash"}
    | {"deepseek-ai/deepseek-v4-flash-0731"}
    | {"deepseek-v4-pro-0813", "deepseek-ai/deepseek-v4-pro", "deepseek-ai/deepseek-v4-pro-0813"}
)
# MODEL_IMPL_TYPE's values (envs.py env_with_choices: auto, vllm, flax_nnx, jetpack); the second, vLLM's model code, is
# the one priced
IMPLS = tuple("auto vllm flax_nnx jetpack".split())
VLLM_CODE = IMPLS[1]
JAX_IMPLS = frozenset({"auto", "flax_nnx"})
# the architectures tpu-inference's JAX kimi_k3.py serves, the stack's own model (stack.yaml option model_impl,
# default flax_nnx): model_loader.py _get_model_architecture at 811f8e20 (the K3 branch) registers
# KimiLinearForCausalLM and KimiK3ForConditionalGeneration from models/jax/kimi_k3.py; neither is among
# _VLLM_PREFERRED_ARCHITECTURES, so MODEL_IMPL_TYPE auto resolves to it as well
KIMI_SOURCE = "vllm-project/tpu-inference@811f8e20 tpu_inference/models/jax/kimi_k3.py"
JAX_KIMI_ARCHS = frozenset({"KimiLinearForCausalLM", "KimiK3ForConditionalGeneration"})
# the JAX DeepSeek-V3 / R1 model MODEL_IMPL_TYPE flax_nnx (and auto: DeepseekV3ForCausalLM is not among
# _VLLM_PREFERRED_ARCHITECTURES) runs for them, read at b8692ff0 where the mesh is tensor_parallelism 1 x
# expert_parallelism = the devices. There it holds what vLLM's model code holds a device, tensor for tensor:
# - DeepSeekV3.__init__: use_ep = num_expert_parallelism (ATTN_DATA_EXPERT, every device) > 1 and tp_size x
#   attn_dp_size == 1, so layers/jax/moe/utils.py select_moe_backend gives GMM_EP; layers/jax/quantization/fp8.py
#   Fp8FusedMoEMethod.process_weights_after_loading hands the fp8 experts to the same
#   layers/common/process_weights/moe_weights.py process_quantized_moe_weights as VllmFp8MoEMethod (the
#   MOE_REQUANTIZE_* requantization; GMM_EP: _get_moe_weight_shardings P(ShardingAxisName.EXPERT), every device);
# - Fp8BlockwiseLinearMethod.process_weights_after_loading calls the same layers/common/quantization/fp8.py
#   process_blockwise_fp8_linear_weights as VllmFp8LinearMethod, with the same QuantLinearConfig defaults
#   (REQUANTIZE_WEIGHT_DTYPE float8_e4m3fn, REQUANTIZE_BLOCK_SIZE unset: fp8 with one f32 scale an output column,
#   in both paths); the projections over ATTN_HEAD (1 way here: whole), embed_tokens (MLP_TENSOR,) and lm_head
#   (None, MLP_TENSOR) bf16 over every device, the router bf16 (quant_config=None) with its f32 bias, replicated;
# - DeepseekV3MLA's MLAEinsum.load_weights splits kv_b_proj into k_up_proj / v_up_proj, fp8 with f32 scales
#   [N, 1, kv_lora] and [N, 1, v_head], and deletes it: the bytes of layers/vllm/custom_ops/mla_attention.py
#   VllmMLAAttention.process_weights_after_loading's W_UK_T / W_UV (fp8 KV: quantize_tensor(axis=1), scales
#   [N, kv_lora] and [N, v_head]), kv_b_proj deleted there too;
# - the KV cache: kv_cache_manager.py get_kv_cache_spec's JAX branch (no static_forward_context) gives each of
#   get_num_layers' 61 layers the spec the torchax branch gives each MLAAttention (mla_head_size = kv_lora 512 and
#   rope 64 each padded to 128), at the 1,024-token page TpuPlatform sets for MLA, read by the same
#   layers/common/attention_interface.py mla_attention that layers/vllm/backends/flash_attn_mla.py calls; the MTP
#   layer is skipped (load_weights' skip_substrs), as k3plan excludes it.
# Held beyond it, unpriced (no logged figure moves with it: session-48 rule, a term enters only where a logged case
# does): layers/jax/rope.py DeepseekScalingRotaryEmbedding.initialize_cache's sin_cos_cache, f32
# [original_max_position_embeddings x factor, qk_rope_head_dim padded to 128], created by a jit under
# model_loader.py _get_nnx_model's jax.set_mesh: replicated on every device (ROPE_SOURCE, named in a caveat)
JAX_DEEPSEEK = f"{SOURCE} tpu_inference/models/jax/deepseek_v3.py DeepseekV3ForCausalLM"
JAX_DEEPSEEK_ARCH = "DeepseekV3ForCausalLM"
JAX_DEEPSEEK_SOURCE = (
    f"{JAX_DEEPSEEK} (DeepSeekV3.__init__: use_ep -> select_moe_backend GMM_EP; MLAEinsum.load_weights: kv_b_proj "
    "split into fp8 k_up_proj / v_up_proj), layers/jax/quantization/fp8.py Fp8FusedMoEMethod / "
    "Fp8BlockwiseLinearMethod.process_weights_after_loading (process_quantized_moe_weights, "
    "process_blockwise_fp8_linear_weights: vLLM's model code's functions), runner/kv_cache_manager.py "
    "get_kv_cache_spec (the JAX branch: mla_head_size 640 a layer)"
)
ROPE_SOURCE = (
    f"{SOURCE} tpu_inference/layers/jax/rope.py DeepseekScalingRotaryEmbedding.initialize_cache / _compute_sin_cos "
    "(f32, original_max_position_embeddings x scaling_factor rows, rotary_dim padded to a multiple of 128), "
    "replicated under models/common/model_loader.py _get_nnx_model's jax.set_mesh(mesh)"
)
# the lane width the JAX RoPE table is padded to (_compute_sin_cos: target_dim = ((H - 1) // 128 + 1) * 128) and its
# f32 bytes an element
ROPE_LANES = 128
ROPE_ITEM = 4
# the JAX registry at b8692ff0 (model_loader.py _get_model_architecture's _MODEL_REGISTRY): an architecture outside it
# raises UnsupportedArchitectureError, which get_model's flax_nnx case catches ("Falling back to vLLM-native Pytorch
# definition") and answers with get_vllm_model, vLLM's model code as under MODEL_IMPL_TYPE=vllm (DeepSeek-V4,
# Kimi-K2.5 / K2.6 among k3plan's checkpoints); 'auto' resolves to vllm for _VLLM_PREFERRED_ARCHITECTURES first
JAX_REGISTERED = frozenset(
    {"Llama4ForCausalLM", "DeepseekV3ForCausalLM", "LlamaForCausalLM", "Llama4ForConditionalGeneration"}
    | {"Qwen3ForCausalLM", "Qwen2_5_VLForConditionalGeneration", "Eagle3LlamaForCausalLM", "GptOssForCausalLM"}
    | {"Qwen2ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4MTPModel"}
    | {"DFlashForCausalLM", "DFlashDraftModel"}
)
VLLM_PREFERRED = frozenset(
    {"GptOssForCausalLM", "Qwen3MoeForCausalLM", "KimiK25ForConditionalGeneration"}
    | {"Qwen3_5MoeForConditionalGeneration"}
)
FALLBACK_SOURCE = (
    f"{SOURCE} tpu_inference/models/common/model_loader.py get_model (flax_nnx: UnsupportedArchitectureError -> "
    "get_vllm_model) and resolve_model_architecture (auto: vllm for _VLLM_PREFERRED_ARCHITECTURES)"
)


# A TPU vllm serve without a "sharding" key names no platform plugin: k3plan reads it as torchtpu-vllm's (routes
# below), though tpu-inference runs such a command too; tpu-inference's own offline script routes here. Before its
# MLA check (#2222, 6a488560, 2026-04-13, first in v0.19.0; not in v0.18.0, whose TpuPlatform.check_and_update_config
# has none) tpu-inference runs an MLA model without NEW_MODEL_DESIGN on its 2-D mesh: the axis names are
# ShardingAxisName2D's (layers/common/sharding.py LazyShardingAxisName._initialize), the mesh 'data' 1 x 'model' =
# --tensor-parallel-size ("Init mesh | mesh=Mesh('data': 1, 'model': 8)"), vLLM's model code tensor-parallel over
# 'model', the MLA cache's pages over MLP_TENSOR = 'model' (runner/kv_cache.py create_kv_caches), each expert's width
# over MLP_TENSOR = 'model' (GMM_TP: "[MoE]: Using GMM TP kernel"). Its developers' Kimi-K2.5 run (nohup.out @f5f1d337,
# tests/engines/cases/tpu-inference-kimi-k2.5-v7x8-tp8-1k-offline) ran so; fit --serve prices it under
# --engine-version below 0.19.0 (stack option new_model_design=0, _mesh_2d)
UNROUTED_NOTE = (
    "(a TPU vllm serve without --additional-config sharding is read as torchtpu-vllm's, nothing in it naming the "
    "platform plugin; tpu-inference before its MLA check (#2222, first in v0.19.0) runs it on its 2D mesh, 'data' 1 x "
    "'model' = --tensor-parallel-size: vLLM's attention tensor-parallel, the MLA cache's pages and each expert's "
    "width over 'model' (vllm-project/tpu-inference@f5f1d337 tpu_inference/layers/common/sharding.py "
    "ShardingAxisName2D, runner/kv_cache.py create_kv_caches), which k3plan prices for tpu-inference's own "
    "examples/offline_inference.py under --engine-version below 0.19.0)"
)
# the MLA check's first release: from it an MLA model runs only under NEW_MODEL_DESIGN=1 and DP attention; on main
# from #2222 (6a488560, after v0.18.0's cut)
MLA_CHECK_FROM = (0, 19, 0)
MLA_CHECK = Gate(MLA_CHECK_FROM, "6a488560")
MLA_CHECK_SOURCE = (
    "vllm-project/tpu-inference@6a488560 (#2222, '[MLA][DP] Enforce DP/NEW_MODEL_DESIGN is used for MLA models', "
    "2026-04-13; tags v0.19.0 on, not v0.18.0) tpu_inference/platforms/tpu_platform.py TpuPlatform."
    "check_and_update_config"
)
# the stack option that lays an MLA model out on the 2-D mesh (stack.yaml options new_model_design, choice "0")
MESH_OPTION = "new_model_design"
MESH_2D = "0"
MESH_2D_SOURCE = (
    "vllm-project/tpu-inference@f5f1d337 (Jacob Platin's Kimi-K2.5 branch of main 2026-04-03, c525ad0e; the same "
    "files at v0.18.0 but for the absorbed copies' scale sharding and the padded MLA head) tpu_inference/layers/"
    "common/sharding.py ShardingAxisName2D (ATTN_HEAD = MLP_TENSOR = 'model', VOCAB = ('data', 'model')) and "
    "LazyShardingAxisName._initialize (NEW_MODEL_DESIGN unset); layers/vllm/quantization/configs.py "
    "VllmQuantLinearConfig (RowParallelLinear P(None, ATTN_HEAD), ColumnParallelLinear incl. Merged / QKV "
    "P(ATTN_HEAD, None), ReplicatedLinear P(None, None)); layers/vllm/quantization/unquantized.py "
    "VllmUnquantizedEmbeddingMethod (P(MLP_TENSOR, None)); layers/vllm/custom_ops/mla_attention.py "
    "VllmMLAAttention.process_weights_after_loading (W_UK_T / W_UV P(ATTN_HEAD), scales P(None, ATTN_HEAD)); "
    "layers/common/process_weights/moe_weights.py process_moe_weights / shard_moe_weights (GMM_TP: the experts' "
    "width over MLP_TENSOR, scales float32); layers/vllm/process_weights/cleanup_sharding.py shard_model_to_tpu "
    "(the rest replicated); runner/kv_cache.py create_kv_caches (an MLA cache P(MLP_TENSOR): pages over 'model')"
)
# the int4 group-32 experts on the 2-D mesh: the branch's VllmCompressedTensorsW4A16MoEMethod (W4A16: num_bits 4,
# no input quantization) unpacks the int4 codes and hands them with the checkpoint's group-32 scales to
# process_moe_weights (scales astype float32), no requantization, no MOE_REQUANTIZE_* read: "w13_weight_scale_w1
# shape after padding: (384, 224, 1, 2048)" in its log. Release 0.18.0's VllmCompressedTensorsMoEMethod takes
# W8A8 fp8 only (RuntimeError: Unsupported FusedMoe scheme) and its KVCacheManager reads kv_lora_rank off the
# multimodal config's top level: the branch is what runs these checkpoints there
W4A16_SOURCE = (
    "vllm-project/tpu-inference@f5f1d337 tpu_inference/layers/vllm/quantization/compressed_tensors/"
    "compressed_tensors_moe.py VllmCompressedTensorsW4A16MoEMethod (VllmCompressedTensorsW4A8Fp8MoEMethod."
    "process_weights_after_loading: int4 codes and group scales to process_moe_weights, astype float32; GMM_TP)"
)


def routes(r: Reading) -> bool:
    """Whether this ``vllm serve`` is tpu-inference's: on a TPU, with a "sharding" key in --additional-config
    (malformed JSON there is refused in one line, as vLLM's parser refuses it)."""
    extra = r.flags.get(ADDITIONAL)
    if r.platform == "tpu" and r.llm_class == OFFLINE:  # tpu-inference's own script (llm_class.py OFFLINE_SOURCE)
        return True
    return r.platform == "tpu" and extra is not None and "sharding" in json_object(ADDITIONAL, extra)


def _additional(r: Reading) -> int:
    """--additional-config: the sharding strategy (enable_dp_attention, tensor_parallelism and expert_parallelism
    read: the mesh, returned as the ways its ATTN_DATA_EXPERT axes split; other keys refused), the compile sizes,
    the sparse matmul and replicate_attn_weights (no memory effect); any other key refused."""
    raw = r.get(ADDITIONAL)
    if raw is None:  # tpu-inference's offline script without a sharding strategy (routes), at 0.19.0 on
        release = f" at {named(r.release, r.commit)}" if r.release is not None else ""
        raise K3PlanError(
            f"--serve: tpu-inference{release} without --additional-config sharding_strategy enable_dp_attention and "
            f"NEW_MODEL_DESIGN=1: from v0.19.0 it refuses an MLA model so ({MLA_CHECK_SOURCE}); before it (fit "
            "--engine-version 0.18.0) it runs the 2-D mesh, which k3plan prices on vLLM's model code "
            f"(MODEL_IMPL_TYPE=vllm) for the int4 Kimi checkpoints ({MESH_2D_SOURCE.split(' tpu_inference/')[0]})"
        )
    extra = json_object(ADDITIONAL, raw)
    for key in sorted(extra):
        if key in ADDITIONAL_IGNORED:
            r.ignored.append(f"{ADDITIONAL} {key}")
        elif key == CONTINUE_DECODE and not extra[key]:  # off: the stock path (CONTINUE_DECODE_SOURCE)
            r.ignored.append(f"{ADDITIONAL} {key}={json.dumps(extra[key])}")
        elif key == CONTINUE_DECODE:  # on: priced where the loop was compiled (_continue_decode, after the model)
            r.options[CONTINUE_DECODE_OPTION] = "1"
        elif key in ADDITIONAL_UNPRICED:
            raise K3PlanError(
                f"--serve: {ADDITIONAL} {key!r}: {ADDITIONAL_UNPRICED[key]} is not priced by k3plan; remove it to "
                "price tpu-inference without it"
            )
        elif key != "sharding":
            raise K3PlanError(
                f"--serve: {ADDITIONAL} {key!r}: a key of tpu-inference's additional_config k3plan does not read; "
                "remove it"
            )
    if "sharding" not in extra:  # tpu-inference's offline script with other keys only (routes)
        raise K3PlanError(
            f"--serve: tpu-inference's offline script with {ADDITIONAL} but no sharding key: k3plan reads its "
            "sharding_strategy (DP attention) or, before 0.19.0, no --additional-config at all (the 2-D mesh); give "
            "one of them"
        )
    sharding = extra["sharding"]
    if not isinstance(sharding, dict) or set(sharding) - {"sharding_strategy"}:
        raise K3PlanError(
            f"--serve: {ADDITIONAL} sharding {sharding!r}: k3plan reads its sharding_strategy only "
            "(tpu_inference/layers/common/sharding.py ShardingConfigManager.from_vllm_config)"
        )
    strategy = sharding.get("sharding_strategy", {})
    if not isinstance(strategy, dict):
        raise K3PlanError(f"--serve: {ADDITIONAL} sharding_strategy {strategy!r}: expected a JSON object")
    same_tp = strategy.get(STRATEGY_TP)
    whole = isinstance(same_tp, int) and not isinstance(same_tp, bool)
    if STRATEGY_TP in strategy and (same_tp is None or (whole and same_tp in (0, r.tp))):
        r.ignored.append(f"{ADDITIONAL} sharding_strategy {STRATEGY_TP}={same_tp}")
        strategy = {k: v for k, v in strategy.items() if k != STRATEGY_TP}
    unread = sorted(set(strategy) - STRATEGY_READ)
    if unread:
        raise K3PlanError(
            f"--serve: {ADDITIONAL} sharding_strategy {unread[0]!r}: k3plan reads enable_dp_attention, "
            f"tensor_parallelism and expert_parallelism; the mesh {unread[0]} sets "
            "(ShardingConfigManager.from_vllm_config) is not priced"
        )
    dp_attention = strategy.get("enable_dp_attention") is True
    if dp_attention and env_on(r.env.get(NEW_MODEL_DESIGN, "0")):
        return _expert_axis(r, strategy)
    if env_on(r.env.get(NEW_MODEL_DESIGN, "0")) and r.env.get(UNSAFE_NO_DP_ATTENTION) == "1":
        # the K3 bring-up branches' escape hatch: the check warns and the engine runs without DP attention
        return _no_dp_mesh(r, strategy)
    # the engine's own refusal, before any weight loads (every model k3plan bundles is MLA)
    raise K3PlanError(
        "--serve: tpu-inference refuses an MLA model without NEW_MODEL_DESIGN=1 and sharding_strategy "
        "enable_dp_attention true (ValueError: MLA models require both the NEW_MODEL_DESIGN=1 environment "
        f"variable to be set and DP attention; {SOURCE} tpu_inference/platforms/tpu_platform.py "
        "TpuPlatform.check_and_update_config)"
    )
    return _expert_axis(r, strategy)


def _mesh_2d(r: Reading) -> bool:
    """Whether tpu-inference runs this command on its 2-D mesh (MESH_2D_SOURCE): no --additional-config, NEW_MODEL_DESIGN
    unset, at a release before the MLA check (MLA_CHECK_FROM; fit --engine-version). NEW_MODEL_DESIGN=1 there without a
    sharding strategy (the base mesh without DP attention) is refused, not read."""
    if r.flags.get(ADDITIONAL) is not None or holds(MLA_CHECK, r.release, r.commit) is not False:
        return False
    design = r.env.get(NEW_MODEL_DESIGN)
    if design is not None and env_on(design):
        raise K3PlanError(
            f"--serve: {NEW_MODEL_DESIGN}={design} without --additional-config sharding_strategy at tpu-inference "
            f"{named(r.release, r.commit)}: the base mesh (data, attn_dp, attn_dp_expert, expert, model) without DP "
            "attention was not read; k3plan reads that release's 2-D mesh (NEW_MODEL_DESIGN unset) or DP attention"
        )
    return True


def _config_field(r: Reading, name: str) -> int:
    """A field of the served checkpoint's language-model config (text_config where it nests one), 0 where absent."""
    from k3plan.models.loader import read_config, resolve_config_path

    model = r.model or ""
    cfg = read_config(resolve_config_path(r.resolve(model) if r.resolve is not None else model)[1])
    return int((cfg.get("text_config") or cfg).get(name) or 0)


# GMM_TP pads each device's share of an expert's width up to a multiple of 128 (moe_weights.py get_w13_padding_config
# align=128, at f5f1d337), which k3plan does not price
GMM_TP_ALIGN = 128


def _mesh_2d_layout(r: Reading) -> None:
    """The 2-D mesh's layout (stack option new_model_design=0): read for vLLM's model code on the int4 group-32 Kimi
    checkpoints (the experts as the branch's W4A16 method holds them: int4 codes, float32 group-32 scales), refusing
    the rest; the option set last, after model_impl's (whose DP-attention reading caps tp at 1)."""
    model = (r.model or "").strip().rstrip("/").lower()
    if r.options.get("model_impl") != VLLM_CODE:
        raise K3PlanError(
            f"--serve: tpu-inference's 2-D mesh (no sharding_strategy, before {MLA_CHECK_SOURCE.split(' (')[0]}'s "
            f"MLA check) on {MODEL_IMPL}={r.env.get(MODEL_IMPL, 'auto')}: its JAX models' layout there was not read; "
            f"k3plan prices vLLM's model code ({MODEL_IMPL}=vllm) on it"
        )
    if model not in INT4_EXPERT_MODELS:
        raise K3PlanError(
            f"--serve: tpu-inference's 2-D mesh on {r.model}: read for the int4 group-32 Kimi checkpoints (Kimi-K2.5 / "
            f"K2.6 / K2-Thinking: {W4A16_SOURCE}) only; price it under DP attention (NEW_MODEL_DESIGN=1, "
            "sharding_strategy enable_dp_attention true) at 0.19.0 on"
        )
    for var in (REQUANT_DTYPE, REQUANT_BLOCK):
        if r.env.get(var, "").strip():
            raise K3PlanError(
                f"--serve: {var} on tpu-inference's 2-D mesh: the int4 experts' W4A16 method there reads no "
                f"MOE_REQUANTIZE_* variable ({W4A16_SOURCE}); remove it"
            )
    width = _config_field(r, "moe_intermediate_size")
    if not r.expert_parallel and width and (width % r.tp or (width // r.tp) % GMM_TP_ALIGN):
        raise K3PlanError(
            f"--serve: --tensor-parallel-size {r.tp} on tpu-inference's 2-D mesh: GMM_TP splits each expert's "
            f"{width}-wide FFN over 'model' and pads a device's share to a multiple of {GMM_TP_ALIGN} "
            "(layers/common/process_weights/moe_weights.py get_w13_padding_config, @f5f1d337), which k3plan does not "
            "price; give a size that leaves a multiple of 128 a device"
        )
    r.options["disable_weight_requantization"] = "1"  # int4 codes, float32 group-32 scales (W4A16_SOURCE)
    r.options[MESH_OPTION] = MESH_2D  # after model_impl=vllm: this choice's splits replace its tp <= 1
    r.env_read.add(NEW_MODEL_DESIGN)
    release = named(r.release, r.commit)
    r.caveats.append(
        f"tpu-inference {release}, before its MLA check ({MLA_CHECK_SOURCE}): no sharding_strategy and "
        f"{NEW_MODEL_DESIGN} unset run the 2-D mesh 'data' 1 x 'model' {r.tp}: vLLM's attention, dense MLP and shared "
        "experts tensor-parallel over 'model', the embedding and LM head over it, each routed expert's width over it "
        f"({'GMM_EP: whole experts' if r.expert_parallel else 'GMM_TP'}), the router, the norms and a vision tower "
        f"replicated; the MLA cache's pages split over 'model', vLLM counting its blocks in whole pages over the "
        f"devices' summed HBM ({MESH_2D_SOURCE}); the int4 experts kept as int4 codes with float32 group-32 scales "
        f"({W4A16_SOURCE}: release {release} itself has no int4 MoE method and refuses these checkpoints)"
    )
    if r.options.get("skip_jax_precompile") != "1":
        r.caveats.append(
            "the step tpu-inference compiles at start (capture_model) on the 2-D mesh was not compiled by k3plan: its "
            "temporaries are not counted (memory.py reads vLLM's model code's step under DP attention only)"
        )


def _no_dp_mesh(r: Reading, strategy: dict[str, object]) -> int:
    """The mesh from_vllm_config builds without DP attention (NO_DP_MESH_SOURCE): 'model' = tensor_parallelism x
    'expert' = expert_parallelism, attn_dp = attn_dp_expert = 1; it must hold the --tensor-parallel-size devices.
    Sets the stack option that lays K3 out on it (NO_DP_LAYOUT) and returns the expert axis."""
    model, expert = _degrees(r, strategy)
    if model * expert != r.tp:
        raise K3PlanError(
            f"--serve: {UNSAFE_NO_DP_ATTENTION}=1 with {ADDITIONAL} sharding_strategy {STRATEGY_TP} {model} x "
            f"{STRATEGY_EP} {expert}: tpu-inference's mesh without DP attention is 'model' {model} x 'expert' "
            f"{expert} = {model * expert} devices, not the {r.tp} of --tensor-parallel-size ({NO_DP_MESH_SOURCE}); "
            "k3plan reads a mesh over every device"
        )
    replicated = holds(KDA_HEAD_SPLIT, r.release, r.commit) is False
    r.options[NO_DP_OPTION] = NO_DP_KDA_REPLICATED if replicated else "1"
    r.env_read.add(UNSAFE_NO_DP_ATTENTION)
    r.caveats.append(
        f"{UNSAFE_NO_DP_ATTENTION}=1: tpu-inference runs this MLA model without DP attention ({UNSAFE_SOURCE}: the "
        f"check warns), on 'model' {model} x 'expert' {expert}: {NO_DP_LAYOUT}"
        + (
            f"; at {named(r.release, r.commit)}, before the KDA head split ({KDA_HEAD_SPLIT.commit}), every KDA "
            f"parameter replicated instead ({KDA_REPLICATED_SOURCE}): stack option {NO_DP_OPTION}="
            f"{NO_DP_KDA_REPLICATED}"
            if replicated
            else ""
        )
    )
    return expert


def _degrees(r: Reading, strategy: dict[str, object]) -> tuple[int, int]:
    """sharding_strategy's (tensor_parallelism, expert_parallelism): the first --tensor-parallel-size where unset, the
    second 1; the two mesh axes from_vllm_config builds (under DP attention attn_dp x attn_dp_expert, without it
    'model' x 'expert')."""
    first = _count(STRATEGY_TP, strategy[STRATEGY_TP]) if STRATEGY_TP in strategy else r.tp
    return first, _count(STRATEGY_EP, strategy.get(STRATEGY_EP, 1))


def _count(key: str, value: object) -> int:
    """A sharding_strategy degree: a whole number of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise K3PlanError(f"--serve: {ADDITIONAL} sharding_strategy {key} {value!r}: expected a whole number >= 1")
    return value


def _expert_axis(r: Reading, strategy: dict[str, object]) -> int:
    """The mesh from_vllm_config builds under DP attention for an MLA model (MESH_SOURCE): attn_dp x attn_dp_expert,
    the 'model' axis 1; it must hold the --tensor-parallel-size devices. Returns attn_dp_expert, the ways
    ATTN_DATA_EXPERT (kimi_k3.py's routed experts) is split."""
    tp, attn_dp_expert = _degrees(r, strategy)
    if tp * attn_dp_expert != r.tp:
        raise K3PlanError(
            f"--serve: {ADDITIONAL} sharding_strategy {STRATEGY_TP} {tp} x {STRATEGY_EP} {attn_dp_expert}: "
            f"tpu-inference's DP-attention mesh for an MLA model is attn_dp {tp} x attn_dp_expert {attn_dp_expert} = "
            f"{tp * attn_dp_expert} devices, not the {r.tp} of --tensor-parallel-size ({MESH_SOURCE}; "
            "tpu_runner.py TPUModelRunner._create_single_slice_mesh shapes the worker's devices into it); k3plan "
            "reads a mesh over every device"
        )
    return attn_dp_expert


def _architecture(r: Reading) -> str:
    """The served checkpoint's architecture (its bundled config.json's first "architectures" entry)."""
    from k3plan.models.loader import read_config, resolve_config_path

    model = r.model or ""
    bundled = r.resolve(model) if r.resolve is not None else model
    names = read_config(resolve_config_path(bundled)[1]).get("architectures") or [""]
    return str(names[0])


def _jax_kimi(r: Reading, impl: str, expert_ways: int) -> None:
    """MODEL_IMPL_TYPE flax_nnx (or auto) on a checkpoint kimi_k3.py serves: the stack's own model (option model_impl
    at its default), whose routed experts lie over ATTN_DATA_EXPERT only: k3plan's tp 1 needs them over every
    device (sharding_strategy expert_parallelism = --tensor-parallel-size)."""
    dtype = r.env.get(REQUANT_DTYPE, "").strip()
    if dtype:
        raise K3PlanError(
            f"--serve: {REQUANT_DTYPE}={dtype} on tpu-inference's JAX Kimi model ({MODEL_IMPL}={impl}): its "
            "requantization of the experts was not read; k3plan prices the JAX Kimi model's experts in their "
            "checkpoint format"
        )
    r.text_only = True  # KIMI_TEXT_ONLY_SOURCE
    r.caveats.append(f"the vision tower not loaded: {KIMI_TEXT_ONLY_SOURCE}")
    if r.options.get(NO_DP_OPTION) in NO_DP_CHOICES:
        r.env_read.add(MODEL_IMPL)  # the experts over 'expert' x 'model', every device (NO_DP_LAYOUT)
        return
    if expert_ways == 1:
        # the engine's own refusal, raised in KimiLinearForCausalLM.__init__ before any weight loads
        raise K3PlanError(
            f"--serve: tpu-inference's JAX Kimi model refuses this mesh: sharding_strategy {STRATEGY_EP} unset (1) "
            f"puts its routed experts (P(ATTN_DATA_EXPERT, None, MODEL)) on attn_dp_expert 1 x 'model' 1 (ValueError: "
            f"[kimi] the routed experts would be replicated on all {r.dp} devices ...; {KIMI_SOURCE} "
            f"validate_routed_expert_sharding); set {STRATEGY_EP} {r.dp} with {STRATEGY_TP} 1"
        )
    if expert_ways != r.dp:
        raise K3PlanError(
            f"--serve: sharding_strategy {STRATEGY_EP} {expert_ways} on {r.dp} devices: tpu-inference's JAX Kimi "
            f"model splits its routed experts {expert_ways} ways over attn_dp_expert and replicates them over attn_dp "
            f"({KIMI_SOURCE} routed_expert_shardings), a split k3plan's mesh (tp 1: the experts over every device) "
            f"does not express; k3plan reads {STRATEGY_EP} {r.dp} with {STRATEGY_TP} 1"
        )
    r.env_read.add(MODEL_IMPL)  # the stack's model_impl default: nothing to set


def _rope_table_bytes(r: Reading) -> int:
    """The JAX DeepSeek's YaRN RoPE table a device (ROPE_SOURCE), from the served checkpoint's config."""
    from k3plan.models.loader import read_config, resolve_config_path

    model = r.model or ""
    cfg = read_config(resolve_config_path(r.resolve(model) if r.resolve is not None else model)[1])
    scaling = cfg.get("rope_scaling") or {}
    rows = int(scaling.get("original_max_position_embeddings", 0) * scaling.get("factor", 0))
    lanes = -(-int(cfg.get("qk_rope_head_dim", 0)) // ROPE_LANES) * ROPE_LANES
    return rows * lanes * ROPE_ITEM


# vLLM's model code's RoPE table under tpu-inference: the DeepSeek-V2 / V3 MLA attention's get_rope (deepseek_yarn:
# DeepseekScalingRotaryEmbedding over original_max_position_embeddings x factor positions, cos | sin over the rotary
# dim) registers cos_sin_cache as a buffer in torch's default dtype, the model's bf16 under the loader's
# set_default_torch_dtype; get_rope caches one instance for every layer (_ROPE_DICT), and shard_model_to_tpu moves
# the model's buffers (named_buffers, one a tensor) to the TPU replicated on every device, before the worker's
# "Init model" reading and the pool's sizing
VLLM_ROPE_SOURCE = (
    "vllm/model_executor/layers/rotary_embedding/__init__.py get_rope (dtype None -> torch.get_default_dtype(); "
    "_ROPE_DICT: one instance for every layer; deepseek_yarn -> DeepseekScalingRotaryEmbedding(original_max_position, "
    "scaling_factor)), deepseek_scaling_rope.py _compute_cos_sin_cache (arange(max_position_embeddings x "
    "scaling_factor), cat(cos, sin) over rotary_dim), base.py RotaryEmbedding.__init__ (cache.to(dtype) off CUDA, "
    "register_buffer('cos_sin_cache', persistent=False)), model_loader/base_loader.py (set_default_torch_dtype("
    "model_config.dtype)) (the vllm 0.15.1 and 0.21.0 wheels alike); "
    f"{SOURCE.split(' @')[0]}@56b1e079 tpu_inference/layers/vllm/process_weights/cleanup_sharding.py "
    "shard_model_to_tpu (named_parameters and named_buffers not sharded by a layer: _shard_tensor_to_tpu_replicated)"
)
VLLM_ROPE_ITEM = 2  # bf16, the model's dtype (torch_dtype bfloat16 in every bundled DeepSeek-V3-family config)


def _vllm_rope_table(r: Reading) -> tuple[int, str] | None:
    """vLLM's model code's MLA RoPE table a device under tpu-inference (VLLM_ROPE_SOURCE): one bf16 [original
    positions x factor, qk_rope_head_dim] cos_sin_cache, replicated; None where the checkpoint is not a YaRN MLA one
    (not read there)."""
    from k3plan.models.loader import read_config, resolve_config_path

    model = r.model or ""
    cfg = read_config(resolve_config_path(r.resolve(model) if r.resolve is not None else model)[1])
    cfg = cfg.get("text_config") or cfg
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("type", scaling.get("rope_type"))
    if "kv_lora_rank" not in cfg or kind not in ("yarn", "deepseek_yarn"):
        return None
    rows = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    n = rows * int(cfg["qk_rope_head_dim"]) * VLLM_ROPE_ITEM
    return n, f"vLLM's MLA RoPE table, bf16 [{rows:,} x {cfg['qk_rope_head_dim']}] on every device ({VLLM_ROPE_SOURCE})"


def _jax_deepseek(r: Reading, impl: str, expert_ways: int) -> None:
    """MODEL_IMPL_TYPE flax_nnx (or auto) on DeepSeek-V3 / R1: tpu-inference's JAX deepseek_v3.py, priced at
    tensor_parallelism 1 x expert_parallelism = the devices, where it holds what vLLM's model code holds a device
    (JAX_DEEPSEEK_SOURCE): the stack's model_impl default, whose rules price DeepSeek-V3 there as model_impl=vllm
    does. Another mesh (GMM_TP) and another checkpoint are refused."""
    auto = (
        "auto resolves to flax_nnx (model_loader.py resolve_model_architecture: vllm only for "
        "_VLLM_PREFERRED_ARCHITECTURES), "
        if impl == "auto"
        else ""
    )
    model = (r.model or "").strip().rstrip("/").lower()
    if model not in FP8_EXPERT_MODELS:
        raise K3PlanError(
            f"--serve: {MODEL_IMPL}={impl}: {auto}tpu-inference's JAX {JAX_DEEPSEEK_ARCH} ({JAX_DEEPSEEK}) hard-codes "
            "DeepSeek-V3's shapes (its module constants: 256 experts, hidden_size 7168, ...) and was read for "
            f"DeepSeek-V3 / R1's fp8 checkpoints only; {r.model} on it is not priced (MODEL_IMPL_TYPE=vllm is)"
        )
    if expert_ways != r.dp:
        raise K3PlanError(
            f"--serve: {MODEL_IMPL}={impl}: {auto}tpu-inference's JAX {JAX_DEEPSEEK_ARCH} at sharding_strategy "
            f"{STRATEGY_EP} {expert_ways} on {r.dp} devices runs its GMM_TP experts (DeepSeekV3.__init__: use_ep "
            "needs tensor_parallelism 1 with the expert axis over every device; layers/common/process_weights/"
            "moe_weights.py _get_moe_weight_shardings GMM_TP: each expert split by width over MLP_TENSOR, its fp4 "
            "scales split or replicated), a layout k3plan has not priced; it reads "
            f"{STRATEGY_TP} 1 with {STRATEGY_EP} {r.dp} (GMM_EP), or MODEL_IMPL_TYPE=vllm"
        )
    rope = _rope_table_bytes(r)
    r.caveats.append(
        f"{MODEL_IMPL}={impl}: tpu-inference's JAX {JAX_DEEPSEEK_ARCH}, priced as vLLM's model code at this mesh "
        f"(the same tensors a device: {JAX_DEEPSEEK_SOURCE}); not priced: its RoPE table, {rope:,} B "
        f"({fmt_gib(rope)}) on every device ({ROPE_SOURCE})"
    )
    r.env_read.add(MODEL_IMPL)  # the stack's model_impl default: nothing to set


def _continue_decode(r: Reading, expert_ways: int) -> None:
    """enable_continue_decode true (stack option continue_decode=1, CONTINUE_DECODE_SOURCE): its loop's temporaries
    are priced for the JAX Kimi model without DP attention at the point the loop was compiled (memory.py
    LOOP_SOURCE); elsewhere refused in one line. Under SKIP_JAX_PRECOMPILE / --enforce-eager capture_model compiles
    nothing at start, the loop neither."""
    if r.options.get(CONTINUE_DECODE_OPTION) != "1":
        return
    reqs = max(
        r.batch, 8
    )  # tpu_runner.py: max_num_reqs = max(max_num_seqs, MIN_NUM_SEQS 8), the largest request bucket
    compiled = (reqs, expert_ways, _architecture(r)) == (64, 4, "KimiK3ForConditionalGeneration")
    if r.options.get(NO_DP_OPTION) != "1" or not compiled:
        raise K3PlanError(
            f"--serve: {ADDITIONAL} {CONTINUE_DECODE!r}=true: tpu-inference compiles its fused decode loop at start, "
            "after the pool, as one more executable (a while_loop over the whole step, the weights loop-invariant: "
            f"{CONTINUE_DECODE_SOURCE}); k3plan priced its temporaries for Kimi-K3 on the JAX model without DP "
            "attention, 'model' 8 x 'expert' 4, at 64 requests only (the point compiled); remove it (or set it false) "
            "to price tpu-inference without it"
        )
    r.caveats.append(
        f"{ADDITIONAL} {CONTINUE_DECODE}=true: the fused decode loop compiled at start after the backbone "
        f"({CONTINUE_DECODE_SOURCE}), its temporaries checked against what the weights and the pool leave"
    )


def _env(r: Reading, expert_ways: int) -> None:
    """MODEL_IMPL_TYPE (vllm priced; flax_nnx / auto priced for the checkpoints kimi_k3.py serves, the stack's own
    model, and for DeepSeek-V3 / R1 on deepseek_v3.py at tp 1 x ep N), the fp4 requantization (priced at 512-blocks on vLLM's model code),
    VLLM_MLA_DISABLE=0 and TPU_BACKEND_TYPE (no effect)."""
    env = r.env
    impl = env.get(MODEL_IMPL, "auto").strip() or "auto"
    dtype = env.get(REQUANT_DTYPE, "").strip()
    block = env.get(REQUANT_BLOCK, "").strip()
    if impl not in IMPLS:
        raise K3PlanError(
            f"--serve: {MODEL_IMPL}={impl}: not a value tpu-inference takes (envs.py: auto, vllm, flax_nnx, jetpack)"
        )
    arch = _architecture(r) if impl in JAX_IMPLS else ""
    vllm_code = (
        impl in JAX_IMPLS
        and arch not in JAX_KIMI_ARCHS
        and (arch not in JAX_REGISTERED or (impl == "auto" and arch in VLLM_PREFERRED))
    )
    if vllm_code:
        r.caveats.append(
            f"{MODEL_IMPL}={impl}: {arch} runs on vLLM's model code under tpu-inference ({FALLBACK_SOURCE}), "
            f"priced as {MODEL_IMPL}=vllm"
        )
        impl = VLLM_CODE
    if r.options.get(NO_DP_OPTION) in NO_DP_CHOICES and not (impl in JAX_IMPLS and arch in JAX_KIMI_ARCHS):
        raise K3PlanError(
            f"--serve: {UNSAFE_NO_DP_ATTENTION}=1 on {r.model} ({MODEL_IMPL}={impl}): the layout without DP attention "
            "was read for tpu-inference's JAX Kimi model (kimi_k3.py @e65bd14c) only; k3plan prices this checkpoint "
            "under DP attention (sharding_strategy enable_dp_attention true)"
        )
    if impl in JAX_IMPLS and arch in JAX_KIMI_ARCHS:
        _jax_kimi(r, impl, expert_ways)
    elif impl in JAX_IMPLS and arch == JAX_DEEPSEEK_ARCH:
        _jax_deepseek(r, impl, expert_ways)
    elif impl != VLLM_CODE:
        why = (
            f"{'auto resolves to flax_nnx (model_loader.py resolve_model_architecture: vllm only for _VLLM_PREFERRED_ARCHITECTURES), ' if impl == 'auto' else ''}"
            f"tpu-inference's JAX {arch} (model_loader.py _get_model_architecture), a model implementation k3plan "
            "does not model: its tpu-inference rules are kimi_k3.py's (the JAX Kimi-Linear / K3), deepseek_v3.py's "
            "(the JAX DeepSeek-V3 / R1) and vLLM's model code"
            if impl in JAX_IMPLS
            else "tpu-inference's jetpack model path, which k3plan has not read"
        )
        raise K3PlanError(
            f"--serve: {MODEL_IMPL}={impl}: {why}; k3plan prices this checkpoint on tpu-inference with vLLM's model "
            f"code ({MODEL_IMPL}=vllm)"
        )
    else:
        r.options["model_impl"] = VLLM_CODE
        r.model_buffers = _vllm_rope_table(r)
    if dtype:
        if dtype != "fp4":
            raise K3PlanError(
                f"--serve: {REQUANT_DTYPE}={dtype}: k3plan prices tpu-inference's fp4 requantization only (fp4 codes "
                "with a 4-B scale a block)"
            )
        if block != "512":
            raise K3PlanError(
                f"--serve: {REQUANT_BLOCK}={block or 'unset'}: k3plan prices the fp4 requantization in 512-blocks "
                "(unset: one scale a row, tpu_inference/layers/common/process_weights/moe_weights.py "
                "quantize_moe_weights); set 512"
            )
        r.options["moe_requantize_weight_dtype"] = "fp4"
    elif block:
        raise K3PlanError(
            f"--serve: {REQUANT_BLOCK}={block} without {REQUANT_DTYPE}: the experts requantized in their own dtype "
            "at that block were not priced; remove it"
        )
    mla_off = env.get(MLA_DISABLE)
    if mla_off is not None and mla_off.strip() not in ("0", ""):
        raise K3PlanError(
            f"--serve: {MLA_DISABLE}={mla_off}: vLLM without MLA (its attention as plain heads) is not priced; "
            "k3plan prices MLA, vLLM's default (0)"
        )
    megablocks = env.get(UNFUSED_MEGABLOCKS)
    if megablocks is not None and env_on(megablocks):
        raise K3PlanError(
            f"--serve: {UNFUSED_MEGABLOCKS}={megablocks}: the JAX path's MEGABLX_GMM MoE backend "
            f"({SOURCE} tpu_inference/layers/jax/moe/utils.py select_moe_backend) was not read; remove it"
        )
    skip = env.get(SKIP_PRECOMPILE)
    if skip is not None and env_on(skip):
        r.options["skip_jax_precompile"] = "1"
        r.caveats.append(
            f"{SKIP_PRECOMPILE}={skip}: no step is compiled at start ({SKIP_PRECOMPILE_SOURCE}), so the start verdict "
            "holds no compiled step's temporaries; the first batch that reaches a token bucket compiles it then, in "
            "the HBM --gpu-memory-utilization leaves"
        )
    r.env_read |= PRICED_ENV & set(env)
    # NEW_MODEL_DESIGN=1 is read (the MLA models' requirement above), not listed as ignored
    listed = (
        MLA_DISABLE,
        BACKEND_TYPE,
        PROFILING_DIR,
        UNFUSED_MEGABLOCKS,
        SHARDED_EXPERT_STREAMING,
        *sorted(LISTED_ENV),
    )
    r.ignored += [f"{k}={env[k]}" for k in listed if k in env]


# --enforce-eager: vllm serve's ModelConfig.enforce_eager, which tpu-inference's start reads as it reads
# SKIP_JAX_PRECOMPILE since "Support --enforce-eager" (#907, vllm-project/tpu-inference@f7dad5d8, 2025-10-21, an
# ancestor of 0998d381 and 56b1e079): CompilationManager.capture_model returns on either, and TPUWorker skips the
# sampling / logprobs precompiles on either (EAGER_SOURCE): stack option skip_jax_precompile alike
EAGER_SOURCE = (
    "vllm-project/tpu-inference@0998d381 tpu_inference/runner/compilation_manager.py CompilationManager.capture_model "
    "(if envs.SKIP_JAX_PRECOMPILE or self.runner.model_config.enforce_eager: return) and worker/tpu_worker.py "
    "(_precompile_sampling / _precompile_gather_logprobs only if neither); the same at 56b1e079; from f7dad5d8 (#907)"
)


def _enforce_eager(r: Reading, raw: str | None) -> None:
    """--enforce-eager (EAGER_SOURCE): no step compiled at start, as SKIP_JAX_PRECOMPILE=1 (stack option
    skip_jax_precompile); --no-enforce-eager / false: vLLM's default, listed."""
    if raw is None:
        return
    if not env_on(raw):
        r.ignored.append("--enforce-eager false")
        return
    r.options["skip_jax_precompile"] = "1"
    r.caveats.append(
        f"--enforce-eager: no step is compiled at start ({EAGER_SOURCE}), so the start verdict holds no compiled "
        "step's temporaries; the first batch that reaches a token bucket compiles it then, in the HBM "
        "--gpu-memory-utilization leaves"
    )


def _default_chunk(r: Reading, seqs: str | None) -> None:
    """--max-num-batched-tokens unset: vLLM's vllm serve default under tpu-inference (DEFAULT_CHUNK_SOURCE), 2,048
    capped at max_num_seqs x max_model_len; with chunked prefill turned off the cap path differs and is refused."""
    off = r.flags.get("--no-enable-chunked-prefill")
    on = r.flags.get("--enable-chunked-prefill")
    if off is not None and env_on(off) or on is not None and not env_on(on):
        raise K3PlanError(
            "--serve: tpu-inference without --max-num-batched-tokens and with chunked prefill off: vLLM's default "
            "then follows max_model_len (arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args), not read "
            "here; give --max-num-batched-tokens"
        )
    batch = flag_int("--max-num-seqs", str(seqs)) if seqs is not None else DEFAULT_MAX_NUM_SEQS
    chunk = DEFAULT_CHUNK_LLM_CLASS if r.llm_class is not None else DEFAULT_CHUNK_SERVE
    if r.context is not None:
        chunk = min(chunk, batch * r.context)
    r.chunk = chunk
    r.chunk_source = (
        f"vLLM's LLM-class default under tpu-inference ({r.llm_class}: {DEFAULT_CHUNK_SOURCE})"
        if r.llm_class is not None
        else r.chunk_source
    )
    which = f"vLLM's LLM class ({r.llm_class}: UsageContext.LLM_CLASS)" if r.llm_class else "vLLM's vllm serve"
    other = "vllm serve would take 2,048" if r.llm_class else "vLLM's LLM class would take 8,192"
    r.caveats.append(
        f"--max-num-batched-tokens unset: {chunk:,}, {which} default under tpu-inference ({DEFAULT_CHUNK_SOURCE}); "
        f"{other}"
    )


# the releases whose VllmCompressedTensorsW4A8MoEMethod keeps the int4 group-32 experts of a compressed-tensors
# checkpoint unrequantized, their group scales cast to float32, whatever the environment says at 0.20 (and without
# MOE_REQUANTIZE_BLOCK_SIZE at 0.21): main from #2306 (507cfa16, 2026-04-27) to #2659 (443bcc3b, 2026-05-22), which
# routed it through process_quantized_moe_weights (requantized in its own dtype unless DISABLE_WEIGHT_REQUANTIZATION)
INT4_F32_SCALES_FROM = (0, 20, 0)
INT4_F32_SCALES_UNTIL = (0, 22, 0)
INT4_ENV_READ_FROM = (0, 21, 0)  # 0.20.0's W4A8 method reads no MOE_REQUANTIZE_* (0.21.0: the block size)
# the same on main (fit --engine-version <commit>): #2306 (507cfa16) and #2659 (443bcc3b) above; the W4A8 method reads
# MOE_REQUANTIZE_BLOCK_SIZE from #2649 (efec1212, 2026-05-18, main after v0.21.0's cut 4685c888; the v0.21.0 tag
# carries it as the cherry-pick 4486ec9a)
INT4_F32_SCALES = Gate(INT4_F32_SCALES_FROM, "507cfa16")
INT4_F32_SCALES_END = Gate(INT4_F32_SCALES_UNTIL, "443bcc3b")
INT4_ENV_READ = Gate(INT4_ENV_READ_FROM, "efec1212")
INT4_F32_SCALES_SOURCE = (
    "vllm-project/tpu-inference@56b1e079 (main of 2026-04-30; release 0.20.0 alike) tpu_inference/layers/vllm/"
    "quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8.py "
    "VllmCompressedTensorsW4A8MoEMethod.process_weights_after_loading (int4 codes and the checkpoint's group scales "
    "straight to process_moe_weights, no requantization) and layers/common/process_weights/moe_weights.py "
    "process_moe_weights (w13/w2_weight_scale.astype(jnp.float32))"
)


def _int4_scales(r: Reading) -> None:
    """The int4 group-32 experts (INT4_EXPERT_MODELS) on vLLM's model code kept unrequantized with fp32 group scales
    (stack option disable_weight_requantization=1): where the command sets DISABLE_WEIGHT_REQUANTIZATION, and at
    the releases whose W4A8 method does so unconditionally (INT4_F32_SCALES_SOURCE)."""
    raw = r.env.get(NO_REQUANT)
    on = raw is not None and env_on(raw)
    int4 = r.model is not None and r.model.strip().rstrip("/").lower() in INT4_EXPERT_MODELS
    fp4 = r.options.get("moe_requantize_weight_dtype") == "fp4"
    rel = r.release
    unconditional = bool(holds(INT4_F32_SCALES, rel, r.commit) and not holds(INT4_F32_SCALES_END, rel, r.commit))
    if on and not int4:
        raise K3PlanError(
            f"--serve: {NO_REQUANT}={raw} on {r.model}: k3plan prices the unrequantized experts of the int4 "
            "group-32 checkpoints (Kimi-K2.6 / K2.5 / K2-Thinking) only; remove it"
        )
    if on and fp4:
        raise K3PlanError(
            f"--serve: {NO_REQUANT}={raw} with {REQUANT_DTYPE}: tpu-inference asserts the dtype unset when "
            "requantization is disabled (moe_weights.py _process_moe_weights_no_requant); remove one"
        )
    if r.options.get("model_impl") != VLLM_CODE or not int4 or not (on or unconditional):
        return
    if unconditional and fp4 and holds(INT4_ENV_READ, rel, r.commit) is False:
        raise K3PlanError(
            f"--serve: {REQUANT_DTYPE} at tpu-inference {named(rel, r.commit)}: that release's "
            "VllmCompressedTensorsW4A8MoEMethod reads no MOE_REQUANTIZE_* variable and keeps the int4 experts "
            f"({INT4_F32_SCALES_SOURCE}); remove them"
        )
    if fp4:  # 0.21: MOE_REQUANTIZE_BLOCK_SIZE set requantizes (the fp4 option prices it)
        return
    r.options["disable_weight_requantization"] = "1"
    if unconditional and not on and rel is not None:
        r.caveats.append(
            f"tpu-inference {named(rel, r.commit)}: the int4 group-32 experts kept as int4 codes with their "
            f"group-32 scales as float32, no requantization ({INT4_F32_SCALES_SOURCE})"
        )


def _tokens(flag: str, value: str) -> int:
    """A token count as vLLM's human_readable_int reads it (serve_values.suffix_int: 2k = 2,000, 2K = 2,048)."""
    try:
        n = suffix_int(value, flag)
    except ValueError:
        raise K3PlanError(
            f"--serve: {flag} {value!r}: expected a whole number (a binary suffix takes no decimals)"
        ) from None
    return flag_int(flag, value if n is None else str(n))


# vLLM's parser reads an abbreviated flag as the option it stands for (argparse's allow_abbrev: engines/vllm/serve.py
# tokens, OPTIONS), before this reader sees it: tpu-inference's multi-host nightly's --hf-config=X (scripts/multihost/
# nightly_benchmarking.sh @b8692ff0: EXTRA_SERVER_ARGS "--hf-config=${HF_CONFIG}") arrives as --hf-config-path X
# flags whose memory effect k3plan does not model on tpu-inference, refused with what they do
UNPRICED: dict[str, str] = {}
# --hf-overrides: vLLM's ModelConfig.hf_overrides, its flat fields set over the Hugging Face config before the model is
# built (vllm 0.11.2-0.34.0 wheels (PyPI), vllm/config/model.py ModelConfig.__post_init__ hf_overrides_kw,
# vllm/transformers_utils/config.py get_config: config.update(hf_overrides_kw)), which tpu-inference's model builders
# read from vllm_config.model_config.hf_config. tpu-inference's mlperf.sh @b8692ff0 cuts DeepSeek-R1 to 5 decoder
# layers with '{"num_hidden_layers": 5}'. Read for DeepSeek-V3 / R1, whose JAX model takes its layer count from the
# config (tpu_inference/models/jax/deepseek_v3.py @b8692ff0: make_layers(hf_config.num_hidden_layers, ...); its
# load_weights skips the checkpoint's layers from len(self.model.layers) to the MTP layer) and its dense layers from
# the module's own first_k_dense_replace = 3, not the config's: num_hidden_layers alone is priced, on that model alone
HF_OVERRIDES_SOURCE = (
    "vLLM's ModelConfig.hf_overrides -> config.update (vllm/transformers_utils/config.py get_config); "
    f"{SOURCE} tpu_inference/models/jax/deepseek_v3.py make_layers(hf_config.num_hidden_layers)"
)
HF_OVERRIDES_MODELS = ("deepseek-v3",)
HF_OVERRIDES_FIELDS = ("num_hidden_layers",)


def _hf_overrides(r: Reading) -> None:
    """--hf-overrides (``HF_OVERRIDES_SOURCE``): num_hidden_layers priced on the DeepSeek-V3 checkpoints, anything
    else refused in one line."""
    if r.flags.get("--hf-overrides") is None:
        return
    bundled = ""
    if r.resolve is not None and r.model:
        try:
            bundled = r.resolve(r.model)
        except K3PlanError:  # refused by name where parse_serve resolves the model
            bundled = ""
    if bundled and bundled not in HF_OVERRIDES_MODELS:
        raise K3PlanError(
            f"--serve: --hf-overrides on {r.model}: how tpu-inference's model code for it takes the config's fields was "
            f"read for {', '.join(HF_OVERRIDES_MODELS)} only (tpu_inference/models/jax/deepseek_v3.py); remove it"
        )
    read_hf_overrides(
        r, "--hf-overrides", engine="tpu-inference", source=HF_OVERRIDES_SOURCE, allowed=HF_OVERRIDES_FIELDS
    )


def _hf_config(r: Reading, path: str | None) -> None:
    """--hf-config-path: vLLM's "name or path of the Hugging Face config to use" in place of the model's (vllm 0.28.0
    wheel (PyPI) vllm/config/model.py ModelConfig.hf_config_path). Listed where it names the served checkpoint (the
    daily multi-host DeepSeek-R1 run names deepseek-ai/DeepSeek-R1 beside its gs:// copy); another checkpoint's
    config would be another model's shapes: refused."""
    if path is None:
        return
    model = r.model or ""
    same = path.strip().rstrip("/").lower() == model.strip().rstrip("/").lower()
    if not same and r.resolve is not None:
        try:
            same = r.resolve(path) == r.resolve(model)
        except K3PlanError:
            same = False
    if not same:
        raise K3PlanError(
            f"--serve: --hf-config-path {path}: the config of another checkpoint than {r.model}; k3plan prices the "
            "served checkpoint's own config (give it as the model)"
        )
    r.ignored.append(f"--hf-config-path {path}")


def read(r: Reading) -> None:
    """tpu-inference's ``vllm serve``: the model, the split (tp 1 x dp --tensor-parallel-size, experts over every
    device), the context, the chunk and the batch, the memory fraction, the dtypes, the additional config and the
    environment; refusing what it has not read."""
    get = r.get
    r.stack = STACK
    flag_model = get("--model", "")
    r.model = r.model or flag_model
    if not r.model:
        raise K3PlanError("--serve: vllm serve needs a model: 'vllm serve MODEL ...' (or --model MODEL)")
    r.parallel()
    if r.pp != 1 or r.dp != 1:
        which = "--pipeline-parallel-size" if r.pp != 1 else "--data-parallel-size"
        raise K3PlanError(
            f"--serve: {which} on tpu-inference: its 'data' mesh axis and pipeline stages were not read; k3plan reads "
            "the attention DP sharding_strategy makes of --tensor-parallel-size"
        )
    mesh_2d = _mesh_2d(r)
    expert_ways = 1 if mesh_2d else _additional(r)
    devices = r.tp
    r.tp, r.dp, r.ep = 1, devices, devices  # attention tp 1 x dp N, the experts over all N (SPLIT_SOURCE)
    if mesh_2d:
        # ShardingAxisName2D: attention TP over 'model', every device, one DP group; the experts' width over
        # 'model' too, so their bytes split over every device (MESH_2D_SOURCE)
        r.tp, r.dp = devices, 1
    if r.options.get(NO_DP_OPTION) in NO_DP_CHOICES:
        # without DP attention ATTN_HEAD = (model, expert, dcp) spans every device, one DP group (NO_DP_LAYOUT)
        r.tp, r.dp = devices, 1
    # the experts' bytes are over every device either way (SPLIT_SOURCE); the flag picks the MoE backend the step
    # compiles (memory.py GMM_TP_STEP_SOURCE: GMM_EP with it, GMM_TP without)
    ep_flag = get("--enable-expert-parallel", None)
    r.expert_parallel = ep_flag is not None and env_on(ep_flag)
    raw_context = get("--max-model-len", None)
    if raw_context is not None:
        if raw_context.strip().lower() in ("auto", "-1"):
            raise K3PlanError("--serve: --max-model-len auto on tpu-inference: not read; give the length")
        r.context = _tokens("--max-model-len", raw_context)
    chunk, seqs = get("--max-num-batched-tokens", None), get("--max-num-seqs", None)
    if chunk is None:
        _default_chunk(r, seqs)
    else:
        r.chunk = _tokens("--max-num-batched-tokens", str(chunk))
    refuse_unpriced(get, UNPRICED, "tpu-inference")
    override = get("--num-gpu-blocks-override", None)
    if override is not None:
        # vLLM's may_override_num_blocks pins the pool's block count after the memory checks, and tpu-inference's
        # compact KDA-state sizing steps aside for it, leaving vLLM's uniform pages (BLOCKS_OVERRIDE_SOURCE)
        r.blocks_override = flag_int("--num-gpu-blocks-override", str(override))
        r.caveats.append(f"--num-gpu-blocks-override {r.blocks_override:,}: {BLOCKS_OVERRIDE_SOURCE}")
    _hf_overrides(r)
    _hf_config(r, get("--hf-config-path", None))
    # per DP rank: tpu_runner.py TPUModelRunner._init_inputs (max_num_reqs = dp_size x max_num_seqs; the DP
    # scheduler's per-rank limits, core/sched/dp_scheduler.py)
    r.batch = flag_int("--max-num-seqs", str(seqs)) if seqs is not None else DEFAULT_MAX_NUM_SEQS
    r.batch_source = (
        f"--max-num-seqs a DP rank ({SOURCE} tpu_inference/runner/tpu_runner.py TPUModelRunner._init_inputs: "
        f"max_num_reqs = dp_size x max_num_seqs = {r.dp * r.batch:,} in all)"
        if seqs is not None
        else f"vLLM's default of {DEFAULT_MAX_NUM_SEQS} sequences a DP rank under tpu-inference ({DEFAULT_SEQS_SOURCE})"
    )
    r.memory_options()
    if r.moe_backend is not None:
        raise K3PlanError("--serve: --moe-backend on tpu-inference: its MoE backends were not read; remove it")
    r.dtypes()
    r.quantization()
    block_raw = get("--block-size", None)
    if block_raw is not None and r.model.strip().rstrip("/").lower() in DENSE_MLA_MODELS:
        r.block = flag_int("--block-size", str(block_raw))  # the page the pool is counted in (BLOCK_SOURCE)
    elif block_raw is not None:
        raise K3PlanError(
            "--serve: --block-size on tpu-inference: k3plan prices a given page for the dense-MLA checkpoints "
            "(DeepSeek-V3 / R1, Kimi-K2.x) only, and otherwise the 1,024 tokens the platform sets (tpu_platform.py) "
            "when none is given; remove it"
        )
    _env(r, expert_ways)
    _continue_decode(r, expert_ways)
    _enforce_eager(r, get("--enforce-eager", None))
    _int4_scales(r)
    if mesh_2d:
        _mesh_2d_layout(r)
    if r.options.get("moe_requantize_weight_dtype") == "fp4":
        if r.model.strip().rstrip("/").lower() not in FP8_EXPERT_MODELS | INT4_EXPERT_MODELS | DSV4_EXPERT_MODELS:
            raise K3PlanError(
                f"--serve: {REQUANT_DTYPE}=fp4 for {r.model}: k3plan prices the requantization of fp8 block-scaled "
                "experts (DeepSeek-V3 / R1), int4 group-32 experts (Kimi-K2.6 / K2-Thinking) and DeepSeek-V4's fp4 "
                "experts only"
            )
