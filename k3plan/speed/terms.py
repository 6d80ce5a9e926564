"""The speed model's terms in one registry (issue 46 item 4, issue 51 item 2), each admitted by a leave-one-out score.

The model's time is its floor -- the step description's ops at their ceilings, below them where a probe record
measures the efficiency (``speed.expected.expected_time``) -- plus the registered terms that are ON. A term is one
``SpeedTerm`` in ``REGISTRY``:

    SpeedTerm(
        name="mla-kernel",            # the key: score_speed.py --admit, admitted.json, `terms` arguments
        title="the engine's MLA kernel at its blocks",   # what physical quantity it prices, in words
        phase="both",                 # "decode" (TPOT), "prefill" (TTFT) or "both"
        level="step",                 # "step": time added to an engine step (a decode step or one prefill chunk),
                                      #   by ``price``; "served": how a benchmark's run is served (the scheduler's
                                      #   options, speed.serving.served_of) or the score's fitted TTFT floor
        when=When(stacks=torchtpu_vllm.STACKS, hardware=("tpu",), kv_dtypes=...),  # typed key: empty = any
        price=_mla_kernel,            # StepInput -> tuple[EngineTerm, ...] (level "step" only)
        source="...",                 # the code or measurement it rests on (repository, file, symbol, commit)
        evidence=("evidence/probes/mla-engine-*.json",),  # the records, package-relative globs
        admission="scored",           # "scored": ON only where admitted.json says the leave-one-out score over
                                      #   the public benchmark set improves with it; "cited": prices 0 s by the
                                      #   engine code its source cites, always listed, never scored
    )

Adding a term is adding one entry here (an engine's own rule as a pure function in
``k3plan/engines/<engine>/speed.py``, its stacks in that file's ``STACKS``), then ``python3
benchmarks/score_speed.py --admit --write``: every scored term is judged by the held-out score over the whole public
benchmark set with and without it, every other term as admitted (``k3plan.app.score.admit``: passes from every term
ON until none changes; ``better``: the mean |ln ratio| of TPOT, TTFT and throughput together falls), and
admitted.json records the decision with both scores; tests/speed/test_admission.py re-runs it and holds the file to
it. A term admitted.json does not name is OFF. Every caller that prices a step (roofline, fit, plan, report) gets
the admitted terms (``default_terms``); the score passes its own set to try one; the JSON's ``expected.terms`` lists
each step term's share (``TermShare``).

Another helper adding a term (e.g. a DeepSeek-V4 kernel on v7x): write its price as ``StepInput -> tuple[EngineTerm,
...]`` (the ops, their StageTime, the rows, context and curves are in the StepInput; the registry stamps
``EngineTerm.term``), give it a ``When`` over the typed key (``TermKey``), add it to ``REGISTRY`` where it joins
the step, and re-run the admission.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as with_fields
from functools import cache
from pathlib import Path
from typing import Any, Literal

from k3plan.engines.sglang import kernels as sglang_kernels
from k3plan.engines.sglang import speed as sglang
from k3plan.engines.torchtpu_vllm import speed as torchtpu_vllm
from k3plan.engines.vllm import speed as vllm
from k3plan.speed.overheads import (
    IMBALANCE_SOURCE,
    IN_STEP_SOURCE,
    EngineTerm,
    engine_kernel_terms,
    expert_imbalance_term,
    host_terms,
    kernel_floor_terms,
    op_fixed_terms,
)
from k3plan.structs import Frozen, replace

Phase = Literal["decode", "prefill", "both"]
Level = Literal["step", "served"]
HardwareKind = Literal["tpu", "gpu"]
Admission = Literal["scored", "cited"]

ADMITTED = Path(__file__).with_name("admitted.json")  # written by benchmarks/score_speed.py --admit --write
PACKAGE = Path(__file__).resolve().parents[1]  # evidence globs are relative to it


class TermKey(Frozen):
    """What a term's ``When`` is tested against: one engine step of one configuration."""

    stage: Literal["decode", "prefill"]
    stack: str  # the stack's name (Stack.name: parsed once, aliases resolved)
    hardware: HardwareKind
    kv_dtype: str | None  # the stack's KV cache dtype (None: the engine's default)
    op_kinds: tuple[str, ...] = ()  # the kinds of the step's ops
    expert_formats: tuple[str, ...] = ()  # the routed experts' resident formats (Stack.runtime_format)


class When(Frozen):
    """Where a term applies: every field that is not empty must hold (an empty field: any)."""

    stacks: tuple[str, ...] = ()
    hardware: tuple[HardwareKind, ...] = ()
    kv_dtypes: tuple[str | None, ...] = ()
    op_kinds: tuple[str, ...] = ()  # the step holds an op of one of these kinds
    expert_formats: tuple[str, ...] = ()  # the routed experts are resident in one of these formats

    def holds(self, key: TermKey) -> bool:
        return (
            (not self.stacks or key.stack in self.stacks)
            and (not self.hardware or key.hardware in self.hardware)
            and (not self.kv_dtypes or key.kv_dtype in self.kv_dtypes)
            and (not self.op_kinds or any(k in key.op_kinds for k in self.op_kinds))
            and (not self.expert_formats or any(f in key.expert_formats for f in self.expert_formats))
        )

    def may_hold(self, *, stack: str, hardware: str) -> bool:
        """Whether the term can apply to a configuration at all (its stack and hardware; the step's phase, dtype
        and ops decide the rest): the score re-prices only the cases a term may touch."""
        return (not self.stacks or stack in self.stacks) and (not self.hardware or hardware in self.hardware)


