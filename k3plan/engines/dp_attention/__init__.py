"""DP attention: SGLang's --enable-dp-attention with DeepEP on GPUs (its stack.yaml's description and
platforms_source: shared experts tp_size=1, latent projections and router replicated, all-to-all dispatch); on
TPUs tpu-inference (``vllm serve``) runs its attention data parallelism. Its DeepSeek-V4 cache and Engram
placement: SGLang's."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.sglang import dsv4
from k3plan.engines.sglang.aiter_fraction import aiter_fraction_scale
from k3plan.engines.sglang.dsv4_pool import OLDEST_READ
from k3plan.engines.sglang.eplb import redundant_expert_pad
from k3plan.engines.sglang.fp4_scales import dsv4_fp4_expert_format
from k3plan.engines.sglang.fraction_eras import era_fraction
from k3plan.engines.sglang.memory import plain_loaded_extras
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
    # 0.4.7-0.5.4's x 0.85 under aiter (engines/sglang/aiter_fraction.py), its tp_size the groups' TP x DP
    fraction_scale=partial(aiter_fraction_scale, dp_attention=True),
    redundant_expert_pad=redundant_expert_pad,  # --ep-num-redundant-experts (engines/sglang/eplb.py)
    # DeepSeek-V4's FP4 expert scales as the release holds them on the GPU (engines/sglang/fp4_scales.py)
    expert_format=dsv4_fp4_expert_format,
    name="dp-attention",
    package="dp_attention",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="vllm",
    launcher_on={"gpu": "sglang"},
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    # on GPUs SGLang: DeepSeek-V4.1's tower refused under DeepEP, which fit without --serve says (sglang/vision.py)
    vision_refusal=plain_vision_refusal,
    # DeepSeek-V4's RoPE tables and V4.1's bf16 wo_a with the weights, as --serve holds them (sglang/memory.py)
    loaded_extras=plain_loaded_extras,
    by_release=BY_RELEASE,  # --serve reads SGLang's DP-attention commands as this stack
    by_release_models=BY_RELEASE_MODELS,
    by_release_rules=BY_RELEASE_RULES,
    oldest_release_read=OLDEST_READ,
    # the default mem_fraction_static of a release before 0.5.3, which derived it otherwise (engines/sglang/fraction_eras.py)
    release_fraction=era_fraction,
    reserve_terms_from={"deepep": DEEPEP_RESERVE_FROM},  # engines/sglang/releases.py
    # the prefill graph its derived fraction reserves for, by release and model (engines/sglang/prefill_graph.py)
    prefill_graph=prefill_graph,
    # on a GPU SGLang's DP attention: a question that names no release is read as SGLang's newest read (0.5.23), so
    # fit with and without --serve read one release (app/fit.py _release); a TPU's names none (tpu-inference)
    newest_release_read=NEWEST_RELEASE,
    # on a GPU SGLang's DP attention: SGLang's FP4 loaders (engines/fp4_paths.py)
    fp4_storage_held=frozenset({"nvfp4", "quark_mxfp4"}),
    # on a GPU SGLang's DP attention: its KV dtype resolution (engines/serve_values.py CHECKPOINT_KV_SOURCE)
    checkpoint_kv_auto=CHECKPOINT_KV_AT,
    checkpoint_kv_auto_from=CHECKPOINT_KV_FROM,  # 0.5.1-0.5.2 keep the model's dtype (engines/sglang/releases.py)
    # DeepSeek-V4 / V4.1 on a GPU: fp8 whatever --kv-cache-dtype auto would give (engines/sglang/releases.py)
    architecture_kv=((DSV4_KV_ARCHITECTURES, "fp8", DSV4_KV_AT),),
)
