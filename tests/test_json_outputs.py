"""Issue 10 item 3: every command's --json is dumped from a typed model (no dict assembled in the
CLI): fit's and plan's add advice and prefix_hit after their result's fields, check's `passed`
follows the findings, curve and report are named models. Key order is the JSON contract."""

from __future__ import annotations

from k3plan.advice.fit_output import FitOutput
from k3plan.budget.curve_output import CurveOutput
from k3plan.budget.fit import FitResult
from k3plan.check.compare import Finding
from k3plan.check.gate import CheckResult
from k3plan.plan.output import PlanOutput
from k3plan.plan.search import PlanResult
from k3plan.report.capacity_model import ReportOutput


def test_fit_and_plan_outputs_append_advice_and_prefix_hit():
    assert list(FitOutput.model_fields) == [*FitResult.model_fields, "advice", "prefix_hit"]
    assert list(PlanOutput.model_fields) == [*PlanResult.model_fields, "advice", "prefix_hit"]


def test_curve_and_report_keys():
    keys = ["title", "context_tokens", "batch", "calibration", "warnings", "points", "sessions"]
    assert list(CurveOutput.model_fields) == keys
    assert list(ReportOutput.model_fields) == ["written", "platforms"]


def test_check_passed_is_in_the_json_and_follows_the_findings():
    def result(*findings: Finding) -> CheckResult:
        return CheckResult(baseline="b.json", baseline_k3plan_version="0.1.0", tolerance="0.5%", shardspecs=None,
                           configurations=["c"], findings=list(findings))

    ok = result(Finding(configuration="c", check="kv_bytes", what="kv_bytes shrank", fail=False))
    bad = result(Finding(configuration="c", check="split", what="the (tp, ep, dp) split changed"))
    assert list(ok.model_dump())[-2:] == ["findings", "passed"]
    assert ok.model_dump(mode="json")["passed"] is True and bad.model_dump(mode="json")["passed"] is False
