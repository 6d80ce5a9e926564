"""Issue 10 item 3: a plan's reasons are typed (plan.reasons.ReasonCounts / ReasonTexts), and a
family's counts land under the reason that stopped each configuration. The configurations here are
made by hand: their codes and their expected counts are written out in the test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from k3plan.plan.extras import PickExtras, PlanExtras
from k3plan.plan.reasons import CODE, SLA_REASON, ReasonCounts, ReasonTexts, families, reason_texts
from k3plan.step.verdict import REASONS
from k3plan.structs import dump, fields, replace

KEYS = [k for k, _ in REASONS]


@dataclass
class _Space:  # what families() reads of a plan.space.Space
    hardware: list
    stacks: list
    skipped: dict = field(default_factory=dict)

    def family(self, index: int) -> tuple[str, str]:
        return self.hardware[index // len(self.stacks)].name, self.stacks[index % len(self.stacks)].name


def test_one_field_per_reason_in_the_verdicts_order():
    assert list(fields(ReasonCounts)) == [*KEYS, "sla"]
    assert list(fields(ReasonTexts)) == [*KEYS, "sla"]
    with pytest.raises(TypeError):
        ReasonCounts(fits=1)  # an unknown reason is refused, not carried (a Struct: TypeError)


def test_reason_texts_are_the_verdicts_and_sla_only_under_strict():
    assert json.dumps(dump(reason_texts())) == json.dumps(dict(REASONS))
    strict = reason_texts(strict_sla=True)
    assert strict.sla == SLA_REASON
    assert list(dump(strict, mode="python")) == [*KEYS, "sla"]
    assert strict.items()[-1] == ("sla", SLA_REASON)


def test_families_count_each_configuration_under_its_reason():
    # family 0 = (h0, s0): 2 feasible, 1 fallback, 1 weights; family 1 = (h1, s0): 2 budget, 1 tpot
    space = _Space(
        hardware=[SimpleNamespace(name="h0"), SimpleNamespace(name="h1")], stacks=[SimpleNamespace(name="s0")]
    )
    fam = np.array([0, 0, 0, 0, 1, 1, 1])
    codes = np.array([0, 0, CODE["fallback"], CODE["weights"], CODE["budget"], CODE["budget"], CODE["tpot"]])
    gib = 2**30
    cols = SimpleNamespace(  # the columns of plan.table.StepColumns that families() reads
        family=fam,
        weights_bytes=np.array([1, 1, 1, 3, 1, 1, 1]) * gib,
        usable=np.full(7, 2 * gib),
        room_bytes=np.array([9, 9, 9, 9, 1, 0.5, 9]) * gib,
        sequence_bytes=np.full(7, 2 * gib),
        max_sequences=np.full(7, 4),
        tpot_s=np.array([0.01] * 6 + [0.08]),
    )
    kinds = {"heads=96 over tp": np.array([0, 0, 1, 0, 0, 0, 0], dtype=bool)}
    f0, f1 = families(space=space, cols=cols, codes=codes, kinds=kinds, concurrency=1, target_tpot_s=0.05)  # type: ignore[arg-type]
    assert f0.reasons == ReasonCounts(feasible=2, fallback=1, weights=1)
    assert (f0.feasible, f0.configurations, f0.reasons.total()) == (2, 4, 4)
    assert f1.reasons == ReasonCounts(budget=2, tpot=1)
    assert f1.reasons.feasible is None and f1.reasons.total() == 3
    # the JSON: present reasons only, in the verdict's order, feasible first
    assert json.dumps(dump(f0)["reasons"]) == '{"feasible": 2, "fallback": 1, "weights": 1}'
    assert json.dumps(dump(f1)["reasons"]) == '{"budget": 2, "tpot": 1}'
    # each detail line follows its reason: weights 3 GiB of 2 usable = 150%; short by 2 - 1 = 1 GiB; 80 ms vs 50
    assert f0.detail == ["fallbacks: heads=96 over tp", "weights alone: at best 150% of usable HBM a device"]
    assert f1.detail == [
        "one sequence at the context: short by 1.00 GiB a device at best",
        "best TPOT 80.00 ms against a target of 50 ms",
    ]


def test_a_strict_sla_miss_keeps_the_order():
    # plan/wire.py's --strict update: feasible 3 of which 2 miss -> feasible 1, sla 2 after the others
    r = replace(ReasonCounts(feasible=3, weights=4), feasible=1, sla=2)
    assert json.dumps(dump(r, mode="python")) == '{"feasible": 1, "weights": 4, "sla": 2}'
    gone = replace(ReasonCounts(feasible=2, weights=4), feasible=None, sla=2)
    assert gone.items() == [("weights", 4), ("sla", 2)]


def test_plan_extras_are_typed_and_empty_by_default():
    x = PlanExtras()
    assert (x.sla, x.pareto, x.disaggregated, x.launch, x.cold_start, x.assumptions) == (None, (), None, None, None, ())
    with pytest.raises(TypeError):
        PlanExtras(launch=None)  # the pick's launch lives in PickExtras; no free-form keys (a Struct: TypeError)
    assert set(fields(PickExtras)) == {"launch", "cold_start"}