@dataclass(frozen=True)
class StepInput:
    """One engine step as a term prices it: ``ops`` the step description's (OpCost), ``stage`` their expected time
    (StageTime, no term in it yet), ``rows`` the step's rows (a decode step's padded rows; a prefill chunk's
    tokens), ``context`` where its sequence ends, ``sequences`` a device's (decode), ``ep_tokens`` the rows the EP
    group routes (decode), ``curves`` the EfficiencyCurves (or None)."""

    key: TermKey
    setup: Any
    ops: list
    stage: Any
    curves: Any
    rows: int
    context: int
    sequences: int = 1
    ep_tokens: int = 0
    histogram: Any = None
    on: frozenset[str] = frozenset()  # the terms ON where it is priced (step_terms): a term that re-prices a part
    # of the step takes off what the others ON charge for that part
    # one answer's store of what a term prices from one op alone, term -> {OpCost: its figure}: a prompt's chunks
    # repeat all but their attention ops (speed.stage.expected_speed); None: none kept
    memo: dict | None = None


@dataclass(frozen=True)
class SpeedTerm:
    name: str
    title: str
    phase: Phase
    level: Level
    when: When
    source: str
    evidence: tuple[str, ...] = ()
    price: Callable[[StepInput], tuple[EngineTerm, ...]] | None = None
    admission: Admission = "scored"
    refines: str | None = None  # another term whose count this one corrects: priced only where that one is ON

    def applies(self, key: TermKey) -> bool:
        return self.phase in ("both", key.stage) and self.when.holds(key)

    def may_hold_for(self, setup: Any) -> bool:
        """Whether the term may apply to ``setup``'s stack and hardware kind (``When.may_hold``)."""
        return self.when.may_hold(stack=setup.stack.name, hardware=setup.hardware.kind)


def _cited(name: str, source: str) -> Callable[[StepInput], tuple[EngineTerm, ...]]:
    return lambda s: (EngineTerm(name=name, seconds=0.0, source=source),)


def _host(s: StepInput) -> tuple[EngineTerm, ...]:
    stack = s.key.stack
    return host_terms(family=vllm.engine_family(stack), stack=stack, hardware_kind=s.key.hardware)


def _op_fixed(s: StepInput) -> tuple[EngineTerm, ...]:
    return op_fixed_terms(s.ops, hardware_kind=s.key.hardware)


def _kernel_floor(s: StepInput) -> tuple[EngineTerm, ...]:
    hw = s.setup.hardware
    return kernel_floor_terms(s.ops, hardware=hw.name, vendor=hw.vendor, stage=s.key.stage)


def _sglang_kernels(s: StepInput) -> tuple[EngineTerm, ...]:
    hw = s.setup.hardware
    joined, quant = sglang_kernels.kernel_changes(s.ops, s.key.stage)
    spec = s.setup.model.spec
    experts = (spec.moe.num_experts, spec.moe.num_shared) if spec.moe is not None else (0, 0)
    glue = sglang_kernels.glue_kernels(
        s.ops,
        s.key.stage,
        model=(spec.architecture, *experts),
        vendor=hw.vendor,
        hardware=hw.name,
        rows=s.rows,
        dp_attention=s.setup.parallel.dp > 1,
        one_node=s.setup.parallel.tp <= hw.devices_per_host,
    )
    return engine_kernel_terms(
        joined=joined,
        quant=quant,
        glue=glue,
        hardware=hw.name,
        vendor=hw.vendor,
        engine="SGLang",
        joined_source=sglang_kernels.JOINED_SOURCE,
        quant_source=sglang_kernels.ACT_QUANT_SOURCE,
        glue_source=sglang_kernels.GLUE_SOURCE,
    )


def _gpu_moe(s: StepInput) -> tuple[EngineTerm, ...]:
    """A decode step's routed-MoE calls at the latency aiconfigurator measured for SGLang's kernel on this GPU at
    the model's shape (``speed.gpu_moe``), in place of what the other terms ON price for them: the step
    description's routed grouped GEMMs, the kernel floor's charge for the call's kernels (as ``sglang-kernels``
    counts them, ``engines/sglang/kernels.py routed_call_kernels``) and the busiest EP rank's excess (the table's
    call splits each expert over the group's GPUs: no rank holds more experts than another)."""
    from k3plan.engines.flags import engine_for_stack
    from k3plan.errors import K3PlanError
    from k3plan.evidence.gpu_moe import RECORD
    from k3plan.speed.gpu_moe import call_seconds, moe_table
    from k3plan.speed.overheads import kernel_floor

    spec, par, hw = s.setup.model.spec, s.setup.parallel, s.setup.hardware
    moe = spec.moe
    if moe is None or moe.latent or sglang_kernels.exchanges_all_to_all(s.ops):
        return ()
    try:
        engine = engine_for_stack(s.key.stack, hw.kind)
    except K3PlanError:
        return ()
    shape = (spec.hidden_size, moe.expert_intermediate, moe.num_experts, moe.top_k, par.ep if par.ep > 1 else par.tp)
    table = moe_table(hw.name, engine, shape)
    routed = [
        (op, t)
        for op, t in zip(s.ops, s.stage.ops, strict=True)
        if op.kind == "grouped_matmul" and ".experts." in op.name and "shared" not in op.name
    ]
    if table is None or not routed or any(op.dtype != "fp8" for op, _ in routed):
        return ()
    layers = max(op.count for op, _ in routed)
    modelled = sum(t.expected_s for _, t in routed)
    parts = [f"the step description's routed grouped GEMMs {modelled * 1e3:.3f} ms"]
    floor = kernel_floor(hw.name, hw.vendor) if "kernel-floor" in s.on else None
    if floor is not None:
        kernels = sglang_kernels.routed_call_kernels(hw.name) if "sglang-kernels" in s.on else len(routed)
        modelled += floor[0].seconds * kernels * layers
        parts.append(f"{kernels} kernels a call at the kernel floor")
    if "ep-imbalance" in s.on:
        excess = sum(e.seconds for e in _imbalance(s))
        if excess:
            modelled += excess
            parts.append(f"the busiest EP rank's {excess * 1e3:.3f} ms")
    call = call_seconds(table, s.rows)
    return (
        EngineTerm(
            name="routed MoE calls at their measured latency",
            seconds=layers * call - modelled,
            source=f"{layers} calls x {call * 1e6:.1f} us at {s.rows:,} tokens ({table.kernel}, {table.distribution} "
            f"routing, {table.measured_on}; {RECORD}#{table.id}), in place of {', '.join(parts)}",
            records=(f"{RECORD}#{table.id}",),
        ),
    )


