"""A serve command as input (issue 34): ``vllm serve MODEL ...`` or ``python3 -m sglang.launch_server
--model-path MODEL ...`` read into the question k3plan answers: the model, the split, the workload and the
engine options that change memory. Every flag is read, listed as ignored (it changes nothing k3plan prices),
or refused in one line (a K3PlanError: exit 2) where k3plan cannot honour it."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from k3plan.engines.serve_values import (  # noqa: F401  # read through here too
    CHECKPOINT_KV_SOURCE,
    KV,
    MAX_FLAG_INT,
    QUANT_OK,
    Reading,
    checkpoint_kv_dtype,
    env_on,
    flag_int,
    fp4_storage,
    shown_env,
)
from k3plan.engines.sglang import serve as sglang_serve
from k3plan.engines.vllm import serve as vllm_serve
from k3plan.engines.vllm.serve import human_readable_int  # noqa: F401  # read through here too
from k3plan.errors import K3PlanError

# Hugging Face ids -> bundled models (k3plan/models/bundled), exact ids only: a checkpoint k3plan does not bundle
# (another release of the family, an AWQ / GPTQ / INT4 conversion) is refused by name, never priced as another
HF_MODELS = {
    "moonshotai/kimi-k3": "kimi-k3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-0324": "deepseek-v3",
    "deepseek-ai/deepseek-v4-flash": "deepseek-v4-flash",
    "deepseek-ai/deepseek-v4-pro": "deepseek-v4-pro",
    # deepseek-ai/DeepSeek-V4-Flash-0731 and deepseek-ai/DeepSeek-V4-Pro-0813 are bundled on their own
    # (models/bundled/deepseek-v4-flash-0731, models/bundled/deepseek-v4-pro-0813, resolved through their
    # provenance.json by models.hub.bundled_of): each config.json is the April release's plus the DSpark stages (four
    # dspark_* keys, compress_ratios three entries past the layers; the Pro's also expert_dtype), which SGLang and
    # vLLM read
    # the fp8 (128 x 128 block) DeepseekV3ForCausalLM checkpoints the bundled kimi-k2 config is
    "moonshotai/kimi-k2-instruct": "kimi-k2",
    "moonshotai/kimi-k2-base": "kimi-k2",
    "moonshotai/kimi-k2-instruct-0905": "kimi-k2",
    # moonshotai/Kimi-K2-Thinking (K2's text model with INT4 group-32 routed experts, 262,144 tokens) is not read as
    # kimi-k2 (fp8: 1.7x the bytes) nor as kimi-k2.6 (a vision tower): it resolves, exactly, to its own bundle through
    # models/bundled/kimi-k2-thinking/provenance.json (models.hub.bundled_of), as Kimi-K2.6 does
    # Kimi-K2.5 has Kimi-K2.6's checkpoint layout (KimiK25ForConditionalGeneration, INT4 group-32 experts, the same
    # 64 shards of 595,148,192,736 B: models/bundled/kimi-k2.6/provenance.json); moonshotai/Kimi-K2.6 itself
    # resolves through that provenance.json (models.hub.bundled_of)
    "moonshotai/kimi-k2.5": "kimi-k2.6",
    # AMD's Quark MXFP4 R1 (InferenceX's MI355X MTP arm): layers 0-60 quantized as the bundled Preview's by both model
    # cards, its MTP layer's format not settled -- priced without the draft, which is refused
    # (models/bundled/deepseek-r1-0528-mxfp4/provenance.json); amd/DeepSeek-R1-0528-MXFP4-Preview itself resolves
    # through that provenance.json (models.hub.bundled_of)
    "amd/deepseek-r1-0528-mxfp4": "deepseek-r1-0528-mxfp4",
    "moonshotai/kimi-linear-48b-a3b-instruct": "kimi-linear-48b-a3b",
    "moonshotai/kimi-linear-48b-a3b-base": "kimi-linear-48b-a3b",
}
# names that say the checkpoint is a conversion k3plan cannot price (its bytes are not the bundled checkpoint's)
UNPRICED_MARKS = ("awq", "gptq", "int4", "w4a16", "gguf", "bnb", "nf4", "exl2")

# flags that change nothing k3plan prices (name -> values it takes: 0 a switch, 1 a value): host-side loading,
# parsers, compile buckets, the API server, multi-node wiring, KV transfer
IGNORED = {
    "--trust-remote-code": 0,
    "--enable-ep-weight-filter": 0,  # each rank streams only its experts' bytes: host RAM, not HBM
    "--language-model-only": 0,  # the vision tower is not loaded (without it: engines.vllm.memory adds the tower)
    "--limit-mm-per-prompt": 1,  # read first: the modalities it sets to 0 (ServeQuestion.mm_zero_limits)
    # how vLLM runs a vision encoder over the TP group (the deploy guidance on moonshotai/Kimi-K2.6's model page:
    # its vLLM line passes "data": the tower replicated on every GPU, as engines/vllm/memory.py counts it whole on every device; the default
    # "weights" would shard it over TP: for K2.6 at most 0.88 GiB a device, the tower's whole)
    "--mm-encoder-tp-mode": 1,
    "--model-loader-extra-config": 1,
    "--load-format": 1,
    "--compilation-config": 1,  # on GPUs vLLM's graphs, read (engines/vllm/serve.py -> cudagraph.py); TPU buckets
    "--enable-auto-tool-choice": 0,
    "--tool-call-parser": 1,
    "--reasoning-parser": 1,
    "--async-scheduling": 0,
    "--no-async-scheduling": 0,
    "--host": 1,
    "--port": 1,
    "--served-model-name": 1,
    "--tokenizer": 1,
    "--max-seq-len-to-capture": 1,  # vLLM V0's CUDA-graph capture length (gone in V1): graphs, not the pool
    "--enable-reasoning": 0,  # vLLM < 0.9's switch for --reasoning-parser: output parsing
    "--tokenizer-mode": 1,  # how the host tokenizes (vLLM's DeepSeek-V4 recipes: deepseek_v4)
    "--seed": 1,
    "--disable-log-requests": 0,
    "--enable-log-requests": 0,
    "--disable-log-stats": 0,
    "--enable-chunked-prefill": 0,  # vLLM V1's default; the chunk is --max-num-batched-tokens
    "--distributed-executor-backend": 1,
    "--enforce-eager": 0,  # on GPUs no graphs captured, read (engines/vllm/cudagraph.py read_compilation)
    # FlashInfer's kernel autotuning at warmup (the vLLM recipes' hopper override, recipes@af483b87): which kernel
    # runs, not what the pool holds
    "--no-enable-flashinfer-autotune": 0,
    "--enable-flashinfer-autotune": 0,
    "--enable-prefix-caching": 0,  # pool sizing unchanged; the hit rate is fit's --prefix-hit
    "--no-enable-prefix-caching": 0,
    "--mamba-cache-mode": 1,  # align: one state a block with prefix caching (torchtpu-vllm's gate)
    "--block-size": 1,  # read below: the page
    "--chat-template": 1,
    "--max-log-len": 1,
    "--uvicorn-log-level": 1,
    "--disable-uvicorn-access-log": 0,
    # vLLM's default (the hybrid KV cache manager on), as the DeepSeek-V4 recipes spell it out; the opposite switch,
    # --disable-hybrid-kv-cache-manager, is read by engines/vllm/serve.py read_hybrid_off
    "--no-disable-hybrid-kv-cache-manager": 0,
    # which sliding-window / state blocks prefix caching keeps (vllm-project/vllm#52216, merged 2026-08: the
    # VLLM_PREFIX_CACHE_RETENTION_INTERVAL of #43447 as a flag; the vLLM recipes' DeepSeek-V4 lines pass 'auto'):
    # a retention policy over the pool, not its size
    "--prefix-cache-retention-interval": 1,
    # multi-node and disaggregation wiring the engines' own recipes pass: which host runs which rank, how KV moves
    "--disable-custom-all-reduce": 0,  # NCCL instead of the custom all-reduce: its buffers are outside the pool
    "--nnodes": 1,
    "--node-rank": 1,
    "--headless": 0,
    "--master-addr": 1,
    "--master-port": 1,
    "--data-parallel-size-local": 1,
    "--data-parallel-start-rank": 1,
    "--data-parallel-address": 1,
    "--data-parallel-rpc-port": 1,
    "--api-server-count": 1,
    # how requests reach the DP ranks (vLLM ParallelConfig.data_parallel_hybrid_lb / _external_lb, bool flags with
    # their --no- forms and -dph / -dpe; the vLLM recipes' strategies/multi_node_dep.yaml passes the first) and the
    # DP workers' launcher (--data-parallel-backend / -dpb, mp or ray): vllm/engine/arg_utils.py, read in
    # yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2
    "--data-parallel-hybrid-lb": 0,
    "--no-data-parallel-hybrid-lb": 0,
    "-dph": 0,
    "--data-parallel-external-lb": 0,
    "--no-data-parallel-external-lb": 0,
    "-dpe": 0,
    "--data-parallel-backend": 1,
    "-dpb": 1,
    # the reasoning parser's strings (vLLM's ReasoningConfig; the recipes' DeepSeek-V4-Flash reasoning feature)
    "--reasoning-config": 1,
    # kernel choices, warmup, scheduling class, streaming, event publishing, logging and timeouts of the vLLM workers in
    # NVIDIA Dynamo's Kimi-K3 recipes (ai-dynamo/dynamo recipes/kimi-k3/vllm/agg-gb200-agentic and agg-h200-agentic):
    # which kernel runs or how the host talks, not what the pool holds. --skip-mm-profiling leaves the vision encoder
    # out of the profile run: listed as ignored, and app/fit.py then prices no multimodal dummy batch
    # (engines/vllm/mm_profile.py)
    "--attention-backend": 1,
    "--mm-encoder-attn-backend": 1,
    "--kda-prefill-backend": 1,
    "--kernel-config": 1,
    "--skip-mm-profiling": 0,
    "--scheduler-cls": 1,
    "--stream-interval": 1,
    "--kv-events-config": 1,
    "--no-enable-log-requests": 0,
    "--distributed-timeout-seconds": 1,
    "--numa-bind": 0,  # host NUMA placement of the workers (NVIDIA Dynamo's DeepSeek-V4.1-Flash recipes)
    "--cpu-distributed-timeout-seconds": 1,
    "--kv-transfer-config": 1,  # a disaggregated deployment's KV connector: the pool is sized as without it
    # the torchtpu-vllm nightlies' EXTRA_SERVE_ARGS (kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/configs/
    # deepseek-v4-flash-dp8-ep.sh @7de7a3f5, deepseek-v4-pro-dp16-ep.sh @5e1723db): sampling defaults and how the
    # host reads the safetensors files, nothing on the device
    "--generation-config": 1,
    "--override-generation-config": 1,
    "--safetensors-load-strategy": 1,
    # and the profiler its harness adds when a config sets CAPTURE_PROFILE=1 (scripts/vllm/benchmarking/
    # run_benchmarks.sh start_vllm_server @f84ad69c: --profiler-config.profiler torch --profiler-config.
    # torch_profiler_dir DIR --profiler-config.ignore_frontend true; the DeepSeek-V4 configs @23701f8e default
    # CAPTURE_PROFILE to 1, the -profile configs set it): which profiler a /start_profile call runs and where its
    # trace goes (vllm/config/profiler.py ProfilerConfig, 0.29.0 wheel), nothing held before the pool is sized
    "--profiler-config": 1,
    # sglang
    "--trust-remote": 0,
    "--dist-init-addr": 1,
    "--chunked-prefill-size": -1,  # read below
    # SGLang's CUDA graphs (python/sglang/srt/server_args.py ServerArgs: cuda_graph_bs and its per-phase lists, the
    # max batch, the backends, the off switches): captured in the memory mem_fraction_static leaves outside the
    # weights and the KV pool, so the pool does not move; and the server's warmup, logging and seed
    "--cuda-graph-bs": 1,
    "--cuda-graph-bs-decode": 1,
    "--cuda-graph-bs-prefill": 1,
    "--cuda-graph-max-bs": 1,
    "--cuda-graph-max-bs-decode": 1,
    "--cuda-graph-backend-prefill": 1,
    "--cuda-graph-backend-decode": 1,
    "--disable-cuda-graph": 0,
    "--disable-prefill-cuda-graph": 0,
    "--skip-server-warmup": 0,
    "--decode-log-interval": 1,
    "--random-seed": 1,
    # SGLang's scheduling, metrics, kernels, NCCL algorithm, host-side loading and host-memory (HiCache) tier in NVIDIA
    # Dynamo's Kimi-K3 SGLang recipes (ai-dynamo/dynamo recipes/kimi-k3/sglang/): the GPU pool mem_fraction_static
    # sizes does not move (HiCache's --hicache-size is host memory)
    "--max-prefill-tokens": 1,
    "--schedule-policy": 1,
    "--enable-metrics": 0,
    # which schedulers record request metrics (every TP rank's, not only attention-TP rank 0's): sglang 0.5.19 wheel
    # (PyPI), sglang/srt/server_args.py ServerArgs.enable_metrics_for_all_schedulers, read only where
    # managers/scheduler.py and observability/metrics_collector.py set a scheduler's metrics_enabled: host-side
    # counters, nothing on the device (Pqlet/compare-kvcache-mem-dsv4's sglang_serve.sh)
    "--enable-metrics-for-all-schedulers": 0,
    "--mm-attention-backend": 1,
    "--enable-nccl-nvls": 0,
    "--weight-loader-prefetch-checkpoints": 0,
    "--enable-hierarchical-cache": 0,
    "--hicache-size": 1,
    # and the rest of HiCache's host tier in InferenceX's agentic V4 SGLang nightlies (@843c6254 benchmarks/
    # single_node/agentic/dsv4_fp4_{b200,b300}_sglang_mtp.sh): the host pool's size as a ratio of the GPU pool, its
    # layout, its write policy and the copy kernels; the GPU pool is sized as without them
    "--hicache-ratio": 1,
    "--hicache-mem-layout": 1,
    "--hicache-write-policy": 1,
    "--hicache-io-backend": 1,
    # scheduling, kernel tuning and host processes in SemiAnalysisAI/InferenceX's DeepSeek-V4 nightlies
    # (benchmarks/single_node/fixed_seq_len/dsv4_fp4_b200_vllm.sh, dsv4_fp4_b300_sglang.sh, dsv4_fp8_h200_sglang.sh
    # @843c6254): vLLM's --prefill-schedule-interval (how often a prefill is scheduled), SGLang's FlashInfer
    # autotune switch, prefill delayer and tokenizer worker count: when and how work runs, not what the pool holds
    # the vLLM recipes' flags for kernels, chat templates and a DCP group's wiring (vllm-project/recipes@8959cf6
    # models/deepseek-ai/DeepSeek-V4-Flash.yaml's b12x --linear-backend and --default-chat-template-kwargs.*,
    # models/moonshotai/Kimi-K3.yaml's DCP feature): which GEMM kernel runs, the template's default arguments, and how
    # a DCP group exchanges its KV shards and interleaves them (DCP itself, --decode-context-parallel-size > 1, is
    # refused by engines/vllm/serve.py)
    "--linear-backend": 1,
    "--default-chat-template-kwargs": 1,
    "--dcp-comm-backend": 1,
    "--cp-kv-cache-interleave-size": 1,
    "--dcp-kv-cache-interleave-size": 1,
    # torch.compile of SGLang's decode graphs up to a batch (sgl-project/sglang benchmark/deepseek_v3/README.md's
    # Performance Optimization Options): compiled into the CUDA graphs, which live outside the pool
    # mem_fraction_static sizes, as --cuda-graph-max-bs above
    "--enable-torch-compile": 0,
    "--torch-compile-max-bs": 1,
    # scheduling, kernels, graphs and host-side reporting in SemiAnalysisAI/InferenceX's nightlies (@843c6254
    # benchmarks/single_node/fixed_seq_len/dsr1_fp4_b200.sh, dsv4_fp4_b200.sh, dsv4_fp4_mi355x_sglang.sh,
    # dsr1_fp4_mi355x.sh, agentic/dsv4_fp4_b200_sglang_mtp.sh, dsv4_fp4_b200_vllm_mtp.sh, dsv4_fp4_mi355x_vllm_mtp.sh):
    # SGLang's piecewise prefill graphs (outside the pool, as its decode graphs), prefill mixed into decode batches,
    # two-batch overlap, its decode steps between schedules, how conservatively it admits, how often it polls for
    # requests (the speed model's recv-interval term reads it from a benchmark's flags), its DP-attention control
    # messages, the FlashInfer all-reduce + norm fusion and fp8 GEMM kernels, the watchdog, cache-hit reporting,
    # prompt truncation and streaming; vLLM's long-prefill threshold (a prefill's share of the batch budget), V0's
    # scheduler delay, and its CPU KV offload size (host memory: the GPU pool is sized as without it)
    "--disable-piecewise-cuda-graph": 0,
    "--enable-mixed-chunk": 0,
    "--enable-two-batch-overlap": 0,
    "--num-continuous-decode-steps": 1,
    "--schedule-conservativeness": 1,
    "--scheduler-recv-interval": 1,
    "--enable-dp-attention-local-control-broadcast": 0,
    "--enable-flashinfer-allreduce-fusion": 0,
    "--fp8-gemm-backend": 1,
    "--watchdog-timeout": 1,
    "--enable-cache-report": 0,
    "--allow-auto-truncate": 0,
    "--incremental-streaming-output": 0,
    "--long-prefill-token-threshold": 1,
    "--scheduler-delay-factor": 1,
    "--kv-offloading-size": 1,
    "--prefill-schedule-interval": 1,
    "--disable-flashinfer-autotune": 0,
    "--enable-prefill-delayer": 0,
    "--tokenizer-worker-num": 1,
    # SGLang's decode steps between prefills (agentic/dsv4_fp4_b200_sglang_mtp.sh) and vLLM's prefix-cache match
    # granularity in tokens (agentic/kimik3_fp4_b300_vllm_mtp.sh, @843c6254): scheduling and lookup, not the pool
    "--prefill-decode-interval": 1,
    "--prefix-match-unit": 1,
    # InferenceX's multi-node recipes (@843c6254 benchmarks/multi_node/srt-slurm-recipes/{sglang,vllm}/, llm-d-recipes/):
    # a disaggregated worker's role and KV-transfer wiring (its pool is sized as an aggregated one's, as
    # --kv-transfer-config above), DP load balancing, logging, the tokenizer skipped, usage details, KV metrics, NVIDIA
    # Dynamo's parser flags, host NUMA binding, the FP4 GEMM kernel (as --fp8-gemm-backend) and EPLB's dispatch rule
    "--disaggregation-mode": 1,
    "--disaggregation-transfer-backend": 1,
    "--disaggregation-bootstrap-port": 1,
    "--disaggregation-decode-polling-interval": 1,
    "--load-balance-method": 1,
    "--prefill-round-robin-balance": 0,
    "--log-level": 1,
    "--log-level-http": 1,
    "--skip-tokenizer-init": 0,
    "--enable-prompt-tokens-details": 0,
    "--kv-cache-metrics": 0,
    "--dyn-reasoning-parser": 1,
    "--dyn-tool-call-parser": 1,
    "--numa-bind-nodes": 1,
    "--fp4-gemm-backend": 1,
    "--ep-dispatch-algorithm": 1,
    # multimodal inputs' host-side sources (vLLM's ModelConfig.allowed_local_media_path / allowed_media_domains,
    # vllm/engine/arg_utils.py in the 0.31.0 wheel; vllm-project/vllm#42426's Kimi-K2.6 command): which files and
    # hosts a request may name, nothing on the GPU
    "--allowed-local-media-path": 1,
    "--allowed-media-domains": 1,
    # vLLM's CPU swap space a GPU (CacheConfig.swap_space, host memory for preempted sequences): host memory, the GPU
    # pool is sized as without it; from 0.18.0 the flag is gone and refused (engines/vllm/serve.py read_removed)
    "--swap-space": 1,
    # vLLM flags of the wide-EP / disaggregated recipes (ai-dynamo/dynamo recipes/deepseek-r1/vllm/disagg,
    # llm-d/llm-d guides/wide-ep-lws) and of EngineArgs beside them, read in the 0.33.0 wheel (PyPI) for what they
    # hold on a GPU: nothing the pool is sized from.
    # - the DP ranks' padding all-reduce on the CPU (gloo) group instead of NCCL (ParallelConfig.
    #   disable_nccl_for_dp_synchronization, vllm/v1/worker/dp_utils.py _get_device_and_group) and how often the
    #   engine core syncs its DP wave (ParallelConfig.dp_sync_interval, vllm/v1/engine/core.py)
    "--disable-nccl-for-dp-synchronization": 0,
    "--no-disable-nccl-for-dp-synchronization": 0,
    "--dp-sync-interval": 1,
    # - cascade attention: "--disable-cascade-attn is deprecated and has no effect since cascade attention has been
    #   removed" (vllm/engine/arg_utils.py _DISABLE_CASCADE_ATTN_DEPRECATION_MESSAGE, the 0.28.0-0.34.0 wheels;
    #   GPUModelRunner.cascade_attn_enabled = False); before 0.28.0 --no-disable-cascade-attn is refused
    #   (engines/vllm/serve.py read_removed)
    "--disable-cascade-attn": 0,
    "--no-disable-cascade-attn": 0,
    # - the scheduler's request order (SchedulerConfig.policy) and the host's block-hash function
    #   (CacheConfig.prefix_caching_hash_algo)
    "--scheduling-policy": 1,
    "--prefix-caching-hash-algo": 1,
    # - the CPU KV offload's backend, beside its host-memory size (--kv-offloading-size above; CacheConfig.
    #   kv_offloading_backend native / lmcache: the connector's host tier)
    "--kv-offloading-backend": 1,
    # - a GDN layer's prefill kernel (EngineArgs.gdn_prefill_backend -> additional_config; no bundled model has GDN
    #   layers: Kimi-Linear / K3's are KDA, --kda-prefill-backend above)
    "--gdn-prefill-backend": 1,
    # - the multimodal processor cache, host memory in each API and engine-core process (MultiModalConfig.
    #   mm_processor_cache_gb: "duplicated for each API process and engine core process") and its type
    "--mm-processor-cache-gb": 1,
    "--mm-processor-cache-type": 1,
    # - the loader's host-side concurrency (ParallelConfig.max_parallel_loading_workers) and which experts an EP rank
    #   takes (ParallelConfig.expert_placement_strategy linear / round_robin: the same count a rank,
    #   model_loader/default_loader.py)
    "--max-parallel-loading-workers": 1,
    # - where the loader downloads the checkpoint on the host (LoadConfig.download_dir; InferenceX's
    #   experimental/token_position_decode_slo/serve_kimi_k2_sbatch.sh @843c6254)
    "--download-dir": 1,
    # (and the partial-prefill limits of 0.26.0's SchedulerConfig, refused from 0.28.0: engines/vllm/serve.py
    # read_removed)
    "--max-num-partial-prefills": 1,
    "--max-long-partial-prefills": 1,
    "--expert-placement-strategy": 1,
    # - the structured-output grammar backend: its bitmask is built by the scheduler on the host
    #   (vllm/v1/structured_output/__init__.py StructuredOutputManager) and applied to a step's logits
    #   (gpu_model_runner.py apply_grammar_bitmask), not in the profile run
    "--structured-outputs-config": 1,
    # - tracing and metrics (ObservabilityConfig)
    "--otlp-traces-endpoint": 1,
    "--collect-detailed-traces": 1,
    "--show-hidden-metrics-for-version": 1,
    # SGLang's: the switch of 0.4.x that read --enable-ep-moe (engines/sglang/serve.py: ep_size = tp_size), its
    # FlashInfer MLA attention kernel of the same releases (the 0.4.3.post2 wheel's ServerArgs.enable_flashinfer_mla:
    # which kernel reads the same MLA pool), torch.distributed's timeout and a disaggregated worker's RDMA NICs
    # (ServerArgs.dist_timeout, disaggregation_ib_device in the 0.5.15 wheel): nothing the pool holds
    "--enable-ep-moe": 0,
    "--enable-flashinfer-mla": 0,
    "--dist-timeout": 1,
    "--disaggregation-ib-device": 1,
    # SGLang's spelling of --tokenizer (ServerArgs.tokenizer_path, every wheel read 0.4.2-0.5.23): host-side
    "--tokenizer-path": 1,
    # vLLM's API-server flags, each of FrontendArgs' fields (engines/vllm/frontend.py): listening, authentication,
    # TLS, CORS, logging and chat rendering; the worker that sizes the pool never sees them
    **vllm_serve.FRONTEND_IGNORED,
    # and EngineArgs' flags of the 0.32.0-0.34.0 wheels that hold nothing on a GPU (engines/vllm/serve.py)
    **vllm_serve.NEWER_IGNORED,
}
# what the engines' own argument parsers take for some of the ignored flags above, refused before anything is read
# (as the engine's argparse stops): "int" (argparse type=int: Python int(), so no 'nan', '8.5' or 'lots'), "int?"
# (the same, or the literal None an Optional field's parser turns into None: vLLM's optional_type), "float" (type=float:
# any number Python's float() reads, 'nan' and 'inf' included, as the engine takes them) or the choices the engine
# fixes. Read in the wheels (PyPI) of the releases where the flag is: vLLM 0.8.4, 0.9.2, 0.10.2 and every wheel
# 0.11.0-0.34.0 unpacked for k3plan's rules (vllm/engine/arg_utils.py EngineArgs.add_cli_args -> get_kwargs /
# _compute_kwargs: type=int from the field's int annotation in vllm/config/*.py, optional_type(int) where it is
# Optional, choices from a Literal; FrontendArgs.port: int in vllm/entrypoints/openai/cli_args.py, from 0.33.0
# entrypoints/common/cli_args.py) and SGLang 0.4.2.post4, 0.4.5, 0.4.10, 0.5.6, 0.5.7 (sglang/srt/server_args.py
# ServerArgs.add_cli_args type=int / float), 0.5.15, 0.5.19 (ServerArgs' A[int | float | Optional[...]] annotations in
# server_args.py) and 0.5.23 (sglang/srt/arg_groups/fields/*.py, mapped by arg_groups/arg_utils.py
# _unwrap_optional / _infer_type_func: Optional[int] reads as int, no type_parser on these fields). Where both engines
# take a flag (--port, --nnodes, --node-rank, --stream-interval) both declare int. Left unchecked: a flag whose type or
# choices differ by release (vLLM's --data-parallel-backend: str in the 0.11.0 wheel, Literal['ray', 'mp'] in 0.15.0;
# --prefix-caching-hash-algo: Literal['sha256', 'sha256_cbor'] in 0.11.0, two xxhash choices more in 0.34.0; SGLang's
# --max-prefill-tokens: type=int to 0.5.7, human_readable_int ('16K') in 0.5.15 and 0.5.23; --cuda-graph-max-bs, no
# ServerArgs field of 0.5.15) and a str whose values the engine checks only after parsing (vLLM's --load-format:
# str | LoadFormats, a metavar and no choices: the model loader refuses an unknown one, not the parser)
IGNORED_VALUES: dict[str, str | tuple[str, ...]] = {
    # both engines
    "--port": "int",
    "--nnodes": "int",
    "--node-rank": "int",
    "--stream-interval": "int",
    # vLLM (ModelConfig.seed Optional[int] before 0.15, int after; ParallelConfig's ports, ranks and DP sizes;
    # SchedulerConfig's partial-prefill counts; MultiModalConfig.mm_encoder_tp_mode, SchedulerConfig.policy,
    # ParallelConfig.expert_placement_strategy and CacheConfig.kv_offloading_backend: Literals)
    "--seed": "int?",
    "--master-port": "int",
    "--data-parallel-size-local": "int?",
    "--data-parallel-start-rank": "int?",
    "--data-parallel-rpc-port": "int?",
    "--max-log-len": "int?",
    "--max-parallel-loading-workers": "int?",
    "--max-seq-len-to-capture": "int?",
    "--distributed-timeout-seconds": "int?",
    "--dp-sync-interval": "int",
    "--max-num-partial-prefills": "int",
    "--max-long-partial-prefills": "int",
    "--long-prefill-token-threshold": "int",
    "--mm-encoder-tp-mode": ("weights", "data"),
    "--scheduling-policy": ("fcfs", "priority"),
    "--expert-placement-strategy": ("linear", "round_robin"),
    "--kv-offloading-backend": ("native", "lmcache"),
    # SGLang (ServerArgs)
    "--random-seed": "int",
    "--torch-compile-max-bs": "int",
    "--hicache-ratio": "float",
    "--hicache-size": "int",
    "--dist-timeout": "int",
    "--watchdog-timeout": "float",
    "--decode-log-interval": "int",
    "--num-continuous-decode-steps": "int",
    "--schedule-conservativeness": "float",
    "--scheduler-recv-interval": "int",
    "--tokenizer-worker-num": "int",
    "--disaggregation-bootstrap-port": "int",
}


def check_ignored_value(name: str, value: str) -> None:
    """An ignored flag's value as the engine's parser reads it (IGNORED_VALUES): one line naming the flag, the value and
    what the engine takes where its parser would stop."""
    kind = IGNORED_VALUES.get(name)
    if kind is None:
        return
    if isinstance(kind, tuple):
        if value not in kind:
            raise K3PlanError(f"--serve: {name} {value!r}: expected one of {', '.join(kind)} (the engine's choices)")
        return
    if kind == "int?" and value == "None":
        return
    try:
        (float if kind == "float" else int)(value)
    except ValueError:
        want = "a number" if kind == "float" else "an integer"
        raise K3PlanError(f"--serve: {name} {value!r}: expected {want}, as the engine's parser reads it") from None


# environment variables that change what the engine holds in a way k3plan does not price: refused with what they do
UNPRICED_ENV = {
    # (SGLang's MegaMoE variables, SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK and its FP4 / memory switches,
    # are read by engines/sglang/serve.py mega_moe: priced where read, refused elsewhere)
    # InferenceX's multi-node recipes (@843c6254 benchmarks/multi_node/srt-slurm-recipes/vllm/deepseek-v4/)
    "NVSHMEM_SYMMETRIC_SIZE": "NVSHMEM's symmetric heap a GPU (the DeepEP / MegaMoE buffers' memory)",
    # (VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE, vLLM's CUTLASS FP4 experts' token bound, is read on a vLLM command:
    # engines/vllm/serve.py read_fp4_moe_tokens_env)
    # (VLLM_DEEPEP_BUFFER_SIZE_MB, DeepEP's buffers' size, is read on a vLLM command: engines/vllm/all2all_buffers.py)
}
# environment variables a serve command's recipe sets before the engine, read as the engine reads them
IGNORED_ENV = {
    # torchtpu-vllm: the MoE weights' requantized dtype for its kernels (tpu_platform.py additional_env_vars);
    # k3plan prices the stack's runtime formats, the variable is listed, not priced
    "MOE_REQUANTIZE_WEIGHT_DTYPE",
    "MOE_REQUANTIZE_BLOCK_SIZE",
    "REQUANTIZE_WEIGHT_DTYPE",
    "REQUANTIZE_BLOCK_SIZE",
    "USE_MOE_FUSED_EP_KERNEL",
    "TPU_MULTIHOST_BACKEND",
    "TORCH_TPU_TOPOLOGY",
    "VLLM_USE_V1",
    "VLLM_LOGGING_LEVEL",
    "HF_TOKEN",
    "HF_HOME",
    "HF_HUB_ENABLE_HF_TRANSFER",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_DEBUG",
    "GLOO_SOCKET_IFNAME",  # the network interface of a multi-node recipe (vLLM recipes' strategies/multi_node_*)
    "NCCL_SOCKET_IFNAME",
    "VLLM_HOST_IP",  # the address a node's workers advertise (vllm/envs.py; vllm-project/recipes#698's K3 command)
    # the NIXL connector's handshake address and port (vllm 0.33.0 wheel (PyPI) vllm/envs.py; the vLLM recipes'
    # strategies/pd_cluster.yaml env): host networking of a disaggregated worker
    "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "VLLM_NIXL_SIDE_CHANNEL_PORT",
    # the wide-EP workers' pod env (llm-d/llm-d guides/wide-ep-lws/modelserver/gpu/vllm-deepseek-v4/base/prefill.yaml
    # @034b87dc, manifests/modelserver/base/decode.yaml @03da3b00; ai-dynamo/dynamo recipes/deepseek-r1/vllm/disagg/
    # deploy_gb200_2prefill_dep4_1decode_dep8.yaml @40200470), none of it what the engine sizes its pool from:
    # - JIT and kernel caches on disk and the CUDA driver library's path (Triton, CUDA, ccache, FlashInfer's JIT
    #   workspace directory), and the launcher's own shell variable (DP_SIZE_LOCAL: llm-d's START_RANK arithmetic; no
    #   vllm/envs.py entry)
    "TRITON_LIBCUDA_PATH",
    "CUDA_CACHE_PATH",
    "CCACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "DP_SIZE_LOCAL",
    # - collective timeouts and NVSHMEM's bootstrap interface and IB transport (as NVSHMEM_DISABLE_IB; its heap size,
    #   NVSHMEM_SYMMETRIC_SIZE, is refused)
    "NCCL_TIMEOUT",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME",
    "NVSHMEM_IB_ENABLE_IBGDA",
    "NVSHMEM_REMOTE_TRANSPORT",
    # - DeepEP low-latency over multi-node NVLink and its NVFP4 dispatch payload (vllm 0.33.0 wheel (PyPI)
    #   distributed/device_communicators/all2all.py allow_mnnvl, prepare_finalize/deepep_ll.py: the buffers keep
    #   VLLM_DEEPEP_BUFFER_SIZE_MB's size), and the host's output-processing chunk (v1/engine/output_processor.py)
    "VLLM_DEEPEP_LOW_LATENCY_USE_MNNVL",
    "VLLM_DEEPEPLL_NVFP4_DISPATCH",
    "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE",
    # - NVIDIA Dynamo's Kimi-K3 vLLM workers (ai-dynamo/dynamo recipes/kimi-k3/vllm/agg-h200-agentic @1fa623b3,
    #   disagg-gb200-agentic @54b31536): DeepGEMM's kernel warm-up, run by kernel_warmup in
    #   Worker.compile_or_warm_up_model after the KV cache is allocated (vllm 0.33.0 wheel (PyPI) v1/worker/
    #   gpu_worker.py, envs.py VLLM_DEEP_GEMM_WARMUP skip / full / relax), fastsafetensors' loading queue (model_loader/
    #   weight_utils.py, at load), the host's cache directory and the TCP store's timeout
    "VLLM_DEEP_GEMM_WARMUP",
    "VLLM_FASTSAFETENSORS_QUEUE_SIZE",
    "XDG_CACHE_HOME",
    "NCCL_STORE_TIMEOUT",
    # - NVIDIA Dynamo's DeepSeek-V4.1-Flash disaggregated B200 workers (recipes/deepseek-v4.1-flash/vllm/
    #   disagg-b200-agentic/kustomize/base/deploy.yaml @06c8fbf1): UCX's rendezvous threshold, RC timeout and keepalive
    #   (the NIXL transfer's transport, as UCX_TLS above), and the context length adaptive verification's timing runs
    #   use (vllm 0.33.0 wheel (PyPI) v1/worker/gpu/spec_decode/adaptive_verification.py batches_to_profile: dummy runs
    #   at the capture sizes after the KV cache is allocated, and only with enable_adaptive_verification)
    "UCX_RNDV_THRESH",
    "UCX_RC_TIMEOUT",
    "UCX_KEEPALIVE_INTERVAL",
    "VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN",
    "VLLM_WORKER_MULTIPROC_METHOD",
    "SGLANG_LOG_LEVEL",
    # SemiAnalysisAI/InferenceX's SGLang DeepSeek-V4 nightlies (benchmarks/single_node/fixed_seq_len/
    # dsv4_fp4_b300_sglang.sh @843c6254): Python's user site, the NVSHMEM transport, the SWA eviction policy (which
    # pages a finished window frees) and per-iteration logging: nothing the pool holds
    "PYTHONNOUSERSITE",
    "NVSHMEM_DISABLE_IB",
    "SGLANG_OPT_SWA_EVICT_DROP_PAGE_MARGIN",
    "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW",
    "SGLANG_LOG_FORWARD_ITERS",
    # InferenceX's Kimi-K3 vLLM lines (benchmarks/single_node/speedbench/kimik3_fp4_b300_vllm.sh @843c6254): NCCL's
    # DMA-BUF transport, the Rust API frontend, and FlashInfer's all-reduce in place of the custom one (its IPC
    # workspace belongs to the all-reduce communicator, as the custom all-reduce's buffers do, which k3plan does not
    # price either way: --disable-custom-all-reduce above)
    "NCCL_DMABUF_ENABLE",
    "VLLM_USE_RUST_FRONTEND",
    "VLLM_ALLREDUCE_USE_FLASHINFER",
    # the torchtpu-vllm DeepSeek-V4 nightlies' exports (configs/deepseek-v4-flash-dp8-ep.sh @7de7a3f5,
    # deepseek-v4-pro-dp16-ep.sh @5e1723db): model-implementation switches, kernel layouts, timeouts and the
    # profiler; the weights' formats are the stack's runtime formats k3plan prices
    "NEW_MODEL_DESIGN",
    "MODEL_IMPL_TYPE",
    "TPU_ROPE_CACHE_ROW_MAJOR",
    "TPU_MOE_HASH_TABLE_ROW_MAJOR",
    "TPU_DSV4_HONOR_CONTINUE_FINAL_MESSAGE",
    "MOE_FUSED_EP_ENABLE_W4A8",
    "MOE_FUSED_EP_V2_HEIGHT_RUNGS_OVERRIDE",
    "TPU_MOE_SKIP_PADDED_TOKENS",
    "RAGGED_GATHER_REDUCE_VERSION",
    "LIBTPU_INIT_ARGS",
    "VLLM_USE_BREAKABLE_CUDAGRAPH",
    "VLLM_PREFIX_CACHE_RETENTION_INTERVAL",  # --prefix-cache-retention-interval's variable (vllm#43447)
    "VLLM_USE_AOT_COMPILE",
    "VLLM_NO_USAGE_STATS",
    "VLLM_ENGINE_READY_TIMEOUT_S",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S",
    "VLLM_RPC_TIMEOUT",
    "VLLM_SHM_BROADCAST_TIMEOUT_S",
    "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
    "TORCH_DIST_TIMEOUT",
    "VLLM_ROCM_USE_AITER",  # vLLM on ROCm: AITER's kernels (the vLLM recipes' AMD hardware_overrides)
    "VLLM_ROCM_USE_SKINNY_GEMM",
    "VLLM_ROCM_USE_AITER_MOE",
    "VLLM_ROCM_FP8_PADDING",  # read: ROCm's fp8 linear padding (engines/vllm/rocm_fp8_pad.py)
    "SAFETENSORS_FAST_GPU",  # loading straight to the GPU: host-side, the weights land the same
    # FlashInfer's MoE kernels for fp8 / fp4 weights (the vLLM recipes' hopper / blackwell overrides)
    "VLLM_USE_FLASHINFER_MOE_FP8",
    "VLLM_USE_FLASHINFER_MOE_FP4",
    "CAPTURE_PROFILE",
    "USE_PHASED_PROFILER",
    # the trace directory the torchtpu-vllm nightly harness exports with CAPTURE_PROFILE=1 (scripts/vllm/benchmarking/
    # run_benchmarks.sh start_vllm_server @f84ad69c, beside --profiler-config.torch_profiler_dir): where a capture
    # between /start_profile and /stop_profile is written, after the pool is sized
    "VLLM_TORCH_PROFILER_DIR",
    # the vLLM recipes (vllm-project/recipes@8959cf6 models/moonshotai/Kimi-K3.yaml, Kimi-K2.6.yaml,
    # deepseek-ai/DeepSeek-V4-Flash.yaml / -Pro.yaml: hardware_overrides, strategy_overrides, pd_cluster env), each
    # for what it does to the pool vLLM sizes (Worker.determine_available_memory: what the worker measures once
    # NCCL is up, engines/vllm/memory.py):
    # - PyTorch's caching-allocator segments: how torch asks the driver for memory, not what vLLM measures it holds
    "PYTORCH_CUDA_ALLOC_CONF",
    # - NCCL's transports, its cuMem / NVLS / multi-node-NVLink buffers and the UCX / MPI / socket wiring of the
    #   KV connector: the communicators are built in init_worker_distributed_environment, before the worker's first
    #   memory snapshot, so their buffers are outside what the pool subtracts (as --disable-custom-all-reduce)
    "NCCL_CUMEM_ENABLE",
    "NCCL_MNNVL_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_IGNORE_CPU_AFFINITY",
    "UCX_TLS",
    "UCX_NET_DEVICES",
    "TP_SOCKET_IFNAME",
    "MN_IF_NAME",
    "OMPI_MCA_btl_tcp_if_include",
    # - ROCm's quick all-reduce quantization (vllm/envs.py VLLM_ROCM_QUICK_REDUCE_QUANTIZATION: FP, INT8, INT6, INT4
    #   or NONE, the all-reduce's wire format; its communicator is built with the others, before the snapshot)
    "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION",
    # - AITER's MoE kernel choices for the same weights (the K3 recipe's amd override: the bf16/fp8 bound, the
    #   a8w4 path that quantizes activations to fp8 and keeps the MXFP4 experts as loaded)
    "AITER_BF16_FP8_MOE_BOUND",
    "VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4",
    # - and SGLang's, the K3 MI355X day-0 recipe's (sgl-project/sglang#32548): AITER_SITUV2_A8W4 picks which shuffle
    #   replaces the loaded MXFP4 experts (sglang 0.5.17-0.5.23 wheels, srt/layers/quantization/mxfp4.py
    #   Mxfp4MoEMethod.process_weights_after_loading: layer.w13_weight.data = shuffle_weight_a16w4(...) for a SiTU
    #   MoE with it, shuffle_weight(...) without, each in place of the loaded weight), and AITER_FLYDSL_FORCE is read
    #   by AITER alone (no reference in those wheels: which AITER kernel runs the same weights)
    "AITER_SITUV2_A8W4",
    "AITER_FLYDSL_FORCE",
    # - the KDA conv state's memory layout in a disaggregated deployment (the K3 recipe's pd_cluster env): the
    #   same bytes a state, laid out for the KV connector
    "VLLM_SSM_CONV_STATE_LAYOUT",
    # - a timeout
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
    # SGLang's own docs (sgl-project/sglang/docs/basic_usage/deepseek_v3.md, its benchmark/deepseek_v3/README.md): the
    # RoCE GID for multi-node NCCL, DeepGEMM's JIT kernels on or off (SGLANG_ and the older SGL_ spelling: which
    # kernel runs the same FP8 weights) and the overlap scheduler for speculative decoding (whose flags --serve
    # refuses by name)
    "NCCL_IB_GID_INDEX",
    "SGLANG_ENABLE_JIT_DEEPGEMM",
    "SGL_ENABLE_JIT_DEEPGEMM",
    "SGLANG_ENABLE_SPEC_V2",
    # SemiAnalysisAI/InferenceX's single-node nightlies (@843c6254, benchmarks/single_node/fixed_seq_len/ and
    # agentic/: dsr1_fp8_{h200,b200,mi300x,mi325x,mi355x}.sh, dsv4_fp4_{b200,mi355x_sglang}.sh,
    # dsv4_fp8_mi300x.sh, agentic/dsv4_fp4_{b200,b300}_{sglang,vllm}_mtp.sh, agentic/kimik3_fp4_b300_vllm_mtp.sh),
    # each for what it does, none of it what the engine sizes its pool from:
    # - build and runtime plumbing: the CUDA arches JIT kernels compile for, Triton's ptxas, Python's hash seed, the
    #   HTTP keep-alive, the benchmark's lm-eval client concurrency (read by InferenceX's eval, not the engine)
    "TORCH_CUDA_ARCH_LIST",
    "TRITON_PTXAS_PATH",
    "PYTHONHASHSEED",
    "SGLANG_TIMEOUT_KEEP_ALIVE",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
    "EVAL_CONCURRENT_REQUESTS",
    # (and what InferenceX's launchers pass into the container, runners/launch_mi355x-amds.sh, launch_mi325x-amds.sh,
    # launch_mi325x-tw.sh: vLLM's and Triton's on-disk caches, and CUDA's device enumeration order)
    "VLLM_CACHE_ROOT",
    "TRITON_CACHE_DIR",
    "CUDA_DEVICE_ORDER",
    # - PyTorch's allocator settings under their newer name (as PYTORCH_CUDA_ALLOC_CONF above)
    "PYTORCH_ALLOC_CONF",
    # - collectives and KV-transfer wiring, built with the communicators before the engine measures its memory (as
    #   the NCCL / UCX settings above): RCCL's MSCCL algorithms, SGLang's spelling of ROCm's quick all-reduce
    #   quantization, the HIP runtime's hardware queues, FlashInfer's all-reduce backend, SGLang's DP-attention
    #   gather / reduce-scatter choice, vLLM's DCP exchange kernels, and the Mooncake transfer engine's settings
    "RCCL_MSCCL_ENABLE",
    "ROCM_QUICK_REDUCE_QUANTIZATION",
    "GPU_MAX_HW_QUEUES",
    "VLLM_FLASHINFER_ALLREDUCE_BACKEND",
    "SGLANG_DP_USE_GATHERV",
    "SGLANG_DP_USE_REDUCE_SCATTER",
    "VLLM_USE_DIRECT_DCP_A2A",
    "VLLM_USE_DIRECT_DCP_KV_GATHER",
    "VLLM_USE_DIRECT_DCP_Q_GATHER",
    "MC_FORCE_MNNVL",
    "MC_ENABLE_DEST_DEVICE_AFFINITY",
    "MC_GID_INDEX",
    "MC_SLICE_SIZE",
    "MC_STORE_MEMCPY",
    "MC_WORKERS_PER_CTX",
    "MOONCAKE_CONFIG_PATH",
    "VLLM_MOONCAKE_LOAD_RECV_THREADS",
    "WITH_NVIDIA_PEERMEM",
    # - the allocator SGLang's KV pool is taken from for Mooncake's NVLink transfers: the same bytes from another pool
    "SGLANG_MOONCAKE_CUSTOM_MEM_POOL",
    # - which kernel runs the same weights and cache: AITER on ROCm, FlashInfer's FP8 GEMM, SGLang's JIT norm /
    #   top-k / indexer-metadata kernels and EP mask, ROCm 7.0's kernel variants, fp32 matmul precision, K3's fused
    #   LatentMoE tail; DeepGEMM's JIT precompile and fast warm-up (compile time at start)
    "SGLANG_USE_AITER",
    "SGLANG_ENABLE_FLASHINFER_GEMM",
    "SGLANG_OPT_USE_JIT_NORM",
    "SGLANG_OPT_USE_TOPK_V2",
    "SGLANG_OPT_USE_JIT_INDEXER_METADATA",
    "SGLANG_OPT_USE_FAST_MASK_EP",
    "SGLANG_OPT_USE_ONLINE_COMPRESS",
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
    "SGLANG_USE_ROCM700A",
    # (and SGLang's ROCm decode path for MLA: it picks AttnForwardMethod.MLA_FUSED_ROPE over MLA for decode batches
    # and nothing else, sglang 0.5.7 wheel (PyPI) models/deepseek_v2.py DeepseekV2AttentionMLA.__init__ /
    # _dispatch_mla_subtype; 0.5.11 models/deepseek_common/attention_backend_handler.py; SGLang's cookbook Kimi-K2.6
    # MI350X launch, sgl-project/sglang@0297fc67 docs_new/src/snippets/configs/moonshotai/kimi-k2.6-benchmarks.jsx)
    "SGLANG_ROCM_FUSED_DECODE_MLA",
    "VLLM_FLOAT32_MATMUL_PRECISION",
    "VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION",
    "SGLANG_JIT_DEEPGEMM_PRECOMPILE",
    "SGLANG_JIT_DEEPGEMM_FAST_WARMUP",
    # (and the small-head MLA decode kernel a K3 ROCm container patch selects: agentic/apply_k3_container_patches.sh)
    "VLLM_ROCM_AITER_MLA_ASM_PADDING",
    # - SGLang's piecewise CUDA graphs over the MoE all-to-all: graphs live outside the pool mem_fraction_static
    #   sizes (as --disable-piecewise-cuda-graph, IGNORED above)
    "SGLANG_EXPERIMENTAL_ENABLE_PIECEWISE_CUDA_GRAPH_MOE_A2A",
    # - the prefix tree and its eviction (which pages a request frees or shares, not how many the pool has), a
    #   forced prefix-cache miss, the scheduler's estimate of new tokens when it admits a request, the simulated
    #   acceptance of a speculative benchmark (its speed, not its memory), and chat-template defaults
    "SGLANG_ENABLE_UNIFIED_RADIX_TREE",
    "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT",
    # - MegaMoE's hash-routed layers (InferenceX's dsv4_fp4_b300_sglang.sh and its siblings export it with
    #   SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE): named in no file of the sglang 0.5.11-0.5.23 wheels (PyPI; srt/environ.py
    #   declares no such variable), whose MegaMoE runs DeepSeek-V4's hash layers itself (0.5.15 wheel,
    #   layers/moe/mega_moe.py: the top-k takes input_ids where moe.is_hash), so at every release read it does nothing
    "SGLANG_OPT_FIX_HASH_MEGA_MOE",
    "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS",
    "SGLANG_RADIX_FORCE_MISS",
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION",
    "SGLANG_SIMULATE_ACC_LEN",
    "SGLANG_SIMULATE_ACC_METHOD",
    "SGLANG_SIMULATE_ACC_TOKEN_MODE",
    "SGLANG_DEFAULT_THINKING",
    "SGLANG_DSV4_REASONING_EFFORT",
    # InferenceX's multi-node recipes (@843c6254 benchmarks/multi_node/srt-slurm-recipes/, llm-d-recipes/,
    # amd_utils/models_vllm.yaml), for the same reasons as the blocks above:
    # - UCX / NVSHMEM / NCCL / GDRCopy transport and wiring, Dynamo's request plane, etcd's lease, Mooncake's metrics
    #   and threads, disaggregation timeouts and heartbeats, collective timeouts, SGLang's scheduler broadcast
    "UCX_MEMTYPE_CACHE",
    "UCX_MEMTYPE_REG_WHOLE",
    "UCX_CUDA_IPC_ENABLE_MNNVL",
    "UCX_MAX_RMA_RAILS",
    "UCX_MAX_RNDV_RAILS",
    "UCX_RNDV_SCHEME",
    "UCX_RCACHE_MAX_UNRELEASED",
    "UCX_TCP_AF_PRIO",
    "NVSHMEM_DISABLE_CUDA_VMM",
    "NVSHMEM_CUMEM_HANDLE_TYPE",
    "NVSHMEM_DEBUG",
    "NVSHMEM_INFO",
    "NVSHMEM_ENABLE_NIC_PE_MAPPING",
    "NVSHMEM_HCA_PE_MAPPING",
    "NVSHMEM_REMOTE_TRANSPORT",
    "TORCH_SYMMMEM",
    "NCCL_P2P_LEVEL",
    "NCCL_NET_PLUGIN",
    "NCCL_NET_GDR_C2C",
    "NCCL_WATCHDOG_TIMEOUT",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_DISTRIBUTED_DEFAULT_TIMEOUT",
    "NVIDIA_GDRCOPY",
    "VLLM_SKIP_P2P_CHECK",
    "DYN_REQUEST_PLANE",
    "DYN_REQUEST_PLANE_CODEC",
    "DYN_SKIP_SGLANG_LOG_FORMATTING",
    "ETCD_LEASE_TTL",
    "MC_STORE_CLIENT_METRIC",
    "MC_STORE_CLIENT_METRIC_INTERVAL",
    "MC_TE_METRIC",
    "VLLM_MOONCAKE_STORE_SEND_THREADS",
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
    "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE",
    "SGLANG_DECODE_BOOTSTRAP_TIMEOUT",
    "SGLANG_HACK_SEQ_BOOTSTRAP_ROOM",
    "SGLANG_USE_MESSAGE_QUEUE_BROADCASTER",
    "SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH",
    # - the KV connector's prefetch depth and its cap on the pool's share for prefetched blocks (how the pool is
    #   used, not its size)
    "VLLM_CONNECTOR_PREFETCH_DEPTH",
    "VLLM_CONNECTOR_PREFETCH_KV_CAP",
    # - logging, dev endpoints, caches on disk, host packaging, synchronous launches (speed only)
    "PYTHONUNBUFFERED",
    "VLLM_LOG_STATS_INTERVAL",
    "VLLM_SERVER_DEV_MODE",
    "TILELANG_CLEANUP_TEMP_FILES",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "DG_JIT_CACHE_DIR",
    "PIP_BREAK_SYSTEM_PACKAGES",
    "CUDA_LAUNCH_BLOCKING",
    # - kernel and stream choices for the same weights and cache, the dummy inputs of idle DP ranks, SGLang's
    #   draft-extend graphs (outside the pool), its TP memory-balance check, prefix reuse and chat defaults
    "VLLM_USE_DEEP_GEMM",
    "VLLM_ROCM_USE_AITER_RMSNORM",
    "VLLM_ROUTED_DOWN_PROJ_STREAM_TOKEN_THRESHOLD",
    "VLLM_RANDOMIZE_DP_DUMMY_INPUTS",
    "SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2",
    "SGLANG_FLASHINFER_FP4_GEMM_BACKEND",
    "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH",
    "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK",
    "SGLANG_RADIX_DISABLE_REUSE",
    "SGLANG_ENABLE_THINKING",
    "SGLANG_REASONING_EFFORT",
}
# environment variables the engines' own recipes set whose effect on memory k3plan does not follow: read, the answer
# given as without them, and each named under the answer's caveats with what it changes (issue 47: a recipe's setting
# is never refused for being unknown)
CAVEAT_ENV = {
    "VLLM_USE_V2_MODEL_RUNNER": (
        "vLLM's model runner V2 (vllm/v1/worker/gpu/): k3plan prices the V1 GPUModelRunner's start (profile_run at "
        "max_num_batched_tokens, _dummy_sampler_run, profile_cudagraph_memory); V2's profile run was not read, so "
        "the activation peak subtracted from the pool is V1's; its CUDA-graph estimate is read for DeepSeek-V4: none "
        "before 0.29.0 (engines/vllm/cudagraph.py v2_unprofiled), from 0.29.0 the V1 runner's transfer (V2 then "
        "measures its PIECEWISE graphs whole and extrapolates the FULL ones from two samples)"
    ),
    "VLLM_USE_FLASHINFER_SAMPLER": (
        "FlashInfer's top-k / top-p sampler: k3plan prices the sampler warm-up of PyTorch's sort-based sampler "
        "(engines/vllm/sampler.py); FlashInfer's holds less, so where the warm-up sets the profile peak k3plan's pool may be low"
    ),
    "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS": (
        "AITER fuses the shared experts into the routed MoE as extra experts (vllm/_aiter_ops.py "
        "is_fusion_moe_shared_experts_enabled): k3plan prices them as the separate, TP-split shared MLP"
    ),
    "VLLM_USE_NCCL_SYMM_MEM": (
        "NCCL symmetric-memory all-reduce: its registered buffers, sized by vLLM at start, are not priced"
    ),
    "VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT": (
        "the K3 shared expert sharded under sequence-parallel MoE (the K3 recipe's pd_cluster prefill env): k3plan "
        "prices the shared expert as its stack splits it without the variable"
    ),
    "VLLM_MEMORY_PROFILE_INCLUDE_ATTN": (
        "attention runs in vLLM's profile run: its temporaries join the measured peak, which k3plan prices without them"
    ),
    # InferenceX's single-node nightlies (@843c6254; the scripts named at IGNORED_ENV's InferenceX block)
    "HSA_NO_SCRATCH_RECLAIM": (
        "the ROCm runtime keeps kernels' scratch memory once allocated (InferenceX sets it for MEC firmware < 177): "
        "device memory outside torch's allocator that the engine's measurement sees and k3plan does not price"
    ),
    "SGLANG_AITER_MLA_PERSIST": (
        "AITER's persistent MLA decode kernel: its work-partition metadata buffers are not priced"
    ),
    "VLLM_DSV4_MEGA_FP8_COMBINE": (
        "DeepGEMM MegaMoE's combine in FP8: MegaMoE's communication buffers are not priced, with or without it"
    ),
    "SGLANG_OPT_DEEPGEMM_MEGA_MOE_USE_MXF4_KIND": (
        "DeepGEMM MegaMoE's MXF4 kernel kind (DG_USE_MXF4_KIND): the buffer's size does not read it (engines/sglang/"
        "mega_moe.py), the kernels' other memory with it was not read"
    ),
    "SGLANG_OPT_FIX_NEXTN_MEGA_MOE": (
        "MegaMoE in the MTP (NextN) layer (the 0.5.15 wheel does not read it): the draft layer's MoE memory with it "
        "was not read"
    ),
    "SGLANG_SHARED_EXPERT_TP1": (
        "the shared expert held whole on every rank (TP 1): k3plan holds it as its SGLang stack splits it (TP-split "
        "without an all-to-all MoE backend), so there the weights a GPU are low by (TP - 1) / TP of the shared experts"
    ),
    "SGLANG_DP_SHARED_EXPERT_LOCAL": (
        "the shared expert run locally in each DP-attention group: k3plan holds it as its SGLang stack splits it"
    ),
    # InferenceX's multi-node recipes (@843c6254 benchmarks/multi_node/srt-slurm-recipes/)
    "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": (
        "the sparse indexer's logits workspace in the profile run: k3plan prices vLLM's default 512 MiB "
        "(engines/vllm/dsv4_workspace.py), not the command's value"
    ),
    "VLLM_V2_WARMUP_MAX_NUM_SEQS": "the V2 model runner's warm-up batch: V2's warm-up was not read",
    # (and InferenceX's GB200 DeepSeek-V4 disaggregated prefill workers, the recipe disagg-gb200-1p1d-dep8-tep8.yaml
    # at 42d9107fc^): vllm 0.20.0 wheel (PyPI) fused_moe/router/router_factory.py create_fused_moe_router
    # returns RoutingSimulatorRouter for any non-empty value, whose top-k ids and weights have the real router's
    # shapes (router/routing_simulator_router.py), but whose routing_method_type is Simulated, which FusedMoE hands
    # its kernel oracle (fused_moe/layer.py: routing_method=self.routing_method_type)
    "VLLM_MOE_ROUTING_SIMULATION_STRATEGY": (
        "simulated MoE routing (RoutingSimulatorRouter): the same top-k tensors, but its routing method (Simulated) "
        "rules out the monolithic kernels that accept only their own routing (TRT-LLM's): k3plan prices the MoE "
        "kernel the model's own routing selects"
    ),
    "VLLM_ALLREDUCE_USE_SYMM_MEM": "vLLM's symmetric-memory all-reduce: its registered buffers are not priced",
    "SGLANG_MOE_NVFP4_DISPATCH": "DeepEP's dispatch in NVFP4: DeepEP's buffers are not priced, with or without it",
    "SGLANG_HACK_FLASHMLA_BACKEND": (
        "SGLang's DeepSeek-V4 FlashMLA replaced by another attention backend (InferenceX's ROCm V4 lines: "
        "unified_kv_triton): its cache layout was not read; the pool is priced as SGLang's default DeepSeek-V4 pool"
    ),
}
# speculative decoding's flags: vLLM's --speculative-config is read (engines/vllm/spec.py), SGLang's algorithm and its
# companions (the draft's steps, top-k, draft tokens and checkpoint) by engines/sglang/spec.py; one left unread by the
# command's family (another engine's spelling) is refused by name, with why
SPECULATIVE_FLAGS = (
    "--speculative-config",
    "--speculative-algorithm",
    "--num-speculative-tokens",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-draft-model-path",
    "--speculative-algo",  # the multi-node recipes' spelling (srt-slurm-recipes/sglang/)
    "--speculative-attention-mode",
)
# the caveats above that take a value, not a switch: any value set is one k3plan does not follow
CAVEAT_ENV_VALUED = frozenset(
    {
        "SGLANG_HACK_FLASHMLA_BACKEND",
        "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB",
        "VLLM_V2_WARMUP_MAX_NUM_SEQS",
        "VLLM_MOE_ROUTING_SIMULATION_STRATEGY",
    }
)
# what no flag holds: C0 and C1 controls (a pasted terminal escape: ESC, CSI \x9b; safeparse's reader refuses the same
# range in a file) and Unicode's line and paragraph separators (NEL \x85, \u2028, \u2029: echoed in an error, one line
# would print as two); tab and newline split as spaces
CONTROL = frozenset(map(chr, [*range(32), *range(0x7F, 0xA0), 0x2028, 0x2029])) - {"\t", "\n", "\r"}


def mm_zero_limits(raw: str) -> frozenset[str]:
    """The modalities vLLM's --limit-mm-per-prompt sets to 0: its JSON ('{"image": 0, "video": {"count": 0}}') or the
    older 'image=0,video=1' form (vllm/config/multimodal.py MultiModalConfig.limit_per_prompt: a count or a dict with
    one); a value neither reads is refused (one line)."""
    text = raw.strip()
    try:
        parsed = json.loads(text) if text.startswith("{") else dict(kv.split("=", 1) for kv in text.split(",") if kv)
        counts = {str(k).strip(): int(v["count"] if isinstance(v, dict) else v) for k, v in parsed.items()}
    # OverflowError: a count of 1e309 (JSON's infinity), whose int() has no value
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        raise K3PlanError(
            f'--serve: --limit-mm-per-prompt {raw!r}: expected JSON such as \'{{"image": 0, "video": 0}}\' or '
            "image=0,video=0"
        ) from None
    return frozenset(k for k, n in counts.items() if n == 0)


@dataclass(frozen=True)
class ServeQuestion:
    """What a serve command asks, in fit's terms."""

    engine: str  # vllm | sglang
    model: str
    stack: str
    tp: int
    pp: int
    dp: int
    ep: int | None
    context: int | None  # --max-model-len / --context-length as given; None: the model's own maximum
    chunk: int | None
    batch: int  # max_num_seqs / max_running_requests: as given, else the engine's default (batch_source)
    stack_options: dict[str, str]
    kv_dtype: str | None
    ignored: tuple[str, ...] = field(default=())
    kv_raw: str = "auto"  # --kv-cache-dtype as written (vLLM's nvfp4_ds_mla: engines/vllm/dsv4_pages.py)
    caveats: tuple[str, ...] = field(default=())  # flags read whose effect k3plan's figures do not follow
    expert_parallel: bool = True  # vLLM's --enable-expert-parallel (SGLang: its own EP flags)
    # the EP size the engine's rules read (Reading.engine_ep): ``ep``, or SGLang's --ep-size between 1 and --tp-size,
    # where ``ep`` is None (the mesh's experts over every rank: the same routed bytes a device)
    engine_ep: int | None = None
    eplb: tuple[int, int] | None = None  # vLLM's --enable-eplb: (redundant experts, window) (engines/vllm/eplb.py)
    attention_backend: str | None = None  # SGLang's --attention-backend as given (engines/sglang/aiter_fraction.py)
    language_model_only: bool = False  # vLLM's --language-model-only: a multimodal model's vision tower not loaded
    # the modalities --limit-mm-per-prompt sets to 0 (Engine.tower_off_by_limits: a tower whose every modality is 0
    # is not built)
    mm_zero_limits: frozenset[str] = frozenset()
    moe_backend: str | None = None
    moe_runner: str | None = None  # SGLang's --moe-runner-backend as given (Stack.moe_runner)
    max_running_requests: int | None = None  # SGLang's --max-running-requests as given (None: its own default)
    batch_source: str = "the command's flag"
    chunk_source: str = "the command's flag"
    context_auto: bool = False  # vLLM's --max-model-len auto / -1: the engine fits the length to its pool
    num_gpu_blocks_override: int | None = None  # vLLM's --num-gpu-blocks-override: the pool's block count
    kv_cache_memory_bytes: int | None = None  # vLLM's --kv-cache-memory-bytes: the pool a GPU, as given
    # vLLM's --disable-hybrid-kv-cache-manager where it changes the pool's layout (DeepSeek-V4's caches in one group:
    # engines/vllm/dsv4_pages.py dsv4_unified_pages)
    hybrid_kv_off: bool = False
    block_size: int | None = None  # --block-size as given
    env: dict[str, str] = field(default_factory=dict)  # VAR=value prefixes
    # --engram-config's placement as k3plan's --engram ("hbm" / "host"); None: the engine's default
    engram: str | None = None
    # vLLM's --engram-config dp_shared_memory: "node", one host copy a node (None: the engine's default)
    engram_host_copies: str | None = None
    engram_flag: bool = False  # --engram-config given (vLLM and SGLang refuse it for a model without Engram)
    # speculative decoding as read: vLLM's --speculative-config (k3plan.engines.vllm.spec.SpecServe), SGLang's
    # --speculative-* flags (k3plan.engines.sglang.spec.SglangSpec); None: none
    speculative: Any = None
    # what the engine holds for it, set by fit (k3plan.engines.vllm.spec.DraftPricing,
    # k3plan.engines.sglang.spec.SglangDraft)
    draft: Any = None
    # vLLM's --compilation-config / --enforce-eager as read (k3plan.engines.vllm.cudagraph.CompilationRead): the
    # graphs its profiler captures and subtracts; None: not a vLLM GPU command
    compilation: Any = None
    # vLLM's --attention-config fields as read (k3plan.engines.vllm.attention_config); None: not given
    attention: Any = None
    # the engine release the command runs (fit --engine-version, k3plan.engines.release, or the family's newest read
    # where the command names none: release_default); None: each rule's commit
    release: Any = None
    release_default: bool = False
    # the engine's main commit fit --engine-version named (an EngineCommit, k3plan.engines.release; ``release`` is
    # then the release it follows), for the rules gated at the commit that changed them; None: a release or none
    commit: Any = None
    # config fields set over the checkpoint's config before the model is built (serve_values.read_hf_overrides)
    hf_overrides: tuple[tuple[str, int], ...] = ()
    max_total_tokens: int | None = None  # SGLang's --max-total-tokens as given (None: the pool's own size)
    # SGLang's decode CUDA-graph max batch as given, and its release's cap on the default one (Stack.decode_graph_bs,
    # decode_graph_cap); None: the GPU class's
    decode_graph_bs: int | None = None
    decode_graph_cap: int | None = None
    decode_graph_off: bool = False  # SGLang's decode CUDA graphs off (Stack.decode_graph_off)
    # SGLang's prefill graph as the command sets it (Stack.prefill_backend, prefill_conditions)
    prefill_backend: str | None = None
    prefill_conditions: tuple[str, ...] = ()
    page_size: int | None = None  # SGLang's --page-size as given (None: its default, 1)
    # SGLang's --swa-full-tokens-ratio as given (None: its default; DeepSeek-V4: engines/sglang/dsv4_pool.py)
    swa_full_tokens_ratio: float | None = None
    # SGLang's DeepSeek-V4 compressor-state element, bytes (SGLANG_DSV4_COMPRESS_STATE_DTYPE: 4 float32, its default;
    # 2 bfloat16): engines/sglang/serve.py dsv4_state_dtype_env
    dsv4_state_bytes: int = 4
    # SGLang's --swa-prefix-tails as given (None: its default, 4 x max_running_requests a worker with the radix cache;
    # DeepSeek-V4.1's cap-mode headroom: engines/sglang/dsv4_pool.py PREFIX_TAILS_SOURCE)
    swa_prefix_tails: int | None = None
    # SGLang's --max-mamba-cache-size and --mamba-full-memory-ratio as given (None: its defaults; the state pool's
    # sizing, engines/sglang/memory.py SGLANG_MAMBA)
    mamba_cache_size: int | None = None
    # buffers the engine's model holds beside its weights, in the weights' measurement: (bytes a device, what and
    # where); None: none priced
    model_buffers: tuple[int, str] | None = None
    mamba_full_memory_ratio: float | None = None
    # SGLang's --enable-symm-mem pool a GPU, allocated after its KV pool out of the 1 - mem_fraction_static share
    # (engines/sglang/serve.py symm_mem; the start check: engines/sglang/memory.py sglang_kv_pool); 0: none
    symm_mem_bytes: int = 0
    symm_mem_source: str = ""
    # SGLang's MegaMoE buffer: the tokens a rank it is sized for and FP4 dispatch, where priced (engines/sglang/serve.py
    # mega_moe; sized in app/fit.py where the model is known: engines/sglang/mega_moe.py); 0: none priced
    mega_moe_cap: int = 0
    mega_moe_fp4_acts: bool = False
    # SGLang's DeepEP buffer as read: (mode, configs, tokens a rank), sized in app/fit.py where the model is known
    # (engines/sglang/deepep.py); None: none built
    deepep: Any = None
    # vLLM's --decode-context-parallel-size, SGLang's --dcp-size: each rank of the group holds 1/dcp of a request's
    # attention KV (the start check prices it: engines/vllm/memory.py vllm_kv_pool, engines/sglang/memory.py
    # sglang_kv_pool); 1: none
    dcp: int = 1
    # vLLM's --async-scheduling / --no-async-scheduling as given (None: the engine's default, on since v0.14.0)
    async_scheduling: bool | None = None
    # the LM head split over the engine's whole TP group under DP attention, where the command runs it so (a Cite of
    # the engine's code: Stack.with_lm_head_whole_tp); None: the stack's own rule
    lm_head_whole_tp: Any = None
    # the shared experts whole on every device where the engine fuses them into the routed MoE as tp_size clones (a
    # Cite: Stack.with_shared_expert_whole; SGLang 0.4.6); None: the stack's own split
    shared_expert_whole: Any = None
    # the dense layers' MLP whole on every device where the command runs it so (a Cite: Stack.with_dense_mlp_whole;
    # SGLang's --moe-dense-tp-size 1); None: the stack's own split
    dense_mlp_whole: Any = None
    # (roles, Cite): the dense MLP / shared-expert roles split over the engine's whole TP group under DP attention
    # (SGLang 0.4.3-0.5.23 read: engines/sglang/serve.py mlp_whole_tp; Stack.with_mlp_whole_tp); None: the stack's own split
    mlp_whole_tp: Any = None
    # (copies, why): the routed experts held that many times a rank where the checkpoint's are block FP8 (SGLang
    # 0.4.8.post1-0.4.9.post4's EP MoE under aiter: engines/sglang/ep_moe_copy.py; Stack.expert_copies); None: once
    expert_copies: Any = None
    # (format, why): DeepSeek-V4's FP4 experts (ds_fp4) in the form the command's release and GPU hold them
    # (engines/sglang/fp4_scales.py; Stack.with_expert_format); None: the stack's own runtime format
    expert_format: Any = None

    @property
    def stack_ref(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.stack_options.items())
        return f"{self.stack}:{opts}" if opts else self.stack


