"""The step-time model's terms beyond the ops' ceilings that hold for any engine: what a serving engine's step costs
that no roofline sees (issue 38 item 2), as ``k3plan.speed.terms`` registers them. Each is a fixed time an engine
step (a decode step, or one prefill chunk: every chunk is a step of its own and reads the weights again), named and
sourced:

    host time         the engine loop's host time a synchronous step (scheduler, input preparation,
                      dispatch, the sampled token back, output processing): the engine's published figure
                      where one is shipped, priced for asynchronous runs too (ASYNC_NOT_HIDDEN)
                      (k3plan/evidence/engine_step_overheads.yaml; which stacks run that engine's loop is the
                      engine's own data, k3plan/engines/<engine>/speed.py), else the host round trip measured on
                      a TPU (k3plan/evidence/hosts/); transferred as measured (a host cost)
    op fixed cost     every op of the step description is at least one dependent fusion; the fixed
                      cost of one, measured on a TPU, x the ops' executions a step
    kernel floor      on a GPU, every op is at least one kernel; the shortest kernel a public decode trace of
                      the GPU shows (k3plan/evidence/gpu_kernel_floor.yaml) x the ops' executions a step
    busiest EP rank   the routed experts' extra time on the rank with the most touched experts
    MoE gather/combine, sampling and logits: already ops of the step (collectives, LM head): 0 s more

An engine's own terms (its kernels as a TPU timed them, the 0 s its code shows) are that engine's rules, in
k3plan/engines/<engine>/speed.py. The terms join a StageTime as ops of category "overhead" with a ceiling of 0 (no
roofline holds them) and their time as expected, each labelled with its source (``add_terms``). Only records
measured on a TPU backend are used; none shipped: the terms that need one are left out and the output says so.
"""

from __future__ import annotations

from k3plan.speed.efficiency import Efficiency
from k3plan.speed.expected import OpTime, StageTime, kind_times
from k3plan.step.opcost import OpCost
from k3plan.structs import Frozen, replace

HOST_TERM_NAME = "host and scheduler time a synchronous step"  # the engine loop's host term (speed.serving.HOST_TERM)
IN_STEP_SOURCE = "already ops of the step description (k3plan/step/ops.py): their time is in their own columns"


class EngineTerm(Frozen):
    name: str
    seconds: float  # an engine step (a decode step or one prefill chunk)
    source: str
    records: tuple[str, ...] = ()  # the probe records whose measured time set it (issue 46: the JSON names them)
    term: str = ""  # the registered term that priced it (speed.terms.REGISTRY name; "" outside the registry)


def _record():
    from k3plan.evidence.hosts import shipped_step_overheads

    recs = shipped_step_overheads()
    return recs[0] if recs else None


def tpu_record(hardware_kind: str):
    """The shipped TPU step-overhead record (k3plan/evidence/hosts/) where the target is a TPU, else None: its
    device-side terms never stand for a GPU's kernel launches."""
    return _record() if hardware_kind == "tpu" else None


def _op_executions(ops: list[OpCost]) -> int:
    """Executions a step of the step description's ops (a collective with no calls issues nothing)."""
    return sum(op.count for op in ops if op.kind != "overhead" and not (op.kind == "collective" and op.calls == 0))


# Of the 18 scored runs on an engine loop with a published host time, 17 schedule asynchronously (the ATOM MI355X
# runs by their launcher's --async-scheduling, the TPU nightlies by their harness's default) and one synchronously
# (the K3 nightly, ASYNC_SCHEDULING=false); the score keeps the term on all of them and rejects hiding it on the
# asynchronous ones (speed.terms 'async', admitted.json): what it prices there is a per-step cost of that size that
# asynchronous scheduling does not hide, not host work it overlaps.
ASYNC_NOT_HIDDEN = (
    "priced for asynchronous runs as well: the score rejects hiding it there (the 'async' term, admitted.json), so on "
    "those runs it stands for a per-step cost of about this size that asynchronous scheduling does not hide"
)


def _engine_host(family: str | None):
    from k3plan.evidence.hosts import engine_step_overheads

    return next((e for e in engine_step_overheads() if e.engine_family == family), None) if family else None


