"""The torch_tpu vLLM plugin (kowalski-4831/vllm-torchtpu), the TPU default: its stack (``stack.yaml``), its
DeepSeek-V4 cache layout and Engram placement (``dsv4.py``), the serve flags its K3 CI passes, its default KV
block and the scheduling its nightly harness runs. Its KV pool is vLLM's (k3plan.engines.vllm.memory, with the
plugin's compact state slots). ``vllm-tpu`` is its old name."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.torchtpu_vllm import dsv4
from k3plan.engines.torchtpu_vllm.memory import WORKER

# the serve flags its K3 CI passes (a stack of this engine launches with them): the cited config, whose comments
# say what each does (--enable-ep-weight-filter: model_loader_patches.py, the plugin's #373)
CI = (
    "kowalski-4831/vllm-torchtpu",
    "scripts/vllm/benchmarking/configs/kimi-k3-tp32-ep.sh @7a17c15d",
    "EXTRA_SERVE_ARGS (the K3 nightly's serve flags)",
)
# The plugin's KV block, the page its MLA kernel walks: 16 tokens unless --block-size says otherwise. Its
# benchmark configs say so -- configs/kimi-k3-tp32-ep-agentx.sh @ca556cac: "--block-size 256: with the 16-token
# default, prefill at 100k+ context is 3 to 8.5x slower and decode slows with context (#837)" -- and so does the
# MLA tuned table's first K3 TP 32 entry ("16-token KV cache pages", kernels/mla/v2/tuned_params.py @79bd30e0).
# The memory side prices the same page (stack.yaml paging: 16 tokens, the KDA state kept apart in the plugin's
# compact slots, kv_cache_manager.py @15e5264a; issue 48 item 5).
DEFAULT_BLOCK = 16
DEFAULT_BLOCK_SOURCE = (
    "the plugin's 16-token default KV block (kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/configs/"
    "kimi-k3-tp32-ep-agentx.sh @ca556cac: 'with the 16-token default, prefill at 100k+ context is 3 to 8.5x slower "
    "and decode slows with context'; the nightly's config sets no --block-size)"
)

ENGINE = Engine(
    engine_loop="vllm",  # a plugin of vLLM's engine (vllm/v1/engine/core.py EngineCore): vLLM's published host time a step (engines/vllm/speed.py)
    name="torchtpu-vllm",
    package="torchtpu_vllm",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="vllm",
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    # "vllm-tpu" priced vLLM's model code on TPU through tpu-inference, which does not run K3 that way; the engine
    # that does is the torch_tpu plugin (issue 34)
    aliases=("vllm-tpu",),
    # the TPU default: first of the default stacks (its K3 CI serves the model nightly)
    default_rank=0,
    expert_form="tiled",
    # the temporaries grid of 2026-12-01 (temp-grid-tpu7x.json / temp-grid-cpu.json): vllm-tpu compiled ``layer``
    recorded_forms={"vllm-tpu": "layer"},
    ci_serve_flags={"--language-model-only": CI, "--enable-ep-weight-filter": CI},
    default_block=(DEFAULT_BLOCK, DEFAULT_BLOCK_SOURCE),
    hbm_worker=WORKER,
    scheduling_default=(
        True,
        "the nightly harness's default: kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/run_benchmarks.sh "
        "start_vllm_server passes --async-scheduling to every server (@f84ad69c); a config turns it off by name "
        '(configs/kimi-k3-tp32-ep.sh: ASYNC_SCHEDULING="${ASYNC_SCHEDULING:-false}", @76d74757)',
    ),
)