def model_of(name: str) -> str:
    """A Hugging Face id (HF_MODELS, exact) or a bundled model's own name (k3plan's launch lines) -> the bundled
    model; anything else is refused by name (a checkpoint k3plan would otherwise price as another's bytes)."""
    from k3plan.models.loader import bundled_models

    key = name.strip().rstrip("/").lower()
    if key in bundled_models():
        return key
    from k3plan.models.hub import bundled_of  # each bundled model's own id, as k3plan's launch lines write it

    if bundled_of(key):
        return str(bundled_of(key))
    if key in HF_MODELS:
        return HF_MODELS[key]
    if key.startswith(("/", "./", "../", "~")):  # InferenceX's nightlies serve from local copies (/lustre/...)
        raise K3PlanError(
            f"--serve: model {name!r} is a local path: k3plan cannot tell which checkpoint it holds; write the "
            f"checkpoint's Hugging Face id in its place (one of {', '.join(priced_ids())})"
        )
    mark = next((m for m in UNPRICED_MARKS if m in key.replace("_", "-").split("/")[-1].split("-")), None)
    why = (
        f"its name says a {mark.upper()} conversion, whose bytes k3plan does not price"
        if mark
        else "k3plan bundles no config for that checkpoint and will not price it as another's"
    )
    raise K3PlanError(
        f"--serve: model {name!r} is not a checkpoint k3plan can price ({why}); expected one of "
        f"{', '.join(priced_ids())} or a bundled model name ({', '.join(bundled_models())})"
    )


