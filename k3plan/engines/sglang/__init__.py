"""SGLang (sgl-project/sglang): its stack (``stack.yaml``), its KV-pool sizing and start rule (``memory.py``:
ModelRunner's static fraction less the weights and the state pool), its DeepSeek-V4 cache layout and Engram
placement (``dsv4.py``), and the words its logs use."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.sglang import dsv4
from k3plan.engines.sglang.aiter_fraction import aiter_fraction_scale
from k3plan.engines.sglang.dsv4_pool import OLDEST_READ
from k3plan.engines.sglang.eplb import redundant_expert_pad
from k3plan.engines.sglang.flags import SGLANG_A2A_DEFAULT
from k3plan.engines.sglang.fp4_scales import dsv4_fp4_expert_format
from k3plan.engines.sglang.fraction_eras import era_fraction
from k3plan.engines.sglang.memory import plain_loaded_extras
from k3plan.engines.sglang.moe_padding import expert_shard_pad
from k3plan.engines.sglang.prefill_graph import prefill_graph
from k3plan.engines.sglang.releases import (
    BY_RELEASE,
    BY_RELEASE_MODELS,
    BY_RELEASE_RULES,
    CHECKPOINT_KV_AT,
    CHECKPOINT_KV_FROM,
    DEEPEP_RESERVE_FROM,
    DSV4_KV_ARCHITECTURES,
    DSV4_KV_AT,
    NEWEST_RELEASE,
)
from k3plan.engines.sglang.vision import plain_vision_refusal

ENGINE = Engine(
    fraction_scale=aiter_fraction_scale,  # 0.4.7-0.5.4's x 0.85 under aiter (engines/sglang/aiter_fraction.py)
    redundant_expert_pad=redundant_expert_pad,  # --ep-num-redundant-experts (engines/sglang/eplb.py)
    # Kimi-K3's MXFP4 expert shards padded under AITER on an AMD GPU (engines/sglang/moe_padding.py)
    expert_shard_pad=expert_shard_pad,
    # DeepSeek-V4's FP4 expert scales as the release holds them on the GPU (engines/sglang/fp4_scales.py)
    expert_format=dsv4_fp4_expert_format,
    name="sglang",
    package="sglang",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="sglang",
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    # third of the default stacks: kimi_k3.py's CUDA and HIP paths, so H100, H20, MI300X and MI325X -- outside
    # the vLLM recipe's list -- get sglang
    default_rank=2,
    pool_rule="static",
    # SGLang logs its pool's tokens (max_total_num_tokens); the sequences it holds at a context are those over it
    concurrency_label="max_total_num_tokens / context_len",
    max_seqs_flag="max_running_requests",
    # Kimi-K2.5 / K2.6's tower is built with the model whatever the flags: sgl-project/sglang@00a239e5
    # python/sglang/srt/models/kimi_k25.py KimiK25ForConditionalGeneration.__init__ creates vision_tower
    # (MoonViT3dPretrainedModel) and mm_projector unconditionally (language_only only skips loading their weights,
    # load_weights; encoder_only drops the language model instead). Kimi-K3's is not: SGLang's kimi_k3.py
    # KimiK3ForConditionalGeneration "only instantiates the language model" (text_config unwrapped, vision_tower.* /
    # mm_projector.* skipped in load_weights; read in the index, commit not pinned)
    loads_vision_tower=True,
    # DeepSeek-V4.1's ViT and aligner too, from the release that serves it: DeepseekV4ForCausalLM.__init__ builds
    # them where config.model_type is deepseek_v41 with vision layers (sglang 0.5.21-0.5.23 wheels, models/
    # deepseek_v4.py: self.vision = ViT(args); from 0.5.22 not under --language-model-only: engines/sglang/serve.py
    # v41_vision); its config keeps no vision_config (configs/deepseek_v41.py pops it), so no fraction cut (AutoFraction.vlm)
    vision_tower_architectures=frozenset({"kimi_k25", "deepseek_v41"}),
    # DeepSeek-V4.1's tower refused under the stack's DeepEP default: fit without --serve says so (vision.py)
    vision_refusal=plain_vision_refusal,
    # DeepSeek-V4's RoPE tables and V4.1's bf16 wo_a with the weights, as --serve holds them (sglang/memory.py)
    loaded_extras=plain_loaded_extras,
    by_release=BY_RELEASE,
    by_release_models=BY_RELEASE_MODELS,
    by_release_rules=BY_RELEASE_RULES,
    oldest_release_read=OLDEST_READ,
    # the default mem_fraction_static of a release before 0.5.3, which derived it otherwise (engines/sglang/fraction_eras.py)
    release_fraction=era_fraction,
    reserve_terms_from={"deepep": DEEPEP_RESERVE_FROM},  # engines/sglang/releases.py
    # the prefill graph its derived fraction reserves for, by release and model (engines/sglang/prefill_graph.py)
    prefill_graph=prefill_graph,
    newest_release_read=NEWEST_RELEASE,  # 0.5.23: a GPU question that names no release is read as it (releases.py)
    prefill_first=True,  # its scheduler (speed.scheduler.PREFILL_FIRST_RULE cites the code)
    # ServerArgs' own MoE backend, not the sglang stack's DeepEP deployment (engines/sglang/flags.py)
    run_options={"moe_a2a_backend": SGLANG_A2A_DEFAULT},
    scheduling_default=(
        True,
        "the engine's default: sgl-project/sglang python/sglang/srt/server_args.py ServerArgs."
        "disable_overlap_schedule = False (the overlap scheduler runs the next batch's CPU work during the GPU's)",
    ),
    # the FP4 checkpoints whose held bytes were read (engines/fp4_paths.py)
    fp4_storage_held=frozenset({"nvfp4", "quark_mxfp4"}),
    # --kv-cache-dtype auto resolves to a checkpoint's declared KV dtype (engines/serve_values.py CHECKPOINT_KV_SOURCE)
    checkpoint_kv_auto=CHECKPOINT_KV_AT,
    checkpoint_kv_auto_from=CHECKPOINT_KV_FROM,  # 0.5.1-0.5.2 keep the model's dtype (engines/sglang/releases.py)
    # DeepSeek-V4 / V4.1 on a GPU: fp8 whatever --kv-cache-dtype auto would give (engines/sglang/releases.py)
    architecture_kv=((DSV4_KV_ARCHITECTURES, "fp8", DSV4_KV_AT),),
)