def _gpu_gemm(s: StepInput) -> tuple[EngineTerm, ...]:
    """The step's matmuls that run at their ceiling (no record of the device kind), re-priced at the published
    throughput of the kernel the stack's engine runs for their dtype on this GPU (``evidence.gpu_gemm``): the term
    is what that adds to the step, each op bound by the longer of its compute at the kernel's efficiency and its
    bytes at the HBM peak."""
    from k3plan.engines.flags import engine_for_stack
    from k3plan.errors import K3PlanError
    from k3plan.evidence.gpu_gemm import RECORD
    from k3plan.speed.expected import op_time
    from k3plan.speed.gpu_gemm import gemm_curves
    from k3plan.speed.peaks import Peaks

    hw = s.setup.hardware
    try:
        engine = engine_for_stack(s.key.stack, hw.kind)
    except K3PlanError:
        return ()
    peaks = Peaks.from_hardware(hw)
    curves = gemm_curves(hw.name, device_kind=peaks.device_kind, engine=engine)
    if curves is None:
        return ()
    extra = 0.0
    records: dict[str, None] = {}
    memo = _memo(s, "gpu-gemm")  # OpCost -> its OpTime on the kernel's curves
    for op, t in zip(s.ops, s.stage.ops, strict=True):
        if op.kind != "matmul" or t.efficiency.measured:
            continue
        at = memo.get(op)
        if at is None:
            at = memo[op] = op_time(op, peaks=peaks, curves=curves)
        if at.efficiency.measured and at.expected_s > t.expected_s:
            extra += at.expected_s - t.expected_s
            records[at.efficiency.record_path or RECORD] = None
    if not extra:
        return ()
    return (
        EngineTerm(
            name="GPU matmuls at their kernel's published throughput",
            seconds=extra,
            source=f"{engine}'s kernel for the dtype on {hw.name}, its published TFLOPS over the spec's peak, "
            f"interpolated at each op's size (log of (M N K)^(1/3), clamped to the measured range) "
            f"({', '.join(records)})",
            records=tuple(records),
        ),
    )


def _memo(s: StepInput, term: str) -> dict:
    """``term``'s store of what it prices from one op alone: the answer's (``StepInput.memo``), else a new one."""
    return {} if s.memo is None else s.memo.setdefault(term, {})


def _mla_prefill_form(s: StepInput) -> tuple[EngineTerm, ...]:
    if not any(op.name.startswith("mla.") and op.kind == "attention" for op in s.ops):
        return ()
    return (EngineTerm(name="MLA prefill form", seconds=0.0, source=torchtpu_vllm.MLA_SOURCE),)


def _kernel_times(s: StepInput) -> dict:
    return getattr(s.curves, "kernel_times", None) or {}


def _attnres(s: StepInput) -> tuple[EngineTerm, ...]:
    points, spec = _kernel_times(s).get("attnres"), s.setup.model.spec
    if not points or not spec.attn_res_block_size:
        return ()
    from collections import Counter

    from k3plan.step.attnres import attnres_call_blocks

    calls = Counter(attnres_call_blocks(spec.num_layers, spec.attn_res_block_size))
    seconds, source, records = torchtpu_vllm.attnres_kernel(points, calls=calls, rows=s.rows)
    return (EngineTerm(name="the engine's Attention Residual kernel", seconds=seconds, source=source, records=records),)


def _moe_glue(s: StepInput) -> tuple[EngineTerm, ...]:
    spec = s.setup.model.spec
    if spec.moe is None:
        return ()
    timed = torchtpu_vllm.moe_glue(_kernel_times(s).get("moe-glue", ()), moe_layers=spec.n_moe, rows=s.rows)
    if timed is None:
        return ()
    seconds, source, records = timed
    name = "the engine's MoE routing and one-hot permute at decode"
    return (EngineTerm(name=name, seconds=seconds, source=source, records=records),)


def _mla_kernel(s: StepInput) -> tuple[EngineTerm, ...]:
    from k3plan.step.ops import heads_split

    spec = s.setup.model.spec
    if not spec.n_mla or spec.dsv4 is not None:
        return ()
    timed = torchtpu_vllm.mla_kernel(
        _kernel_times(s).get("mla-engine", ()),
        stage=s.key.stage,
        rows=s.rows,
        context=s.context,
        heads=spec.mla.heads // heads_split(spec.mla.heads, s.setup.parallel.tp),
        layers=spec.n_mla,
        kv_dtype=s.key.kv_dtype,
        attention_s=sum(t.expected_s for t in s.stage.ops if t.kind == "attention" and t.name.startswith("mla.")),
        sequences=s.sequences,
    )
    if timed is None:
        return ()
    seconds, source, records = timed
    return (EngineTerm(name="the engine's MLA kernel at its blocks", seconds=seconds, source=source, records=records),)


