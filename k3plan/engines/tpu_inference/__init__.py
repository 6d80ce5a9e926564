"""vllm-project/tpu-inference (vLLM on TPU through JAX): its stack (``stack.yaml``); it runs its attention data
parallelism inside one ``vllm serve`` (--additional-config sharding_strategy). Its DeepSeek-V4 cache (``dsv4.py``):
its experimental V4 model's own records, which are the torch_tpu plugin's; its Engram placement the plugin's."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.tpu_inference import commits, dsv4
from k3plan.engines.tpu_inference.memory import WORKER
from k3plan.engines.tpu_inference.serve import INT4_F32_SCALES_FROM, MLA_CHECK_FROM

# vLLM's CacheConfig.gpu_memory_utilization default under a tpu-inference release: the vllm-tpu wheel of that release
# (vLLM's code, Requires-Dist tpu-inference==X) holds Field(default=0.9) at 0.18.0 and 0.19.0 and Field(default=0.92)
# at 0.20.0 (vllm-tpu 0.18.0 / 0.19.0 / 0.20.0 wheels (PyPI), vllm/config/cache.py); the stack's default (0.92) is the
# newer releases'. The developers' Kimi-K2.5 run on vLLM v0.16.0rc2 logged the same 0.9 (total_hbm_limit_cap_gb 682.17
# = 0.9 x 757.97, nohup.out @f5f1d337)
UTILIZATION_092_FROM = (0, 20, 0)
UTILIZATION_09_SOURCE = (
    "vllm-tpu 0.18.0 and 0.19.0 wheels (PyPI; Requires-Dist tpu-inference==0.18.0 / 0.19.0), vllm/config/cache.py "
    "CacheConfig.gpu_memory_utilization Field(default=0.9); 0.92 in the vllm-tpu 0.20.0 wheel"
)


def option_defaults(release: tuple[int, int, int]) -> dict[str, tuple[str, str]]:
    """The stack options whose default differs at tpu-inference ``release`` from the stack YAML's (Engine.option_defaults):
    vLLM's utilization 0.9 before 0.20.0."""
    if release < UTILIZATION_092_FROM:
        return {"gpu_memory_utilization": ("0.9", UTILIZATION_09_SOURCE)}
    return {}


ENGINE = Engine(
    engine_loop="vllm",  # a plugin of vLLM's engine (vllm/v1/engine/core.py EngineCore): vLLM's published host time a step (engines/vllm/speed.py)
    name="tpu-inference",
    package="tpu_inference",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="vllm",
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    tpu_dp_attention=True,
    hbm_worker=WORKER,
    # the int4 group-32 experts (Kimi-K2.x) kept unrequantized with float32 group scales at 0.20.0-0.21.x
    # (serve.py INT4_F32_SCALES_SOURCE); the rest is each rule's cited commit
    by_release_rules=(
        (
            ("kimi-k2",),
            "the int4 group-32 experts kept as int4 with float32 group-32 scales at 0.20.0-0.21.x, where the W4A8 MoE "
            "method does not requantize them (serve.py INT4_F32_SCALES_SOURCE)",
        ),
        (
            (),
            f"before {'.'.join(map(str, MLA_CHECK_FROM))} an MLA model without a sharding_strategy runs on the 2-D "
            "mesh, no MLA check (serve.py MLA_CHECK_SOURCE, MESH_2D_SOURCE); vLLM's utilization default 0.9 before "
            f"{'.'.join(map(str, UTILIZATION_092_FROM))} ({UTILIZATION_09_SOURCE})",
        ),
    ),
    option_defaults=option_defaults,
    oldest_release_read=INT4_F32_SCALES_FROM,
    # fit --engine-version <main commit>: placed by the shipped table of main's history (commits.py)
    commit_of=commits.commit_of,
    commit_expected=commits.expected,
)
