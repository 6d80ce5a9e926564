"""README's ceiling / model / measured table for the main job (issue 38) is what roofline prints now."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from k3plan.cli.app import app

README = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())


def test_the_main_job_table_is_roofline_s():
    r = CliRunner().invoke(
        app, ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--json"]
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["serving"]
    for row, st in (("TPOT", "decode"), (r"TTFT \(16 chunks of 512\)", "prefill")):
        m = re.search(rf"\| {row} \| ([\d,.]+) ms \| ([\d,.]+) ms \| ([\d,.]+) ms \| ([\d.]+)x \|", README)
        assert m, row
        c = s[st]
        now = [f"{c[k] * 1e3:,.2f}" for k in ("ceiling_s", "model_s", "measured_s")] + [
            f"{c['model_over_measured']:.2f}"
        ]
        assert list(m.groups()) == now, row
    gap = {t["name"]: t for t in s["decode"]["gap_terms"]}
    device = gap["device time beyond the model's (the engine's profile)"]
    implied = device["source"].split("of a decode step's device time -> ")[1].split(" ms")[0]
    d = device["seconds"] * 1e3  # below zero: the model's device time exceeds the profile's
    said = (
        f"so the device time is {implied} ms: {d:.2f} ms of it no source here prices"
        if d >= 0
        else f"so the device time is {implied} ms, {-d:.2f} ms below the model's own"
    )
    assert said in README
    host = gap["host time between steps beyond the model's"]["seconds"]
    assert f"{host * 1e3:.2f} ms of host time between steps" in README
    pre = {t["name"]: t["source"] for t in s["prefill"]["gap_terms"]}["per-chunk fixed cost beyond the model's"]
    experts = pre.split("the routed experts' ")[1].split(" ms a step")[0]
    sched = pre.split("compiler schedules the kernel")[1].split(" at ")[1].split(" ms a step")[0]
    ratios = pre.split(" took ")[1].split("x the same compiler")[0]
    span = pre.split("the kernel would take ")[1].split(" ms a step")[0]
    assert f"(transferred, they take {experts} ms a chunk)" in README
    assert f"matmuls at {sched} ms a chunk" in README
    assert f"the v5e took {ratios}x its own compiler's schedule in the calls it ran, so {span} ms" in README


def test_the_main_job_default_view_is_quoted_as_roofline_prints_it():
    """Issue 48: README quotes the default view's answer lines, its length, the roofline bound it no longer calls a
    ceiling, and the DeepSeek-V3 point where that bound sits above the model."""
    raw = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    args = ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512"]
    out = CliRunner().invoke(app, args).stdout
    lines = [line.rstrip() for line in out.splitlines()]
    block = raw.split("terms of the model and what prices each, in ")[1]
    n = int(block.split(" lines")[0])
    assert n == len(lines)
    quoted = block.split("```\n")[1].split("```")[0].splitlines()
    assert quoted == [line for line in lines if line][2:6]
    d = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert f"overlapped: {d['prefill']['ceiling_ttft_s'] * 1e3:,.2f} ms for this prefill, link-bound" in README
    v3 = ["roofline", "-m", "deepseek-v3", "-H", "nvidia-h200", "-t", "8", "--tp", "8", "--stack", "vllm", "--json"]
    d = json.loads(CliRunner().invoke(app, v3).stdout)
    assert d["decode"]["context_tokens"] == 131072
    bound, model = d["prefill"]["ceiling_ttft_s"], d["expected"]["prefill"]["expected_s"]
    assert f"it is {bound:.1f} s against a model of {model:.1f} s" in README