def priced_ids() -> list[str]:
    """Every Hugging Face id --serve reads (lower case, as the Hub resolves them): HF_MODELS and each bundled
    model's own id (its provenance.json's, models.hub.hf_id)."""
    from k3plan.models.hub import hf_id
    from k3plan.models.loader import bundled_models

    return sorted(set(HF_MODELS) | {i.lower() for i in map(hf_id, bundled_models()) if i})


def _split(command: str) -> list[str]:
    """The command as the shell would pass it: one line (backslash-newline continuations joined), no control
    characters (a pasted terminal escape is not part of any flag), quotes balanced."""
    bad = next((i for i, ch in enumerate(command) if ch in CONTROL), None)
    if bad is not None:
        raise K3PlanError(
            f"--serve: the command holds a control character ({command[bad]!r} at position {bad}): paste the "
            "command as plain text"
        )
    joined = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        argv = shlex.split(joined)
    except ValueError as err:
        raise K3PlanError(f"--serve: cannot split the command ({err}); expected a shell command line") from None
    for tok in argv:
        _shallow(tok)
    return argv


def _shallow(tok: str) -> None:
    """A value nesting brackets deeper than safeparse.MAX_DEPTH (64, every JSON / YAML file k3plan reads) is refused
    before any reader parses it: json.loads recurses once a level and, near Python's recursion limit, raises
    RecursionError, not the ValueError each config flag's reader refuses. An engine's config nests a few levels
    (--additional-config '{"sharding": {"sharding_strategy": {...}}}' three); brackets inside strings count too."""
    from k3plan.safeparse import MAX_DEPTH

    depth = top = 0
    for ch in tok:
        depth = depth + 1 if ch in "[{" else max(0, depth - 1) if ch in "]}" else depth
        top = max(top, depth)
    if top > MAX_DEPTH:
        raise K3PlanError(
            f"--serve: {tok[:40]!r}... nests brackets more than {MAX_DEPTH} deep; expected a JSON value such as "
            """'{"method": "mtp"}'"""
        )


