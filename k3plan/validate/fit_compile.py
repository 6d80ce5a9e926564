"""``fit --compile``: validate's compile at fit's own point, as the temps fit counts (issue 50 item 2).

The step is the one validate compiles (k3plan.validate.run: the abstract model, scanned over the repeating block,
AOT-compiled deviceless for the TPU topology), one prefill chunk at the workload's context and one decode step of
its batch; each stage's temp is the compiler's ``memory_analysis()`` temp, or, where the compiler ran out of HBM,
the stage is refused with the OOM's own figures. Call before anything imports jax (``prepare_target``)."""

from __future__ import annotations

from typing import Callable, Optional

from k3plan.budget.fit import VALIDATE_TARGET_OF, Workload
from k3plan.budget.result import CompiledPoint
from k3plan.errors import K3PlanError
from k3plan.setup import Setup
from k3plan.units import fmt_gib
from k3plan.validate.result import JobResult, ValidationResult


def compile_target(setup: Setup) -> str:
    """The deviceless target for the setup's hardware and topology (tpu7x:2x2x4); bad input off a TPU."""
    gen = VALIDATE_TARGET_OF.get(setup.hardware.name)
    if gen is None:
        raise K3PlanError(
            f"--compile: no deviceless compile for {setup.hardware.name} (TPU generations only: "
            f"{', '.join(VALIDATE_TARGET_OF)}); on the machine itself run k3plan validate --target local"
        )
    return f"{gen}:{setup.topology.text}"


def _refused(r: JobResult) -> str:
    oom = r.oom
    assert oom is not None
    avail = f" of {fmt_gib(oom.available_bytes)}" if oom.available_bytes else ""
    need = f"{fmt_gib(oom.required_bytes)} required" if oom.required_bytes else "the size unreported"
    return f"the compile at this point ran out of HBM ({need}{avail} a device)"


def compiled_from(result: ValidationResult) -> CompiledPoint:
    """A validation's per-stage temps as fit's CompiledPoint, with its source (target, toolchain, layers)."""
    env = result.environment
    out: dict = {
        "source": f"compiled (deviceless {env.target}, jax {env.jax_version}, libtpu {env.libtpu_version}, "
        f"{result.layers} layers, this point: k3plan fit --compile)"
    }
    for r in result.results:
        if r.oom is not None:
            out[f"{r.stage}_refused"] = _refused(r)
        elif r.memory is not None and r.memory.temp_bytes is not None:
            out[f"{r.stage}_bytes"] = int(r.memory.temp_bytes)
        else:  # no memory_analysis() from this backend: no evidence
            raise K3PlanError(f"--compile: the {r.stage} compile gave no memory_analysis() temp")
    return CompiledPoint(**out)


def compile_point(
    setup: Setup,
    workload: Workload,
    *,
    on_job: Optional[Callable] = None,
    on_phase: Optional[Callable] = None,
) -> CompiledPoint:
    """Compile the setup's step deviceless for its TPU topology at the workload's chunk, context and batch."""
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    target = parse_target(compile_target(setup))
    jobs = plan_jobs(setup=setup, stage="both", tokens=[workload.prefill_chunk_tokens], batch=workload.batch,
                     context=workload.context_tokens)  # fmt: skip
    prepare_target(target, setup)  # before jax is imported
    return compiled_from(validate(setup=setup, target=target, jobs=jobs, on_job=on_job, on_phase=on_phase))
