"""Issue 10 item 3: `roofline --json` is dumped from a typed RooflineResult (roofline.result), its
long-context ratios and the expected time's per-category split are typed, and the keys stay put."""

from __future__ import annotations

import json

import pytest
from roofline_helpers import setup

from k3plan.advice.roofline_output import RooflineResult
from k3plan.app.roofline import RooflineRefusal
from k3plan.roofline.bounds import crossover
from k3plan.roofline.result import LongContext
from k3plan.speed.efficiency import Efficiency
from k3plan.speed.expected import KindTimes, OpTime, kind_times
from k3plan.step.opcost import CATEGORIES
from k3plan.structs import dump, fields

KEYS = [
    "model",
    "hardware",
    "topology",
    "chips",
    "parallel",
    "stack",
    "efficiency",
    "decode",
    "prefill",
    "expected",
    "long_context",
    "notes",
    "probes",
    "records_used",
    "fits",
    "fit_reason",
    "spec_decode",
    "advice",
    "prefix_hit",
    "serving",
]


def test_the_json_keys_are_the_fields():
    assert list(fields(RooflineResult)) == KEYS
    assert list(fields(RooflineRefusal)) == [
        "model",
        "hardware",
        "topology",
        "parallel",
        "stack",
        "fits",
        "reason",
        "reason_code",
        "free_bytes",
    ]  # reason_code: issue 36
    assert list(fields(KindTimes)) == list(CATEGORIES)


def test_ratios_dump_as_the_context_mapping():
    c = crossover(setup(), [32768, 1048576])
    assert isinstance(c, LongContext)
    d = json.loads(json.dumps(dump(c)))
    assert list(d["ratio_by_context"]) == ["32768", "1048576"]
    assert d["ratio_by_context"]["32768"] == c.ratio(32768) < 1 < c.ratio(1048576)
    # absorbed MLA grows linearly in the context: 32x the context, 32x the ratio
    assert c.ratio(1048576) == pytest.approx(32 * c.ratio(32768), rel=1e-12)
    assert d["linear_flops_per_token"] == 208_379_229_696  # 2 x K3's 104,189,614,848 active params, an int


def _op(name: str, category: str, ceiling: float, expected: float) -> OpTime:
    eff = Efficiency(value=ceiling / expected, measured=False, label="ceiling: test")
    return OpTime(
        name=name,
        kind="matmul",
        category=category,
        ceiling_s=ceiling,
        expected_s=expected,
        efficiency=eff,
        label="test",
    )


def test_each_category_sums_its_own_ops():
    k = kind_times((_op("a", "kda", 1.0, 2.0), _op("b", "experts", 3.0, 4.0), _op("c", "kda", 0.5, 0.5)))
    assert (k.kda.ceiling_s, k.kda.expected_s) == (1.5, 2.5)
    assert (k.experts.ceiling_s, k.experts.expected_s) == (3.0, 4.0)
    assert all(t.ceiling_s == t.expected_s == 0 for c, t in k.items() if c not in ("kda", "experts"))