def _env_prefix(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """``VAR=value ... vllm serve ...``: the environment a command sets for the engine, and the command."""
    import re

    env: dict[str, str] = {}
    i = 0
    while i < len(argv) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[i]):
        name, _, value = argv[i].partition("=")
        env[name] = value
        i += 1
    if i < len(argv) and argv[i] == "env":  # `env VAR=value cmd`
        more, rest = _env_prefix(argv[i + 1 :])
        return {**env, **more}, rest
    return env, argv[i:]


# the command families k3plan reads, each in its own folder (engines/<engine>/serve.py): the commands that start it
# (COMMANDS), its reading of the flags (read, finish), the environment it reads (KNOWN_ENV, check_env) and its
# refusal of a context above the model's (LONG_CONTEXT_ENV, long_context_refusal); the order is the unknown
# command's refusal's
FAMILIES = (vllm_serve, sglang_serve)
FAMILY_OF = {f.ENGINE: f for f in FAMILIES}
# a switch any family declares (argparse BooleanOptionalAction: --X and --no-X, no value) splits as a switch in every
# command: the tokens split the same whichever family reads them
SWITCHES = frozenset().union(*(f.SWITCHES for f in FAMILIES))
# flags that take one or more values (argparse nargs="+": a list of CUDA-graph sizes): their values up to the next flag
NARGS = frozenset().union(*(f.NARGS for f in FAMILIES))


