"""The engines k3plan writes launch commands for: which command family runs a stack (its Engine's launcher),
the flags k3plan writes with the engine code that defines each (``FLAG_SOURCES``) and each engine's spelling of
the KV dtypes -- each table in its engine's folder (``engines/<engine>/flags.py``), gathered here by launcher.
Plain tables, no model classes: fit's advice asks ``engine_offers_kv`` of them on every run (k3plan.engines.launch
builds the commands from them). Sources: see k3plan/engines/launch.py.
"""

from __future__ import annotations

from k3plan.engines import torchtpu_vllm
from k3plan.engines.engine import Launcher
from k3plan.engines.jax_native import flags as jax_flags
from k3plan.engines.registry import engines, find_engine, registry
from k3plan.engines.sglang import flags as sglang_flags
from k3plan.engines.tpu_inference import flags as tpu_inference_flags
from k3plan.engines.vllm import flags as vllm_flags
from k3plan.errors import K3PlanError

VLLM = vllm_flags.SOURCE
SGLANG = sglang_flags.SOURCE
MAXTEXT, MAXTEXT_SERVER, MAXTEXT_MODELS = jax_flags.MAXTEXT, jax_flags.MAXTEXT_SERVER, jax_flags.MAXTEXT_MODELS
MAXTEXT_MODEL_NAMES = jax_flags.MAXTEXT_MODEL_NAMES
# launcher -> flag (or parameter) -> (repository, file, class) that defines it: each command family's table, in its
# engine's folder
FLAG_SOURCES: dict[str, dict[str, tuple[str, str, str]]] = {
    "vllm": vllm_flags.FLAGS,
    "sglang": sglang_flags.FLAGS,
    "jax": jax_flags.FLAGS,
}

# k3plan KV dtype -> engine spelling (None: the engine has no such KV dtype), each in its engine's folder
VLLM_KV = vllm_flags.KV  # CacheDType
SGLANG_KV = sglang_flags.KV  # kv_cache_dtype choices
TPU_INFERENCE_KV = tpu_inference_flags.KV  # to_jax_dtype; the torch_tpu plugin takes the same
MAXTEXT_KV = jax_flags.KV  # the activation dtype

# The torch_tpu plugin's default KV block (k3plan.engines.torchtpu_vllm: Engine.default_block, cited there), by the
# names serve.py, the mla-engine probe and the speed terms read it
TORCHTPU_DEFAULT_BLOCK = torchtpu_vllm.DEFAULT_BLOCK
TORCHTPU_DEFAULT_BLOCK_SOURCE = torchtpu_vllm.DEFAULT_BLOCK_SOURCE

SGLANG_A2A = sglang_flags.SGLANG_A2A
SGLANG_CHUNK_SOURCE = sglang_flags.SGLANG_CHUNK_SOURCE
sglang_default_chunk = sglang_flags.sglang_default_chunk

# Engines whose scheduler runs a prefill whenever one forms, in a step of its own (speed.scheduler.simulate's
# prefill_first; its PREFILL_FIRST_RULE cites SGLang's code): Engine.prefill_first; vLLM's V1 scheduler mixes them
# (speed.scheduler.RULE)
PREFILL_FIRST_ENGINES = tuple(e.name for e in engines() if e.prefill_first)

# A stack's engine (Engine.launcher, Engine.launcher_on) starts it: ``vllm serve``, SGLang's launch_server or
# MaxText; tpu-inference runs its attention data parallelism inside one ``vllm serve`` (Engine.tpu_dp_attention)


def kv_table(engine: str, platform: str | None) -> dict[str, str | None] | None:
    """The KV-cache dtypes the engine takes on ``platform`` (k3plan dtype -> the engine's spelling; None: not
    offered); None for jax-native, k3plan's own stack (its launch checks MAXTEXT_KV itself)."""
    if engine == "vllm":
        return TPU_INFERENCE_KV if platform == "tpu" else VLLM_KV
    return SGLANG_KV if engine == "sglang" else None


def engine_offers_kv(stack: str, kv_dtype: str, platform: str | None) -> bool:
    """Whether the engine that runs ``stack`` on ``platform`` takes the KV-cache dtype ``kv_dtype`` (kv_table);
    a stack with no launch engine, or jax-native (k3plan's own), takes any."""
    engine = launcher_of(stack, platform)
    table = None if engine is None else kv_table(engine, platform)
    return True if table is None else table.get(kv_dtype) is not None


def launcher_of(stack: str, platform: str | None) -> Launcher | None:
    """The command family that starts ``stack``'s engine on ``platform`` (``engine_for_stack``), None where no
    engine is known for the stack."""
    engine = find_engine(stack)
    return None if engine is None else engine.launcher_for(platform)


def engine_for_stack(stack: str, platform: str | None = None) -> Launcher:
    """The engine whose launch command a k3plan stack gets on ``platform`` ("gpu" / "tpu"; None: the
    stack's engine's own launcher, as on a TPU)."""
    engine = launcher_of(stack, platform)
    if engine is None:
        raise K3PlanError(f"--emit launch: no engine known for stack {stack!r}; known: {', '.join(registry())}")
    return engine


def ci_serve_flags(stack: str) -> dict[str, tuple[str, str, str]]:
    """The serve flags the CI of ``stack``'s engine passes (flag -> its cited config); {} for none."""
    engine = find_engine(stack)
    return {} if engine is None else dict(engine.ci_serve_flags)


def run_scheduling(engine: str, published: bool | None) -> tuple[bool | None, str]:
    """(async or not, where it was read) for a run on ``engine`` whose source says ``published`` (None: unsaid);
    (None, why) where neither the source nor a cited default says (``Engine.scheduling_default``: the scheduling a
    run used where its source does not publish it, issue 46 item 4: async where the engine or the benchmark's own
    harness overlaps the host's step with the device's, each read in its code)."""
    if published is not None:
        return published, "the run's own flag"
    found = find_engine(engine)
    if found is not None and found.scheduling_default is not None:
        value, source = found.scheduling_default
        return value, source
    return None, f"unpublished, and no default of {engine} read"
