"""Issue 10 item 3: every command's --json is dumped from a typed model (no dict assembled in the
CLI): fit's and plan's add advice and prefix_hit after their result's fields, check's `passed`
follows the findings, curve and report are named models. Key order is the JSON contract."""

from __future__ import annotations

from k3plan.advice.fit_output import FitOutput
from k3plan.advice.plan_output import PlanOutput
from k3plan.budget.curve_output import CurveOutput
from k3plan.budget.fit import FitResult
from k3plan.check.compare import Finding
from k3plan.check.gate import CheckResult
from k3plan.plan.search import PlanResult
from k3plan.report.capacity_model import ReportOutput
from k3plan.structs import dump, fields


def test_fit_and_plan_outputs_append_advice_and_prefix_hit():
    assert fields(FitOutput) == (*fields(FitResult), "advice", "prefix_hit", "engine")  # issue 34
    assert fields(PlanOutput) == (*fields(PlanResult), "advice", "prefix_hit")


def test_curve_and_report_keys():
    keys = ["title", "context_tokens", "batch", "calibration", "warnings", "notes", "points", "sessions"]
    keys += ["reason", "reason_code"]  # issue 36: only in the JSON when the workload does not fit
    assert list(fields(CurveOutput)) == keys
    assert list(fields(ReportOutput)) == ["written", "platforms"]


def test_check_passed_is_in_the_json_and_follows_the_findings():
    def result(*findings: Finding) -> CheckResult:
        return CheckResult(
            baseline="b.json",
            baseline_k3plan_version="0.1.0",
            tolerance="0.5%",
            shardspecs=None,
            configurations=["c"],
            findings=list(findings),
        )

    ok = result(Finding(configuration="c", check="kv_bytes", what="kv_bytes shrank", fail=False))
    bad = result(Finding(configuration="c", check="split", what="the (tp, ep, dp) split changed"))
    assert list(dump(ok))[-2:] == ["findings", "passed"]
    assert dump(ok)["passed"] is True and dump(bad)["passed"] is False


def test_models_show_breakdown_is_typed_and_sums_to_the_checkpoint():
    from k3plan.models import load_model
    from k3plan.models.summary import ModelShow, ModelSummary, model_show

    assert list(fields(ModelShow)) == [*fields(ModelSummary), "breakdown_by", "breakdown"]
    r = model_show(load_model("kimi-k3"), by="format")
    by_fmt = {g.group: g for g in r.breakdown}
    assert sum(g.bytes for g in r.breakdown) == r.checkpoint_bytes == 1_559_965_606_912  # docs/k3-facts.md
    assert [(e.fmt, e.bytes) for e in r.checkpoint_bytes_by_format] == [(g.group, g.bytes) for g in r.breakdown]
    assert by_fmt["mxfp4"].bytes == max(g.bytes for g in r.breakdown)  # the routed experts
    d = dump(r)
    assert list(d["breakdown"]["mxfp4"]) == ["params", "active_params", "bytes", "tensors"]
    # counts are integers (the expert groups were 36190795008.0): 16 of 896 experts' params a token
    assert all(type(v["active_params"]) is int for v in d["breakdown"].values())
    assert d["breakdown"]["mxfp4"]["active_params"] * 896 == d["breakdown"]["mxfp4"]["params"] * 16


def test_hardware_show_flops_and_sources_are_typed():
    from k3plan.hardware import load_hardware
    from k3plan.hardware.summary import HardwareShow, HardwareSummary, hardware_show

    assert list(fields(HardwareShow)) == [*fields(HardwareSummary), "sources", "file", "topology"]
    r = hardware_show(load_hardware("tpu-v7x"), None)
    flops = {e.dtype: e.flops_per_s for e in r.flops_per_s_per_device}
    assert flops["fp8"] == 2 * flops["bf16"]  # v7x: fp8 at twice the bf16 rate (its spec's sources)
    assert flops["int8"] is None  # marked unsupported, not a number
    d = dump(r)
    assert d["flops_per_s_per_device"]["int8"] is None and d["topology"] is None
    assert d["sources"] == {e.figure: e.source for e in r.sources} and "hbm_per_device" in d["sources"]