def _family(argv: list[str]):
    """The family whose command ``argv`` is (its COMMANDS' first tokens), the positional MODEL (None where the
    command takes none or gives none) and the flags after them."""
    for family in FAMILIES:
        for cmd in family.COMMANDS:
            if cmd.matches(argv):
                rest = argv[len(cmd.prefix) :]
                if cmd.positional_model and rest and not rest[0].startswith("-"):
                    return family, rest[0], rest[1:]
                return family, None, rest
    usages = [cmd.usage for family in FAMILIES for cmd in family.COMMANDS]
    got = argv[0] if argv else "nothing"
    raise K3PlanError(
        f"--serve: {got!r} is not an engine k3plan reads; expected {', '.join(usages[:-1])} or {usages[-1]}"
    )


def _flags(rest: list[str]) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / switches -> name -> value (the engine takes the last occurrence)."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("-") or tok in ("-", "--"):
            raise K3PlanError(f"--serve: unexpected argument {tok!r}; expected --flag [value]")
        name, eq, val = tok.partition("=")
        takes = IGNORED.get(name)
        switch = name in SWITCHES or (name.startswith("--no-") and "--" + name[5:] in SWITCHES)
        if eq:
            value = val
            i += 1
        elif name in NARGS and i + 1 < len(rest) and not rest[i + 1].startswith("-"):
            j = i + 1
            while j < len(rest) and not rest[j].startswith("-"):
                j += 1
            value, i = " ".join(rest[i + 1 : j]), j
        elif not switch and takes != 0 and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value = rest[i + 1]
            i += 2
        else:
            value = "true"
            i += 1
        if name.startswith("--no-") and "--" + name[5:] in SWITCHES:
            name, value = "--" + name[5:], "false"
        flags[name] = value  # the engine takes the last occurrence
    for name, value in flags.items():
        if value == "" and IGNORED.get(name) != 0 and name not in SWITCHES:
            raise K3PlanError(f"--serve: {name}= is empty; expected a value")
    return flags


