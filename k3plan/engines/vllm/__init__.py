"""vLLM (vllm-project/vllm) on GPUs: its stack (``stack.yaml``), its KV-pool sizing (``memory.py``: Worker's
profile run, the KV cache groups, the start checks), its DeepSeek-V4 cache layout and Engram placement
(``dsv4.py``). Its rules also price a stack YAML no folder holds (``prices_unnamed``)."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.vllm import dsv4
from k3plan.engines.vllm.eplb import redundant_expert_pad
from k3plan.engines.vllm.mla_block import dense_mla_block
from k3plan.engines.vllm.moe_padding import expert_shard_pad
from k3plan.engines.vllm.releases import (
    NEWEST_READ,
    NEWEST_RELEASE,
    hybrid_mla_align,
    in_flight_batches,
    option_defaults,
)

ENGINE = Engine(
    engine_loop="vllm",  # vLLM's own engine loop: vLLM's published host time a step (engines/vllm/speed.py)
    name="vllm",
    package="vllm",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="vllm",
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    # vLLM's own on the GPUs of its K3 recipe: second of the default stacks (a TPU gets torchtpu-vllm first)
    default_rank=1,
    loads_vision_tower=True,
    tower_off_by_limits=(
        (
            "kimi_k25",
            (0, 16, 0),
            frozenset({"vision_chunk"}),
            "vllm 0.16.0 / 0.18.0 / 0.20.0 / 0.33.0 wheels (PyPI), vllm/model_executor/models/kimi_k25.py "
            "KimiK25ForConditionalGeneration.__init__ ('with self._mark_tower_model(vllm_config, \"vision_chunk\")') "
            "and models/interfaces.py SupportsMultiModal._mark_tower_model (the tower built as StageMissingLayer, no "
            "weights, where 'all(mm_config.get_limit_per_prompt(m) == 0 for m in modalities)'; a modality not given "
            "counts 999: config/multimodal.py get_limit_per_prompt); 0.15.1 builds it unconditionally",
        ),
    ),
    prices_unnamed=True,
    by_release=(
        "the profile run's sampler warm-up follows it (0.8.4-0.16.x sort the top-k / top-p mask, "
        "engines/vllm/sampler.py), and so does the MoE workspace FP8-block experts leave under it (from 0.14.0 on "
        "SM90 and ROCm: Triton's, FlashInfer CUTLASS's on SM90 in 0.15-0.16 and under EP from 0.17.0, over the "
        "DP ranks' gathered tokens, chunked to 0.17.x: engines/vllm/moe_workspace.py), "
        "the default token budget of a >= 160 GiB GPU (16,384 from 0.28.0, "
        "engines/vllm/serve.py VLLM_HUGE_TIER_FROM) and the batches in flight a DeepSeek-V4 windowed group holds "
        "pages for (2 under async scheduling from 0.26.0, engines/vllm/memory.py in_flight_batches) and the "
        "DeepSeek-V4 groups' pages and block bytes (unpadded from 0.27.0, the largest group's block and a null block "
        "from 0.29.0: engines/vllm/dsv4_pages.py v4_form), the sparse indexer's profile-run K buffer (16 x "
        "max_model_len above 256K tokens from 0.32.0, 40 x before: engines/vllm/dsv4_workspace.py "
        "prefill_buffer_factor), a DeepSeek-V4.1 block on SM100 (whole rows of both records from 0.33.0: "
        "engines/vllm/dsv4_pages.py V41_STRIDE_FROM), DeepSeek-V4's TP-split MXFP4 expert shards on gfx942 (256 to "
        "0.30.0, 128 from 0.31.0: engines/vllm/moe_padding.py MOE_SHARD_RULES_FROM), the Engram tables' defaults (a "
        "host copy a node with DP from 0.31.0, a replica's before: engines/vllm/engram.py ENGRAM_WHEEL_FROM) and the "
        "batches in flight at PP > 1 "
        "(PP + 1 under async "
        "scheduling from 0.34.0, the V1 runner gone: engines/vllm/releases.py ONE_RUNNER_FROM); from 0.34.0 the "
        "pool is what the extensible KV cache measures after warmup and graph capture, gpu_memory_utilization 1.0 by "
        "default (engines/vllm/extensible.py EXTENSIBLE_FROM), the 0.34 configurations whose sizing was not read "
        "refused (engines/vllm/serve.py refuse_unread_034); "
        "before 0.11.1, read in the 0.8.4, 0.8.5, 0.9.0, 0.9.2, 0.10.0-0.10.2 and 0.11.0 wheels: the sampler warm-up "
        "sorts as the wheel installs it, without FlashInfer (engines/vllm/sampler.py OLD_WHEELS_SOURCE); the large "
        "default token budget and batch go by the device's name (h100 / h200) in 0.8.4 (engines/vllm/serve.py "
        "VLLM_LARGE_BY_MEMORY_FROM) and include an A100 before 0.9.0 (VLLM_A100_SMALL_FROM); the default batch is not "
        "cut to the token budget before 0.10.1, where SchedulerConfig refuses the command (SEQS_CLAMP_FROM); "
        "VLLM_USE_V1=0 runs the V0 engine before 0.11.0, said, not priced (V0_GONE_FROM); "
        "k3plan's other vLLM rules are the code each cites"
    ),
    # the 0.8.4 wheel (the V1 worker's and the FlashMLA block of 64 as 0.8.5's: 0.8.4 / 0.8.5's
    # Worker.determine_available_memory takes utilization x the device's total less torch's peak and every non-torch
    # byte, the terms k3plan prices; the sampler warm-up's sort, engines/vllm/sampler.py)
    oldest_release_read=(0, 8, 4),
    newest_release_read=NEWEST_RELEASE,  # 0.33.0: a GPU question that names no release is read as it (releases.py)
    latest_release_read=NEWEST_READ,  # 0.34.0: read, priced under --engine-version (releases.py)
    dense_mla_block=dense_mla_block,  # a dense-MLA model's block by release and GPU family (mla_block.py)
    hybrid_mla_align=hybrid_mla_align,  # a hybrid MLA model's block aligned to 128 from 0.27.0 (releases.py)
    windowed_in_flight=in_flight_batches,  # DeepSeek-V4's windowed groups: batches in flight by release and scheduling
    expert_shard_pad=expert_shard_pad,  # a TP-split expert shard padded by the model's rule (moe_padding.py)
    redundant_expert_pad=redundant_expert_pad,  # EPLB's redundant experts a rank holds (eplb.py)
    scheduling_default=(
        True,
        "the engine's default from v0.14.0 (vllm-project/vllm#27614): vllm/config/vllm.py VllmConfig.__post_init__ "
        "sets scheduler_config.async_scheduling = True where the command leaves it None, unless the runner pools, "
        "the speculative method is not EAGLE/MTP/n-gram/draft-model/DSpark, the drafter batch is unpadded, the "
        "executor cannot, or ROCm DeepEP high-throughput DBO (@000fc94b)",
    ),
    # the FP4 checkpoints whose held bytes were read (engines/fp4_paths.py)
    fp4_storage_held=frozenset({"nvfp4"}),
    # --kv-cache-dtype auto resolves to a checkpoint's declared KV dtype (engines/serve_values.py CHECKPOINT_KV_SOURCE)
    checkpoint_kv_auto=(
        "vllm 0.14.0 and 0.31.0 wheels, vllm/engine/arg_utils.py EngineArgs.create_engine_config: CacheConfig's "
        "cache_dtype is vllm/utils/torch_utils.py resolve_kv_cache_dtype_string's"
    ),
    # the 0.13.0 wheel's create_engine_config passes --kv-cache-dtype as given (no resolve_kv_cache_dtype_string)
    checkpoint_kv_auto_from=(0, 14, 0),
    # gpu_memory_utilization 0.9 before 0.20.0, 0.92 from it (releases.py option_defaults)
    option_defaults=option_defaults,
)
