"""Latency targets (TTFT, TPOT, request latency) for plan's rows, from the scheduler's closed form.

With DP > 1 each DP group is an engine of its own (its scheduler, its token budget: the launch's
--max-num-batched-tokens is a DP rank's), and a request runs on one of them; the groups step together
(the MoE layers' collectives join them). So the scheduler runs on ONE group with its share of the load,
and the deployment's throughput is the groups' sum. A group's step time is linear, T(d, p) = base + a d + b p
(``speed.scheduler.StepCoefficients``), d and p that group's:
- base and a from the row's decode roofline step (plan's TPOT column, ``step.decode``, over all groups)
  at two batches: a_all = (T(k) - T(1)) / (k - 1), base = T(1) - a_all; a group's sequence is dp of the
  deployment's (k sequences are k / dp a group), so a = dp x a_all;
- b from the prefill ceiling of ``roofline.bounds.prefill_bound``, one prompt on its group:
  ``roofline.work.prompt_flops_per_token`` (2 x active params + causal attention FLOPs a token at the
  ISL, the routed experts' spread over the EP group) / (peak FLOP/s a device x the group's devices x MFU).
These are ceilings (spec peaks x the Efficiency's bandwidth and MFU), not efficiency records: every
figure here is an analytic estimate and the output says so. ``steady_state`` (vLLM V1's rule,
closed form) turns them into TTFT, TPOT, request latency and throughput at --concurrency or
--request-rate with the row's prefill chunk as a group's token budget.
"""

from __future__ import annotations

import math

import numpy as np

from k3plan.errors import K3PlanError
from k3plan.models import Model
from k3plan.plan.table import StepColumns
from k3plan.roofline.bounds import Efficiency
from k3plan.speed.scheduler import SchedulerResult, StepCoefficients, steady_state
from k3plan.step.work import (
    attention_prefill_flops_per_token,
    expert_flops_per_token,
    linear_flops_per_token,
    prompt_devices,
    prompt_flops_per_token,
)
from k3plan.structs import Frozen

LABEL = (
    "each row's best estimate under the load, as roofline and fit assemble one (plan/serving.serve_row): a serving "
    "benchmark's figure (measured, or transferred by the ratio of the served workloads), else the scheduler on the "
    "model's step where a probe record sets an op or a term, else the vLLM V1 scheduler's steady-state closed form "
    "on the ceilings (step time from the decode roofline and the prefill compute ceiling)"
)


class SlaTargets(Frozen):
    """The request: workload shape, load and the targets (None: not asked)."""

    isl_tokens: int
    osl_tokens: int
    concurrency: int | None  # closed loop: sequences in flight
    request_rate_per_s: float | None  # open loop
    ttft_ms: float | None
    tpot_ms: float | None
    request_latency_ms: float | None
    strict: bool
    method: str = LABEL


class SlaRow(Frozen):
    """One configuration under the load: the scheduler's figures and which targets it misses."""

    ttft_ms: float | None  # None: the load is beyond what the configuration sustains
    tpot_ms: float | None
    request_latency_ms: float | None
    output_tokens_per_s: float | None
    output_tokens_per_s_per_user: float | None
    output_tokens_per_s_per_chip: float | None
    input_tokens_per_s: float | None
    in_flight_sequences: float | None  # Little's law: arrivals x request latency (closed loop: N)
    step_base_ms: float  # a DP group's step coefficients: the model's where the TPOT is (plan/serving.serve_row), else the ceilings'
    step_per_decode_seq_ms: float
    step_per_prefill_token_us: float
    meets: bool
    misses: list[str]  # "TTFT 2,310 ms > 2,000 ms target (+310 ms, +15.5%)"
    throughput_batch: int | None = None  # --maximize throughput: the largest batch that fits memory and --tpot-ms
    throughput_tokens_per_s_per_chip: float | None = None  # output tokens/s a chip at that batch (closed loop)
    # issue 38, 46: where each of TTFT and TPOT came from, the best estimate roofline and fit stand behind
    # (speed.serving.stands_behind under the load): "measured" at a serving benchmark's workload, "transferred" near
    # it, "model" (the scheduler on the model's step where a probe record sets an op or a term), else "ceiling" (the
    # scheduler on the decode bound and the prefill compute ceiling)
    ttft_source: str = "ceiling"
    tpot_source: str = "ceiling"
    serving_labels: list[str] = []  # the stood-behind figures' labels (the benchmark named), where any
    # issue 46 item 7: each figure's band (lo, hi) in ms, the type roofline's ServingFigure.band_s has: between the
    # ceilings under the load and the model under it (plan/serving.py serve_rows); None where the load is not
    # sustained; hi infinite (null in the JSON, empty in the CSV) where the model does not sustain the load
    ttft_band_ms: tuple[float, float] | None = None
    tpot_band_ms: tuple[float, float] | None = None