def parse_serve(
    command: str,
    *,
    platform: str,
    device_gib: float | None = None,
    device_name: str = "",
    release: tuple[int, int, int] | None = None,
    release_post: int = 0,
    commit: Any = None,
) -> ServeQuestion:
    """``platform``: the hardware's kind ("tpu" or "gpu"): vllm serve on a TPU is torchtpu-vllm, on a GPU vllm.
    ``device_gib`` / ``device_name``: the device's memory and name, for the defaults the engine picks by them
    (vLLM's max_num_seqs and max_num_batched_tokens, SGLang's chunked_prefill_size). ``release`` / ``release_post``:
    the release the command runs and its post-release number (k3plan.engines.release parse_release, parse_post).
    ``commit``: the engine's main commit named instead (an EngineCommit; ``release`` the release it follows)."""
    env, argv = _env_prefix(_split(command))
    llm = None
    for hook in (getattr(f, "translate", None) for f in FAMILIES):  # a script that starts a family's engine class
        if hook is not None and llm is None:
            argv, env, llm = hook(argv, env)
    family, model, rest = _family(argv)
    # without fit --engine-version a family's GPU command is read as the newest release k3plan read of its engine
    # (Engine.newest_release_read: engines/vllm/releases.py, engines/sglang/releases.py), where the engine names one
    from k3plan.engines.registry import find_engine

    engine = find_engine(family.ENGINE) if platform == "gpu" else None
    newest = engine.newest_release_read if engine is not None else None
    release_default = release is None and newest is not None
    if release_default:
        release = newest
    try:
        # its parser's spellings, of that release (and post-release: SGLang's options by release read)
        model, rest = family.tokens(
            model, rest, release=release, release_post=release_post if not release_default else 0
        )
    except K3PlanError as e:
        if not release_default or release is None:
            raise
        from k3plan.engines.release import release_text

        # a spelling the newest release's parser refuses may be one an older release took: say which was read
        raise K3PlanError(
            f"{e} (read as {family.ENGINE} {release_text(release)}, the newest release k3plan read: a command of an "
            "older release names it with fit --engine-version)"
        ) from None
    flags = _flags(rest)
    r = Reading(
        flags=flags,
        platform=platform,
        device_gib=device_gib,
        device_name=device_name,
        env=env,
        model=model,
        release=release,
        release_post=release_post if not release_default else 0,
        commit=commit,
        resolve=model_of,
    )
    if llm is not None:
        r.llm_class = llm.kind
        r.ignored += llm.ignored
    family.read(r)  # the family's flags, in its order, with the shared readers above
    resolved = model_of(r.model or "")  # a checkpoint k3plan cannot price is refused before any flag
    for spec in SPECULATIVE_FLAGS:
        if spec in flags:  # each family reads its own (engines/vllm/spec.py, engines/sglang/spec.py)
            raise K3PlanError(
                f"--serve: {spec} is not {family.ENGINE}'s speculative-decoding flag; write the command's own "
                "spelling, or use fit's --spec-tokens"
            )
    lm_only = flags.get("--language-model-only", "false").lower() not in ("false", "0")
    if not lm_only:
        flags.pop("--language-model-only", None)  # --no-language-model-only: vLLM's default, the tower loads
    mm_raw = flags.get("--limit-mm-per-prompt")
    mm_zero = mm_zero_limits(mm_raw) if mm_raw is not None else frozenset()
    block_raw = flags.get("--block-size")
    if block_raw is not None:  # else as the family read it (tpu-inference's dense-MLA page) or None
        r.block = flag_int("--block-size", block_raw)
    revision = flags.pop("--revision", None)
    if revision is not None:  # the checkpoint's HF revision: read where it is the one the bundled config was read at
        from k3plan.models.loader import bundled_revisions

        cited = bundled_revisions(resolved)
        if revision.strip() not in cited:
            raise K3PlanError(
                f"--serve: --revision {revision}: not a revision k3plan's {resolved} config was read at "
                f"({', '.join(sorted(cited)) or 'its provenance cites none'}: models/bundled/{resolved}/"
                "provenance.json revisions_cited); another revision's config is not priced"
            )
        r.ignored.append("--revision")
    for name in list(flags):
        if name in IGNORED:
            check_ignored_value(name, flags[name])
            r.ignored.append(name)
            flags.pop(name)
    if flags:
        raise K3PlanError(
            f"--serve: flag {sorted(flags)[0]} is not one k3plan reads or knows to be harmless; remove it"
        )
    unknown_env = sorted(set(env) - IGNORED_ENV - set(CAVEAT_ENV) - set().union(*(f.KNOWN_ENV for f in FAMILIES)))
    for name in unknown_env:
        if name in UNPRICED_ENV:
            raise K3PlanError(
                f"--serve: {name}: {UNPRICED_ENV[name]} is not priced by k3plan; remove it to price the engine without"
            )
    if unknown_env:
        raise K3PlanError(
            f"--serve: environment variable {unknown_env[0]} is not one k3plan reads or knows to be harmless; remove it"
        )
    for f in FAMILIES:  # a family's own variables (OWN_ENV) on another family's command: nothing reads them there
        theirs = sorted(getattr(f, "OWN_ENV", frozenset()) & set(env)) if f is not family else []
        if theirs:
            raise K3PlanError(f"--serve: {theirs[0]}: {f.ENGINE}'s variable, read only on its own commands; remove it")
    for f in FAMILIES:  # a variable is the same variable whichever command it prefixes
        f.check_env(env, stack=r.stack)
    r.ignored += [shown_env(k, v) for k, v in env.items() if k in IGNORED_ENV and k not in r.env_read]
    on = {k for k, v in env.items() if k in CAVEAT_ENV and (env_on(v) or (k in CAVEAT_ENV_VALUED and v.strip()))}
    r.caveats += [f"{k}={v}: {CAVEAT_ENV[k]}" for k, v in env.items() if k in on]
    r.ignored += [shown_env(k, v) for k, v in env.items() if k in CAVEAT_ENV and k not in on]
    family.finish(r)  # the stack it maps to, its caveats and the defaults it picks for what the command left out
    storage = fp4_storage(resolved)
    if storage is not None and device_name:  # a 4-bit checkpoint priced as stored only where its engine holds it so
        from k3plan.engines.fp4_paths import fp4_refusal
        from k3plan.engines.registry import engine_rules
        from k3plan.hardware.loader import load_hardware

        why = fp4_refusal((storage,), hardware=load_hardware(device_name), engine=engine_rules(r.stack))
        if why is not None:
            raise K3PlanError(f"--serve: {r.model or resolved}: {why}")
    kv_dtype = KV[r.kv_raw]
    from k3plan.engines.registry import engine_rules as rules_of

    resolves = platform == "gpu" and rules_of(r.stack).resolves_checkpoint_kv(release)  # Stack.checkpoint_kv's rule
    if kv_dtype is None and resolves and (ckpt_kv := checkpoint_kv_dtype(resolved)) is not None:
        kv_dtype = ckpt_kv
        r.caveats.append(f"--kv-cache-dtype {r.kv_raw}: an {ckpt_kv} KV cache, {CHECKPOINT_KV_SOURCE}")
    return ServeQuestion(
        engine=family.ENGINE,
        model=resolved,
        stack=r.stack,
        tp=r.tp,
        pp=r.pp,
        dp=r.dp,
        ep=r.ep,
        engine_ep=r.engine_ep,
        context=r.context,
        chunk=r.chunk,
        batch=r.batch,
        stack_options=r.options,
        kv_dtype=kv_dtype,
        kv_raw=r.kv_raw,
        ignored=tuple(r.ignored),
        caveats=tuple(r.caveats),
        expert_parallel=r.expert_parallel,
        eplb=r.eplb,
        attention_backend=r.attention_backend,
        moe_backend=r.moe_backend,
        moe_runner=r.moe_runner,
        language_model_only=lm_only or r.text_only,
        mm_zero_limits=mm_zero,
        max_running_requests=flag_int("--max-running-requests", r.running) if r.running is not None else None,
        batch_source=r.batch_source,
        chunk_source=r.chunk_source,
        context_auto=r.context_auto,
        num_gpu_blocks_override=r.blocks_override,
        kv_cache_memory_bytes=r.kv_cache_memory_bytes,
        hybrid_kv_off=r.hybrid_kv_off,
        block_size=r.block,
        env=env,
        engram=r.engram,
        engram_host_copies=r.engram_host_copies,
        engram_flag=r.engram_flag,
        speculative=r.speculative,
        compilation=r.compilation,
        attention=r.attention,
        async_scheduling=r.async_scheduling,
        max_total_tokens=r.max_total_tokens,
        decode_graph_bs=r.decode_graph_bs,
        decode_graph_cap=r.decode_graph_cap,
        decode_graph_off=r.decode_graph_off,
        prefill_backend=r.prefill_backend,
        prefill_conditions=r.prefill_conditions,
        page_size=r.page_size,
        swa_full_tokens_ratio=r.swa_ratio,
        dsv4_state_bytes=r.dsv4_state_bytes,
        swa_prefix_tails=r.swa_prefix_tails,
        mamba_cache_size=r.mamba_cache_size,
        model_buffers=r.model_buffers,
        mamba_full_memory_ratio=r.mamba_ratio,
        symm_mem_bytes=r.symm_mem_bytes,
        symm_mem_source=r.symm_mem_source,
        mega_moe_cap=r.mega_moe_cap,
        mega_moe_fp4_acts=r.mega_moe_fp4_acts,
        deepep=r.deepep,
        dcp=r.dcp,
        lm_head_whole_tp=r.lm_head_whole_tp,
        shared_expert_whole=r.shared_expert_whole,
        dense_mlp_whole=r.dense_mlp_whole,
        expert_copies=r.expert_copies,
        expert_format=r.expert_format,
        mlp_whole_tp=r.mlp_whole_tp,
        release=release,
        release_default=release_default,
        commit=commit,
        hf_overrides=r.hf_overrides,
    )


def check_context(q: ServeQuestion, model_max: int | None) -> None:
    """The engine's own refusal of a context above the model's maximum (each family's rule, cited in its folder's
    serve.py), before k3plan prices anything: bad input, one line."""
    family = FAMILY_OF[q.engine]
    if (
        q.context is not None
        and model_max
        and q.context > model_max
        and q.env.get(family.LONG_CONTEXT_ENV, "").strip() not in ("1", "true", "True")
    ):
        raise K3PlanError(family.long_context_refusal(q.context, model_max))