# the engines whose own code says the busiest rank binds (their speed rules' citation)
IMBALANCE_NOTES = {stack: torchtpu_vllm.IMBALANCE_ENGINE for stack in torchtpu_vllm.STACKS}


def _imbalance(s: StepInput) -> tuple[EngineTerm, ...]:
    from k3plan.step.work import busiest_rank_experts

    spec, par = s.setup.model.spec, s.setup.parallel
    if spec.moe is None or par.ep <= 1:
        return ()
    busiest, mean = busiest_rank_experts(
        num_experts=spec.moe.num_experts, top_k=spec.moe.top_k, batch=s.ep_tokens, ep=par.ep, histogram=s.histogram
    )
    note = IMBALANCE_NOTES.get(s.key.stack, "")
    term = expert_imbalance_term(s.stage, busiest=busiest, mean=mean, engine_note=note)
    return () if term is None else (term,)


TORCHTPU = When(stacks=torchtpu_vllm.STACKS)
MOE = ("grouped_matmul",)
PROBES = "evidence/probes"

# In the order the terms join a step (its JSON's overhead ops, in order) and are tried for admission.
REGISTRY: tuple[SpeedTerm, ...] = (
    SpeedTerm(
        name="host",
        title="the engine loop's host time a synchronous step (or one host's round trip on a TPU)",
        phase="both",
        level="step",
        when=When(),
        price=_host,
        source="the engine's published host time a step (evidence/engine_step_overheads.yaml, its stacks "
        "engines/vllm/speed.py ENGINE_LOOP_STACKS), else a TPU's host round trip (evidence/hosts/)",
        evidence=("evidence/engine_step_overheads.yaml", "evidence/hosts/*.yaml"),
    ),
    SpeedTerm(
        name="op-fixed",
        title="the fixed cost of the step's ops: their executions x one dependent fusion's",
        phase="both",
        level="step",
        when=When(hardware=("tpu",)),
        price=_op_fixed,
        source="benchmarks/step_overheads_tpu.py's fusion chain on a TPU (evidence/hosts/)",
        evidence=("evidence/hosts/*.yaml",),
    ),
    SpeedTerm(
        name="kernel-floor",
        title="the fixed duration of the step's kernels on a GPU: their executions x the shortest kernel a decode "
        "trace of the GPU shows",
        phase="both",
        level="step",
        when=When(hardware=("gpu",)),
        price=_kernel_floor,
        source=(
            "a public Perfetto trace of an SGLang decode step on the GPU, as its kernel table gives it "
            "(k3plan/evidence/gpu_kernel_floor.yaml: SemiAnalysisAI/InferenceX#863, B200)"
        ),
        evidence=("evidence/gpu_kernel_floor.yaml",),
    ),
    SpeedTerm(
        name="sglang-kernels",
        title="the step's kernels as SGLang launches them: its merged and fused ops one kernel, an activation-"
        "quantization kernel before each quantized linear, the glue kernels no op stands for",
        phase="both",
        level="step",
        when=When(stacks=sglang.GPU_STACKS, hardware=("gpu",)),
        price=_sglang_kernels,
        refines="kernel-floor",
        source="engines/sglang/kernels.py (SGLang's model and quantization code, cited a rule each; a B200 decode "
        "trace's FP4 quantization kernels; DeepSeek-V3's decode read launch by launch in the 0.5.7 and 0.5.12 "
        "wheels), at the kernel floor's duration",
        evidence=("evidence/gpu_kernel_floor.yaml",),
    ),
    SpeedTerm(
        name="gpu-moe",
        title="a GPU's routed-MoE calls at the latency the engine's kernel was measured at for the model's shape",
        phase="decode",
        level="step",
        when=When(stacks=sglang.GPU_STACKS, hardware=("gpu",), op_kinds=MOE),
        price=_gpu_moe,
        refines="sglang-kernels",
        source="evidence/gpu_moe.yaml: ai-dynamo/aiconfigurator@095f58a51's moe_perf tables for SGLang 0.5.14 (its "
        "collector times the FusedMoE layer's whole call), interpolated in the call's tokens; in place of the "
        "routed grouped GEMMs, their kernels at the floor and the busiest EP rank's excess",
        evidence=("evidence/gpu_moe.yaml",),
    ),
    SpeedTerm(
        name="gpu-gemm",
        title="a GPU's matmuls below the spec's peak: the engine's kernel at its published throughput for the shape",
        phase="both",
        level="step",
        when=When(hardware=("gpu",), op_kinds=("matmul",)),
        price=_gpu_gemm,
        source=(
            "published GEMM tables of the kernels the engines run (k3plan/evidence/gpu_gemm.yaml: the table, its "
            "kernel, the engines that run it and the code that says so), compute-bound rows only, over the "
            "measured GPU's spec peak"
        ),
        evidence=("evidence/gpu_gemm.yaml",),
    ),
    SpeedTerm(
        name="mxfp4-dequant",
        title="MXFP4 expert dequantisation",
        phase="both",
        level="step",
        when=When(stacks=torchtpu_vllm.STACKS, op_kinds=MOE, expert_formats=torchtpu_vllm.MXFP4_FORMATS),
        price=_cited("MXFP4 expert dequantisation", torchtpu_vllm.MXFP4_SOURCE),
        source=torchtpu_vllm.MXFP4_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="moe-gather-combine",
        title="MoE gather and combine",
        phase="both",
        level="step",
        when=When(op_kinds=MOE),
        price=_cited("MoE gather and combine", IN_STEP_SOURCE),
        source=IN_STEP_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="empty-expert-groups",
        title="grouped matmul over empty expert groups",
        phase="both",
        level="step",
        when=When(stacks=torchtpu_vllm.STACKS, op_kinds=MOE),
        price=_cited("grouped matmul over empty expert groups", torchtpu_vllm.GMM_SOURCE),
        source=torchtpu_vllm.GMM_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="device-programs",
        title="device programs a step",
        phase="both",
        level="step",
        when=TORCHTPU,
        price=_cited("device programs a step", torchtpu_vllm.GRAPH_SOURCE),
        source=torchtpu_vllm.GRAPH_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="mla-prefill-form",
        title="MLA prefill form",
        phase="prefill",
        level="step",
        when=When(stacks=torchtpu_vllm.STACKS, op_kinds=("attention",)),
        price=_mla_prefill_form,
        source=torchtpu_vllm.MLA_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="decode-padding",
        title="decode padding to the compiled bucket",
        phase="decode",
        level="step",
        when=When(),
        price=_cited("decode padding to the compiled bucket", torchtpu_vllm.PADDING_SOURCE),
        source=torchtpu_vllm.PADDING_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="sampling",
        title="sampling and logits",
        phase="decode",
        level="step",
        when=When(),
        price=_cited("sampling and logits", IN_STEP_SOURCE),
        source=IN_STEP_SOURCE,
        admission="cited",
    ),
    SpeedTerm(
        name="attnres-kernel",
        title="the engine's Attention Residual kernel, each call as a TPU timed it",
        phase="both",
        level="step",
        when=When(stacks=torchtpu_vllm.STACKS, hardware=("tpu",)),
        price=_attnres,
        source=torchtpu_vllm.ATTNRES_SOURCE,
        evidence=(f"{PROBES}/attnres-*.json",),
    ),
    SpeedTerm(
        name="moe-glue",
        title="the engine's MoE routing and one-hot permute at decode, as a TPU timed a copy of it",
        phase="decode",
        level="step",
        when=When(stacks=torchtpu_vllm.STACKS, hardware=("tpu",)),
        price=_moe_glue,
        source=torchtpu_vllm.MOE_GLUE_SOURCE,
        evidence=(f"{PROBES}/moe-glue-*.json",),
    ),
    SpeedTerm(
        name="mla-kernel",
        title="the engine's MLA kernel at the blocks it runs, beyond the step description's MLA attention",
        phase="both",
        level="step",
        when=When(stacks=torchtpu_vllm.STACKS, hardware=("tpu",), kv_dtypes=torchtpu_vllm.MLA_DEFAULT_KV_DTYPES),
        price=_mla_kernel,
        source=torchtpu_vllm.MLA_TUNED_SOURCE,
        evidence=(f"{PROBES}/mla-engine-*.json",),
    ),
    SpeedTerm(
        name="ep-imbalance",
        title="the routed experts of the busiest EP rank",
        phase="decode",
        level="step",
        when=When(op_kinds=MOE),
        price=_imbalance,
        source=IMBALANCE_SOURCE,
    ),
    SpeedTerm(
        name="served",
        title="the workload as the engine serves it: the scheduler's run of the benchmark",
        phase="both",
        level="served",
        when=When(),
        source="speed.serving.served_workload: the concurrency's requests through vLLM V1's rule, decodes and "
        "prefill chunks sharing a step's token budget, prompts sent together queueing behind each other, TTFT from "
        "each request's send",
    ),
    SpeedTerm(
        name="prefill-first",
        title="the engine's own scheduling rule: a prefill batch whenever one forms, never mixed with decode",
        phase="both",
        level="served",
        when=When(stacks=sglang.STACKS),
        source="speed.scheduler.PREFILL_FIRST_RULE (SGLang's scheduler); vLLM V1 mixes",
    ),
    SpeedTerm(
        name="prefill-pass",
        title="each step that prefills holds the engine loop for the engine's TTFT floor (the TTFT's fixed part is "
        "spent in the loop, not beside it)",
        phase="both",
        level="served",
        when=When(stacks=sglang.STACKS),
        source=(
            "speed.serving.loop_pass_s: SGLang runs a prefill batch as a step of its own (PREFILL_FIRST_RULE), and "
            "its prefill runs without a CUDA graph where a model is on its blacklist -- DeepseekV4ForCausalLM is "
            "(sglang 0.5.15 and 0.5.12 wheels, python/sglang/srt/configs/model_config.py "
            "piecewise_cuda_graph_disabled_model_archs; 0.5.7 captures no prefill graph unless "
            "--enable-piecewise-cuda-graph, server_args.py enable_piecewise_cuda_graph = False) -- so the host "
            "launches every kernel of the pass while the decode batch waits. The time is the engine's TTFT floor "
            "(term engine-floor: fitted on the published TTFTs only; held out in the score, each case's own "
            "refitted without it), the request's own pass being its TTFT's floor: no new parameter"
        ),
    ),
    SpeedTerm(
        name="mean-context",
        title="a request's decode steps priced at its mean context, ISL + OSL / 2 (the one-step model: ISL)",
        phase="decode",
        level="served",
        when=When(),
        source="a request decodes from ISL to ISL + OSL tokens of context",
    ),
    SpeedTerm(
        name="pool-cap",
        title="the running batch capped at the sequences of ISL + OSL tokens the KV pool holds (fit's capacity)",
        phase="both",
        level="served",
        when=When(),
        source=(
            "the scheduler admits a request only when its KV pages fit (vLLM v1/core/sched/scheduler.py Scheduler."
            "schedule: allocate_slots returns None and the request waits; SGLang's PrefillAdder admits while the "
            "token pool has room): a client's concurrency above the pool runs as a queue, not a batch"
        ),
    ),
    SpeedTerm(
        name="swa-pool",
        title="SGLang's sliding-window pool caps the running requests: each holds its first prefill chunk for its life",
        phase="both",
        level="served",
        when=When(stacks=sglang.STACKS),
        source=(
            "speed.scheduler.SWA_RULE (sglang 0.5.15 wheel: managers/schedule_policy.py PrefillAdder.add_one_req "
            "rem_swa_tokens; mem_cache/swa_radix_cache.py inc_lock_ref), the pool as SGLang sizes it for "
            "DeepSeek-V4 (engines/sglang/memory.py sglang_dsv4_swa_tokens: --swa-full-tokens-ratio x the full "
            "tokens)"
        ),
    ),
    SpeedTerm(
        name="held-batch",
        title="the step's line drawn through the decode batch the run holds (a pool or a cap), not the client's "
        "concurrency",
        phase="decode",
        level="served",
        when=When(),
        source=(
            "speed.serving.served_workload: the served step is linear in the decode batch, drawn through the model's "
            "step at one and at the concurrency a group; the model's step is concave in it (the routed experts "
            "touched saturate), so where the run holds far fewer (HELD_BATCH_SHARE) the line is drawn again through "
            "the batch the first run held (its output rate x TPOT) and the run served on it"
        ),
    ),
    SpeedTerm(
        name="client-lengths",
        title="a benchmark's requests at the lengths its client draws (its published --random-range-ratio)",
        phase="both",
        level="served",
        when=When(),
        source=(
            "kimbochen/bench_serving benchmark_serving.py sample_random_requests @406abc35 (InferenceX's "
            "utils/bench_serving @8c145e00, ROCm/ATOM's OOT client): ISL and OSL each uniform over [int(L r), L] "
            "(speed.scheduler.LENGTHS_RULE); requests of unequal lengths finish apart, so a run's later prompts "
            "arrive spread out, not in waves"
        ),
    ),
    SpeedTerm(
        name="recv-interval",
        title="SGLang takes new requests in only every --scheduler-recv-interval decode steps, where the run sets it",
        phase="prefill",
        level="served",
        when=When(stacks=sglang.STACKS),
        source=(
            "sgl-project/sglang@70310f05 python/sglang/srt/managers/scheduler_recv_skipper.py SchedulerRecvSkipper."
            "handle: a counter of the last batch's weight (decode 1, prefill 1,000) reaching the interval "
            "(speed.scheduler.RECV_RULE)"
        ),
    ),
    SpeedTerm(
        name="async",
        title="asynchronous scheduling hides the synchronous step's host time where the run schedules so",
        phase="both",
        level="served",
        when=When(),
        source="speed.overheads.async_host_term; the run's flag, else engines.flags.SCHEDULING_DEFAULT",
    ),
    SpeedTerm(
        name="floor",
        title="a per-request TTFT floor F added to every TTFT, fitted to the published TTFTs",
        phase="prefill",
        level="served",
        when=When(),
        source="least squares in log ratio over the published TTFTs (k3plan.app.score.fit_floor); held out: F "
        "refitted without the case",
    ),
    SpeedTerm(
        name="engine-floor",
        title="the TTFT floor fitted on each engine's own TTFTs (with floor): the per-request path is the engine's",
        phase="prefill",
        level="served",
        when=When(),
        source="k3plan.app.score._with_floor per_engine: F fitted on the case's engine's other published TTFTs "
        "(HTTP server, tokenizer and scheduler are each engine's own); held out: refitted without the case. The "
        "admitted F of each engine (admitted.json ttft_floor_ms) is on both runs of a command's TTFT transfer",
    ),
    SpeedTerm(
        name="hardware-floor",
        title="the TTFT floor fitted on each engine x hardware's own TTFTs (with engine-floor): the per-request path "
        "runs on the host the accelerator comes with",
        phase="prefill",
        level="served",
        when=When(),
        refines="engine-floor",
        source="k3plan.app.score._with_floor per hardware: F fitted on the case's engine x hardware's other published "
        "TTFTs, its engine's where the family has no other (SGLang's DeepSeek-R1 FP4 rows on B300 answer c1 in about "
        "77 ms, its DeepSeek-V3 FP8 rows on B200 in about 160 ms); held out: refitted without the case. The admitted F "
        'of each family (admitted.json ttft_floor_ms, keys "engine x hardware") is on both runs of a command\'s TTFT '
        "transfer, its engine's where the family has none",
        evidence=("evidence/benchmarks/deepseek-r1-fp4-sglang-b300-*.yaml",),
    ),
    # lowc-floor, off (held out, within 0.67-1.5x, within 0.5-2x, mean |ln ratio|; without -> with):
    #   against the set admitted before it (engine-floor the finest floor):
    #     TPOT 55/58, 58/58, 0.112 -> 55/58, 58/58, 0.115 | TTFT 31/53, 48/53, 0.322 -> 40/53, 49/53, 0.274 |
    #     throughput 45/48, 48/48, 0.129 -> 45/48, 48/48, 0.130 | together 131/159, 154/159, 0.187 -> 140/159, 155/159,
    #     0.172
    #   against the admitted set (family-min-floor ON; admitted.json's row): together 145/159, 156/159, 0.146 ->
    #     140/159, 155/159, 0.172 (TPOT 0.106 -> 0.115, TTFT 0.214 -> 0.274, throughput 0.118 -> 0.130)
    #   moved most: SGLang B300 R1 FP4 c1-c8 TTFT 1.54-2.14x -> 0.90-1.17x (held-out floor 137-141.5 -> 62.5-67 ms);
    #   SGLang B200 V3 1k c1/c2 0.94x/1.01x -> 1.49x (its low-concurrency fit, 217.5-220 ms, pulled up by the 8k c1/c2
    #   runs' 314-484 ms); vLLM MI355X c4 1.01-1.03x -> 1.23-1.27x; Kimi-K3 B300 1.01-1.04x -> 0.83-0.85x. It loses to
    #   family-min-floor on the families with no run at c <= 4: SGLang's H200 keeps the engine's floor (DeepSeek-V3
    #   TTFT 0.55-0.73x, V4 TPOT 0.54-0.75x), where its own 278 ms moves them to 0.93-1.11x and 0.67-1.17x
    SpeedTerm(
        name="lowc-floor",
        title="the TTFT floor fitted on each engine x hardware's low-concurrency TTFTs (c <= 4; with engine-floor): "
        "the per-request path where no request queues behind another's prefill",
        phase="prefill",
        level="served",
        when=When(),
        refines="engine-floor",
        source="k3plan.app.score.floor_fits at level lowc: F fitted on the case's engine x hardware's other published "
        "TTFTs at concurrency <= LOW_CONCURRENCY (4: above it the runs' TTFTs are their queue, which the served run "
        "prices), applied to every case of the family; a family with none takes its engine's fit (engine-floor, "
        "every concurrency); held out: refitted without the case. A family's own F is written to admitted.json "
        'ttft_floor_ms as "engine x hardware" where the held-out score fitted one',
    ),
    # family-min-floor, ON (without -> with, against the set admitted before it):
    #     TPOT 55/58, 58/58, 0.112 -> 56/58, 58/58, 0.106 | TTFT 31/53, 48/53, 0.322 -> 44/53, 50/53, 0.214 |
    #     throughput 45/48, 48/48, 0.129 -> 45/48, 48/48, 0.118 | together 131/159, 154/159, 0.187 -> 145/159, 156/159,
    #     0.146
    #   moved most: SGLang H200 V3 c8-c32 TTFT 0.55-0.59x -> 0.93-1.02x and V4-Flash c1024 0.65x -> 1.01x (the family's
    #   278 ms); B300 R1 FP4 c1-c8 1.54-2.14x -> 0.99-1.30x (73-77 ms); through prefill-pass V4-Pro H200 TPOT
    #   0.54-0.55x -> 0.67-0.68x (throughput 1.95x -> 1.59x) and V4-Flash H200 0.75x -> 1.17x. Worse: B200 V3 1k c1/c2
    #   TTFT 0.94x/1.01x -> 1.54x/1.53x (the B200 family's 225.5-227.5 ms, its 8k and c64 runs in it), H200 V3 c64 TPOT
    #   0.95x -> 1.21x, Kimi-K3 B300 c1 TTFT 1.01-1.04x -> 0.85-0.87x. The H100 V4-Flash pair takes SGLang's floor.
    SpeedTerm(
        name="family-min-floor",
        title="the TTFT floor fitted on each engine x hardware's TTFTs where the family has at least 3 others "
        "(with engine-floor), else the engine's",
        phase="prefill",
        level="served",
        when=When(),
        refines="engine-floor",
        source="k3plan.app.score.floor_fits at level family-min: hardware-floor's fit, a case taking its family's F "
        "only where FAMILY_MIN_OTHERS (3) of the family's other published TTFTs are left once it is left out, else "
        "its engine's (a one-parameter fit on one or two runs is their residual: the DeepSeek-V4-Flash H100 pair); "
        "held out: refitted without the case",
    ),
    # pass-engine-floor, off (without -> with, against the admitted set, family-min-floor ON):
    #     TPOT 56/58, 58/58, 0.106 -> 55/58, 58/58, 0.112 | TTFT 44/53, 50/53, 0.214 -> 42/53, 49/53, 0.222 |
    #     throughput 45/48, 48/48, 0.118 -> 45/48, 48/48, 0.129 | together 145/159, 156/159, 0.146 -> 142/159, 155/159,
    #     0.154
    #   moved most: SGLang H200 V4-Flash c1024 TTFT 1.01x -> 0.65x and TPOT 1.17x -> 0.75x, V4-Pro TPOT 0.67-0.68x ->
    #   0.54-0.55x (throughput 1.59x -> 1.96x). Better: H200 V3 c64 TPOT 1.21x -> 0.95x, Kimi-K3 B300 c16/c64 TTFT
    #   0.71-0.84x -> 0.77-0.92x, B300 R1 and B200 V3 c16-c32 TPOT and throughput from 0.94-1.08x to 1.00x (B300's
    #   73 ms held is short of what its loop holds, H200's 278 ms is not). With hardware-floor in place of
    #   family-min-floor it takes together 0.207 -> 0.154: hardware-floor's loss was its two-case H100 floor held in
    #   every prefill step
    SpeedTerm(
        name="pass-engine-floor",
        title="each step that prefills holds the loop for the engine's TTFT floor, not its engine x hardware's (with "
        "prefill-pass and a family floor term: the family's floor in the TTFT alone)",
        phase="both",
        level="served",
        when=When(stacks=sglang.STACKS),
        refines="prefill-pass",
        source=(
            "k3plan.app.score.pass_level, speed.serving.loop_pass_s: SGLang's HTTP server and TokenizerManager run "
            "in the main process and its DetokenizerManager in a subprocess of its own, apart from the scheduler's "
            "loop (sgl-project/sglang@001067ff python/sglang/srt/entrypoints/engine.py class Engine: 'The HTTP "
            "server, Engine, and TokenizerManager all run in the main process'), so a TTFT's fixed part is not all "
            "spent where the decode batch waits; the term asks whether what a family's floor adds to its engine's is "
            "spent there (priced only where a family floor is fitted: else the two floors are one)"
        ),
    ),
)
BY_NAME = {t.name: t for t in REGISTRY}
STEP_TERMS = tuple(t for t in REGISTRY if t.level == "step")
SCORED = tuple(t.name for t in REGISTRY if t.admission == "scored")  # tried for admission, in REGISTRY order
CITED = frozenset(t.name for t in REGISTRY if t.admission == "cited")