# the range a latency target may take: a microsecond is below any accelerator's one kernel launch, a day above any
# serving target; outside it a target is a typo (1e-300 printed a 300-digit miss percentage)
TARGET_MS_RANGE = (1e-3, 86_400_000.0)
MAX_REQUEST_RATE = 1e9  # requests a second: far above any one deployment's load
# a request a day: below it there is no serving load to size (1e-308 overflowed the cost a token to inf)
MIN_REQUEST_RATE = 1 / 86_400


def check_targets(*, ttft_ms, tpot_ms, request_latency_ms, isl, osl, request_rate, concurrency_given: bool) -> None:
    lo, hi = TARGET_MS_RANGE
    for flag, v in (
        ("--ttft-ms", ttft_ms),
        ("--tpot-ms (--target-tpot-ms)", tpot_ms),
        ("--request-latency-ms", request_latency_ms),
    ):
        if v is not None and not (math.isfinite(v) and lo <= v <= hi):
            raise K3PlanError(f"{flag} {v}: expected milliseconds from {lo:g} to {hi:,.0f} (one day)")
    if request_rate is not None and not (
        math.isfinite(request_rate) and MIN_REQUEST_RATE <= request_rate <= MAX_REQUEST_RATE
    ):
        raise K3PlanError(
            f"--request-rate {request_rate:g}: expected requests a second from {MIN_REQUEST_RATE:.3g} (one a day) "
            f"to {MAX_REQUEST_RATE:g}"
        )
    for flag, v in (("--isl", isl), ("--osl", osl)):
        if v is not None and v < 1:
            raise K3PlanError(f"{flag} {v}: expected a whole number of tokens >= 1")
    if (isl is None) != (osl is None):
        raise K3PlanError("--isl and --osl: give both (prompt and output tokens a request) or neither")
    if request_rate is not None and concurrency_given:
        raise K3PlanError("--request-rate and --concurrency: give one load, not both")