def host_terms(*, family: str | None, stack: str | None, hardware_kind: str) -> tuple[EngineTerm, ...]:
    """The host term of one engine step: ``family``'s published host time a step (the engine whose loop runs
    ``stack``: its own data, engines/<engine>/speed.py), else the TPU record's host round trip; none on a GPU
    without a published engine figure."""
    rec = tpu_record(hardware_kind)
    eng = _engine_host(family)
    if eng is not None:  # the engine's whole host time a step: it holds the dispatch and read-back measured below
        floor = (
            f"; one host's dispatch and read-back alone: {rec.host_sync.s_host_round_trip * 1e3:.3f} ms, {rec.label}"
            if rec
            else ""
        )
        return (
            EngineTerm(
                name=HOST_TERM_NAME,
                seconds=eng.seconds,
                source=(
                    f"{eng.seconds * 1e3:.2f} ms a step (each prefill chunk is one): {eng.engine_family}'s engine loop, "
                    f'"{eng.quote}" ({eng.measured_on}; {eng.source}), transferred as measured (a host-side cost of '
                    f"the same engine loop; {ASYNC_NOT_HIDDEN}){floor}"
                ),
            ),
        )
    if rec is not None:
        return (
            EngineTerm(
                name="host round trip (synchronous step)",
                seconds=rec.host_sync.s_host_round_trip,
                source=(
                    f"{rec.host_sync.s_host_round_trip * 1e3:.3f} ms a step (each prefill chunk is one), one host, "
                    f"{rec.label}; transferred as measured (a host-side cost); no engine figure for stack {stack}"
                ),
            ),
        )
    return ()


def op_fixed_terms(ops: list[OpCost], *, hardware_kind: str) -> tuple[EngineTerm, ...]:
    """The step description's ops' fixed cost: their executions a step x one dependent fusion's fixed cost as the
    TPU record measured it (a TPU only)."""
    rec = tpu_record(hardware_kind)
    if rec is None:
        return ()
    n = _op_executions(ops)
    per = rec.fusion_chain.s_per_dependent_op
    return (
        EngineTerm(
            name="fixed cost of the step's ops",
            seconds=n * per,
            source=(
                f"{n:,} op executions a step (each prefill chunk is one) of the step description x "
                f"{per * 1e6:.2f} us a dependent fusion, {rec.label}"
            ),
        ),
    )


def kernel_floor_terms(
    ops: list[OpCost], *, hardware: str, vendor: str, stage: str = "decode"
) -> tuple[EngineTerm, ...]:
    """The step description's ops' fixed cost on a GPU: their executions a step x one kernel's fixed duration, the
    shortest kernel a public decode trace of that GPU shows (k3plan/evidence/gpu_kernel_floor.yaml), else of
    another GPU of its vendor, else of another vendor's (the public AMD traces publish no kernel this small: the
    record's ``other_vendors`` says what they show), each transferred and labelled so.
    Taking another vendor's floor, rather than none, is the score's decision: held out, the AMD MI355X TPOTs went
    0.71-0.93x -> 0.91-1.10x and the whole set's mean |ln ratio| 0.314 -> 0.289 (benchmarks/score_speed.py --admit).

    In a decode step the record is named (``records``): a GPU's decode is its bytes at the HBM peak and these fixed
    costs, so with the trace's figure the model, not the roofline bound, is the estimate where no benchmark speaks
    (``speed.serving.model_records``). A prefill chunk's time is its matmuls' compute: a fixed cost measured does
    not make it an estimate while those run at the spec's peak (a GEMM table does: term gpu-gemm)."""
    from k3plan.evidence.hosts import KERNEL_FLOOR_RECORD

    floor = kernel_floor(hardware, vendor)
    if floor is None:
        return ()
    rec, whose = floor
    n = _op_executions(ops)
    return (
        EngineTerm(
            name="fixed cost of the step's kernels",
            seconds=n * rec.seconds,
            source=(
                f"{n:,} op executions a step (each prefill chunk is one) of the step description x "
                f"{rec.seconds * 1e6:.1f} us a kernel: {whose}{rec.label}"
            ),
            records=(KERNEL_FLOOR_RECORD,) if stage == "decode" else (),
        ),
    )


def kernel_floor(hardware: str, vendor: str):
    """(the kernel-floor record for ``hardware``, the words of its transfer: '' where measured on it), else None:
    the GPU's own trace, else another GPU's of its vendor, else another vendor's (kernel_floor_terms)."""
    from k3plan.evidence.hosts import gpu_kernel_floors

    floors = gpu_kernel_floors()
    rec = next((f for f in floors if f.hardware == hardware), None)
    transferred = rec is None
    if rec is None:
        rec = next((f for f in floors if f.vendor == vendor), None)
    other_vendor = rec is None
    if rec is None:
        rec = next(iter(floors), None)
    if rec is None:
        return None
    whose = ""
    if transferred:
        why = rec.other_vendors.get(vendor, f"no public trace of an {vendor.upper()} GPU")
        whose = f"transferred from {rec.hardware}'s" + (f" ({why}), " if other_vendor else ", ")
    return rec, whose