@cache
def admitted() -> dict[str, Any]:
    """admitted.json as written by the admission (``{"terms": {name: {"on": bool, ...}}, ...}``)."""
    return json.loads(ADMITTED.read_text())


def ttft_floor_s(engine: str, hardware: str | None = None) -> float:
    """The TTFT floor the admission fitted for ``engine`` on ``hardware`` (admitted.json ``ttft_floor_ms``: the
    family's own published TTFTs' fit, key "engine x hardware", with term hardware-floor; else the engine's with
    engine-floor; else the pooled one), in seconds; 0 where no floor term is admitted. A transfer adds it to both
    runs' TTFT (``speed.serving._like_for_like``): the per-request path a measured TTFT holds."""
    floors = admitted().get("ttft_floor_ms", {})
    ms = floors.get(f"{engine} x {hardware}", floors.get(engine, floors.get("*")))
    return 0.0 if ms is None else float(ms) / 1e3


def default_terms() -> frozenset[str]:
    """The terms ON by default: every cited one, and every scored one admitted.json admits (a term it does not
    name is OFF until the admission has tried it)."""
    table = admitted().get("terms", {})
    return CITED | frozenset(n for n in SCORED if table.get(n, {}).get("on", False))


def resolve(terms: frozenset[str] | None) -> frozenset[str]:
    """``terms`` as given (a set of REGISTRY names; cited terms always join it), or the admitted default."""
    if terms is None:
        return default_terms()
    unknown = set(terms) - set(BY_NAME)
    if unknown:
        from k3plan.errors import K3PlanError

        raise K3PlanError(f"unknown speed term(s) {', '.join(sorted(unknown))}; known: {', '.join(BY_NAME)}")
    return frozenset(terms) | CITED