def step_coefficients(
    *, model: Model, cols_1: StepColumns, cols_k: StepColumns, k: int, isl: int, eff: Efficiency
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A DP group's (base_s, per_decode_seq_s, per_prefill_token_s) columns (module docstring); cols_1 / cols_k:
    evaluate() at batch 1 and k > 1."""
    t1, tk = cols_1.tpot_s, cols_k.tpot_s
    a_all = np.maximum((tk - t1) / (k - 1), 0.0)
    base = np.maximum(t1 - a_all, 0.0)
    group, expert_group = prompt_devices(
        devices=cols_1.chips * cols_1.devices_per_chip, dp=cols_1.dp, ep=cols_1.ep, pp=cols_1.pp
    )
    per_token = prompt_flops_per_token(
        linear=linear_flops_per_token(model.inventory.active_params),
        attention=attention_prefill_flops_per_token(model.spec, isl),
        experts=expert_flops_per_token(model.inventory),
        group=group,
        expert_group=expert_group,
    )
    b = per_token / (cols_1.flops * group * eff.mfu)
    return base, a_all * cols_1.dp, b


def target_miss(what: str, got_s: float, target_ms: float | None) -> str | None:
    if target_ms is None or got_s * 1e3 <= target_ms:
        return None
    over = got_s * 1e3 - target_ms
    return f"{what} {got_s * 1e3:,.1f} ms > {target_ms:g} ms target (+{over:,.1f} ms, +{over / target_ms:.1%})"


def _group_state(
    *, step: StepCoefficients, targets: SlaTargets, token_budget: int, chips: int, dp: int, concurrency: int | None
) -> tuple[SchedulerResult, int]:
    """(one DP group's steady state, the groups serving): closed loop, the ``concurrency`` sequences spread
    over min(dp, concurrency) groups; open loop, the requests over all dp. The deployment's throughput is
    the groups' x the group's."""
    if concurrency is None:
        rate = targets.request_rate_per_s
        assert rate is not None  # SlaTargets: a concurrency or a request rate
        groups, kw = dp, {"request_rate_per_s": rate / dp}
    else:
        groups = min(dp, concurrency)
        per = concurrency / groups
        if per > token_budget:
            raise K3PlanError(
                f"{per:,.4g} sequences a DP group exceed its token budget of {token_budget} (the prefill chunk)"
            )
        kw = {"concurrency": per}
    r = steady_state(
        step=step, isl=targets.isl_tokens, osl=targets.osl_tokens, token_budget=token_budget, chips=chips, **kw
    )
    return r, groups


def sla_row(
    *,
    targets: SlaTargets,
    base: float,
    a: float,
    b: float,
    token_budget: int,
    chips: int,
    max_sequences: int,
    dp: int = 1,
) -> SlaRow:
    """The row's figures under the load; ``base``, ``a``, ``b``: a DP group's (``step_coefficients``)."""
    step = StepCoefficients(base_s=base, per_decode_seq_s=a, per_prefill_token_s=b, source=LABEL)
    coef = {"step_base_ms": base * 1e3, "step_per_decode_seq_ms": a * 1e3, "step_per_prefill_token_us": b * 1e6}
    coef_kw: dict = coef  # typed loosely: SlaRow checks the values
    conc = None if targets.request_rate_per_s is not None else (targets.concurrency or 1)
    try:
        r, groups = _group_state(
            step=step, targets=targets, token_budget=token_budget, chips=chips, dp=dp, concurrency=conc
        )
    except K3PlanError as err:
        return SlaRow(
            ttft_ms=None,
            tpot_ms=None,
            request_latency_ms=None,
            output_tokens_per_s=None,
            output_tokens_per_s_per_user=None,
            output_tokens_per_s_per_chip=None,
            input_tokens_per_s=None,
            in_flight_sequences=None,
            meets=False,
            misses=[f"load not sustained: {err}"],
            **coef_kw,
        )
    out_per_s = groups * r.output_tokens_per_s
    in_flight = float(conc) if conc is not None else out_per_s / targets.osl_tokens * r.request_latency_s
    misses = [
        m
        for m in (
            target_miss("TTFT", r.ttft_s, targets.ttft_ms),
            target_miss("TPOT", r.tpot_s, targets.tpot_ms),
            target_miss("request latency", r.request_latency_s, targets.request_latency_ms),
        )
        if m
    ]
    if in_flight > max_sequences:
        misses.append(f"memory: {in_flight:,.1f} sequences in flight > {max_sequences:,} that fit")
    return SlaRow(
        ttft_ms=r.ttft_s * 1e3,
        tpot_ms=r.tpot_s * 1e3,
        request_latency_ms=r.request_latency_s * 1e3,
        output_tokens_per_s=out_per_s,
        output_tokens_per_s_per_user=r.output_tokens_per_s_per_user,
        output_tokens_per_s_per_chip=out_per_s / chips,
        input_tokens_per_s=out_per_s / targets.osl_tokens * targets.isl_tokens,
        in_flight_sequences=in_flight,
        meets=not misses,
        misses=misses,
        **coef_kw,
    )


def largest_batch(
    *,
    targets: SlaTargets,
    base: float,
    a: float,
    b: float,
    token_budget: int,
    chips: int,
    max_sequences: int,
    dp: int = 1,
) -> tuple[int | None, float | None]:
    """(batch, output tokens/s a chip): the most sequences (all DP groups') that fit memory (``max_sequences``),
    the groups' token budgets and --tpot-ms under the scheduler's steady state (closed loop); (None, None) if
    even one misses. ``base``, ``a``, ``b``: a DP group's."""
    batch = min(max_sequences, dp * token_budget)
    target = None if targets.tpot_ms is None else targets.tpot_ms / 1e3
    if target is not None and a > 0:  # the decode-only step bounds the batch from above (dp groups of a's)
        batch = min(batch, math.floor(dp * (target - base) / a))
    step = StepCoefficients(base_s=base, per_decode_seq_s=a, per_prefill_token_s=b, source=LABEL)
    for _ in range(16):  # prefill riding along lengthens the step: shrink until the steady state meets TPOT
        if batch < 1:
            return None, None
        r, groups = _group_state(
            step=step, targets=targets, token_budget=token_budget, chips=chips, dp=dp, concurrency=batch
        )
        if target is None or r.tpot_s <= target:
            return batch, groups * r.output_tokens_per_s / chips
        batch = min(batch - 1, math.floor(batch * target / r.tpot_s))
    return None, None