def engine_kernel_terms(
    *,
    joined: int,
    quant: int,
    hardware: str,
    vendor: str,
    engine: str,
    joined_source: str,
    quant_source: str,
    glue: int = 0,
    glue_source: str = "",
) -> tuple[EngineTerm, ...]:
    """The kernel floor's count corrected to the kernels ``engine`` launches (its code: ``engines/<engine>/
    kernels.py``): ``joined`` op executions a step that launch no kernel of their own (minus one kernel's fixed
    duration each), ``quant`` activation-quantization kernels a step before the quantized linears (plus one
    each) and ``glue`` kernels a step it launches with no op of the description (net of ops it fuses away), at the
    kernel floor's record (``kernel_floor_terms``), transferred alike."""
    floor = kernel_floor(hardware, vendor)
    if floor is None or not (joined or quant or glue):
        return ()
    rec, whose = floor
    per = f"{rec.seconds * 1e6:.1f} us a kernel ({whose}{rec.kernel}, the kernel floor's)"
    rows = (
        (-joined, f"ops {engine} runs inside another op's kernel", f"-{joined:,} op executions a step", joined_source),
        (
            quant,
            f"{engine}'s activation-quantization kernels",
            f"{quant:,} a step (one a quantized linear's input)",
            quant_source,
        ),
        (glue, f"kernels {engine} launches beside the step description's ops", f"{glue:+,} a step (net)", glue_source),
    )
    return tuple(
        EngineTerm(name=name, seconds=n * rec.seconds, source=f"{count} x {per}: {src}")
        for n, name, count, src in rows
        if n
    )


ASYNC_SOURCE = (
    "asynchronous scheduling overlaps the engine loop's host work for the next step with the device's current one "
    "(vLLM --async-scheduling: vllm/v1/engine/core.py step_with_batch_queue; SGLang's overlap scheduler), so a step "
    "takes its device time where that is the longer: the synchronous step's host time is hidden"
)


def async_host_term(stage: StageTime, *, async_scheduling: bool | None, why: str = "") -> EngineTerm | None:
    """The host time a step that asynchronous scheduling hides (issue 46 item 4), as a term of minus the
    synchronous host term ``host_terms`` priced in ``stage``; None where the run is synchronous or unknown, or
    the stage holds no host term (an engine without a published host time: nothing to hide). Key: the engine
    family's host term x the run's scheduling (its flag, else the cited default: ``engines.flags.run_scheduling``)."""
    host = sum(t.expected_s for t in stage.ops if t.kind == "overhead" and t.name == HOST_TERM_NAME)
    if not async_scheduling or host <= 0:
        return None
    return EngineTerm(
        name="host time hidden by asynchronous scheduling",
        seconds=-host,
        source=f"-{host * 1e3:.2f} ms a step: {ASYNC_SOURCE}" + (f"; the run's scheduling: {why}" if why else ""),
    )


IMBALANCE_SOURCE = (
    "a MoE layer ends in a collective every rank of the EP group waits on (its combine: the all-reduce, or the "
    "all-to-all), so the layer takes as long as the rank with the most touched experts; expected from the routing "
    "(step.work.busiest_rank_experts: top-k of E, uniform or the router histogram, vLLM's linear expert placement)"
)


def expert_imbalance_term(stage: StageTime, *, busiest: float, mean: float, engine_note: str = "") -> EngineTerm | None:
    """The routed experts' extra time on the busiest EP rank (``step.work.busiest_rank_experts``): the routed-expert
    ops' expected time is the mean rank's (its touched experts), each visit costing alike, so the busiest rank's
    takes busiest / mean times as long. None where every rank touches as many (a wide batch, or no EP).
    ``engine_note``: where the engine's own code says so (its speed rules' citation), appended to the source."""
    routed = sum(t.expected_s for t in stage.ops if t.kind == "grouped_matmul")
    if routed <= 0 or mean <= 0 or busiest <= mean * (1 + 1e-9):
        return None
    return EngineTerm(
        name="routed experts of the busiest EP rank",
        seconds=routed * (busiest / mean - 1),
        source=(
            f"{busiest:.2f} experts touched on the busiest rank against {mean:.2f} on the mean one a MoE layer: the "
            f"routed experts' {routed * 1e3:.3f} ms x {busiest / mean - 1:.2f} more; {IMBALANCE_SOURCE}{engine_note}"
        ),
    )


def missing_record_note() -> str | None:
    return None if _record() is not None else "no step-overhead record shipped: host and op fixed costs left out"


def add_terms(stage: StageTime, terms: tuple[EngineTerm, ...]) -> StageTime:
    """``stage`` with each term as an op of category "overhead": ceiling 0, expected its seconds."""
    extra = tuple(
        OpTime(
            name=t.name,
            kind="overhead",
            category="overhead",
            ceiling_s=0.0,
            expected_s=t.seconds,
            efficiency=Efficiency(
                value=1.0,
                measured=False,
                record_path=", ".join(t.records) or None,  # the records whose measured time set the term
                label=f"engine term {t.name}: {t.source}",
            ),
            label=f"{t.name}: {t.source}",
        )
        for t in terms
    )
    times = stage.ops + extra
    return replace(
        stage, expected_s=stage.expected_s + sum(t.seconds for t in terms), by_kind=kind_times(times), ops=times
    )