def term_key(setup, *, stage: Literal["decode", "prefill"], ops: list) -> TermKey:
    return TermKey(
        stage=stage,
        stack=setup.stack.name,
        hardware=setup.hardware.kind,
        kv_dtype=setup.stack.kv_cache.dtype,
        op_kinds=tuple(sorted({op.kind for op in ops})),
        expert_formats=expert_formats(setup),
    )


def expert_formats(setup) -> tuple[str, ...]:
    """The formats the stack holds the model's routed experts in (``Stack.runtime_format`` of each expert tensor's
    checkpoint format), sorted."""
    stack = setup.stack
    pairs = setup.model.inventory.role_formats
    return tuple(sorted({stack.runtime_format(role, fmt) for role, fmt in pairs if role == "expert"}))


def step_terms(step: StepInput, terms: frozenset[str] | None = None) -> tuple[EngineTerm, ...]:
    """The registered step terms that are ON (``terms``; None: the admitted default) and apply to ``step``, in
    REGISTRY order: what joins the step's ops as overhead (``speed.overheads.add_terms``)."""
    on = resolve(terms)
    step = with_fields(step, on=on)
    out: tuple[EngineTerm, ...] = ()
    for t in STEP_TERMS:
        if _refined_on(t, on) and t.applies(step.key) and t.price is not None:
            out += tuple(replace(e, term=t.name) for e in t.price(step))
    return out


def _refined_on(t: SpeedTerm, on: frozenset[str]) -> bool:
    """``t`` is ON and so is every term it refines, down the chain (a correction of a correction)."""
    while t.refines is not None:
        if t.name not in on:
            return False
        t = BY_NAME[t.refines]
    return t.name in on


class TermShare(Frozen):
    """What one registered step term adds to a question's expected times (the JSON's ``expected.terms``): whether
    it is ON, its seconds in the decode step and in the whole prompt's prefill (0 where OFF or where its key does
    not hold), what it prices and its source."""

    term: str
    title: str
    phase: Phase
    on: bool
    decode_s: float
    prefill_s: float
    source: str
    evidence: tuple[str, ...]  # the package files its evidence globs name


def shares(decode: tuple[EngineTerm, ...], prefill: tuple[EngineTerm, ...], terms: frozenset[str] | None):
    """Every registered step term's TermShare, in REGISTRY order, from the terms a decode step and the prompt's
    chunks carried."""
    on = resolve(terms)
    return tuple(
        TermShare(
            term=t.name,
            title=t.title,
            phase=t.phase,
            on=t.name in on,
            decode_s=sum(e.seconds for e in decode if e.term == t.name),
            prefill_s=sum(e.seconds for e in prefill if e.term == t.name),
            source=t.source,
            evidence=evidence_files(t),
        )
        for t in STEP_TERMS
    )


def evidence_files(term: SpeedTerm) -> tuple[str, ...]:
    """The package files a term's evidence globs name (package-relative), sorted; read once a process."""
    return _evidence_files(term.name)


@cache
def _evidence_files(name: str) -> tuple[str, ...]:
    globs = BY_NAME[name].evidence
    return tuple(sorted(p.relative_to(PACKAGE).as_posix() for g in globs for p in PACKAGE.glob(g)))
