"""The K3-width step measured on a TPU v5e (issue 35), held against the model in CI without a chip: the
committed step records (k3plan/evidence/probes/step-*-tpu-v5-lite-20261204T0601*) repriced by today's op list and
the efficiency records the step ran with must be within 0.8-1.25 of their measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBES = REPO / "k3plan" / "evidence" / "probes"
STEPS = {
    "decode": "step-decode-tpu-v5-lite-20261204T060103Z-bd6aea.json",
    "prefill": "step-prefill-tpu-v5-lite-20261204T060121Z-cab1b1.json",
}


@pytest.fixture(scope="module")
def records():
    from k3plan.evidence.probe_records import load_with_paths

    loaded = load_with_paths(PROBES)
    eff = [(r, p) for r, p in loaded if "-tpu-v5-lite-20261204T054" in p.name and r.probe != "step"]
    steps = {r.mode: r for r, p in loaded if p.name in STEPS.values()}
    return eff, steps


@pytest.mark.parametrize("stage", ["decode", "prefill"])
def test_the_v5e_step_is_within_0_8_to_1_25_of_the_model(records, stage):
    from k3plan.probes.step.probe import reprice

    eff, steps = records
    assert {r.probe for r, _ in eff} >= {"matmul", "hbm", "ragged-dot", "kda-decode"}
    rec = steps[stage]
    t = reprice(rec, efficiency=eff, hardware="tpu-v5e")
    measured = rec.points[0].value
    assert measured is not None and 0.8 <= measured / t.expected_s <= 1.25, (stage, measured, t.expected_s)
    assert all(o.efficiency.value <= 1.0 for o in t.ops)  # a measured efficiency above 1 is never applied
    assert t.expected_s >= t.ceiling_s
    names = {o.name for o in t.ops}
    assert "moe.block_sparse_moe.experts.w1.relayout" in names  # validate's graph priced (step/graph.py)
    assert ("mla.prefill_scores" in names) == (stage == "prefill")


def test_the_step_records_hold_nothing_above_the_peak(records):
    _, steps = records
    for rec in steps.values():
        assert rec.ok and rec.verified
        pt = rec.points[0]
        assert pt.value is not None and pt.value >= pt.params["ceiling_s"]  # slower than the op list's ceiling


def test_engine_op_lists_do_not_get_the_validate_graph():
    """roofline / plan / fit price an engine's step: the graph's copies are added only when asked."""
    from k3plan.setup import make_setup
    from k3plan.speed.stage import decode_op_costs, prefill_op_costs

    s = make_setup(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32)
    ops = decode_op_costs(s, batch=16, context=8192) + prefill_op_costs(s, chunk=4096, context=4096)
    assert not any(o.name.endswith((".relayout", ".scan_slice")) or o.name == "mla.prefill_scores" for o in ops)
    assert all(o.hbm_curve is None for o in ops)


def test_fit_takes_the_v5e_decode_calibration_and_agrees_with_the_chip(cli):
    """The calibration measured by validate --target local on the v5e (k3plan/evidence/calibrations/
    k3-width-4l-32e-v5e-...-measured.yaml) is fit's decode temp for the same configuration; fit's verdict then
    agrees with the compiled one (batch 8 fits) and its room lies inside the compiled OOM boundary (32 fits, 64
    refused)."""
    import json

    from k3plan.probes.step.scaled import k3_width_config_path

    stack = REPO / "reports" / "validation" / "v5e" / "stack-torchtpu-vllm-bf16-experts.yaml"
    r = cli("fit", "--model", str(k3_width_config_path()), "-H", "tpu-v5e", "-t", "1x1", "--tp", "1",
            "--stack", str(stack), "--batch", "8", "--context", "8192", "--chunk", "1024", "--json")  # fmt: skip
    assert r.exit_code == 3, r.output  # the calibration is decode's only: the prefill temp is the analytic bound
    d = json.loads(r.stdout)
    assert d["unverified"]["stages"] == ["prefill"] and d["reason_code"] == "fits_if_temp_unverified"
    assert d["fits"] and d["temp"]["decode_bytes"] == 2_825_405_952 and d["temp"]["binding"] == "decode"
    assert 32 <= d["capacity"]["max_sequences"] < 64


def test_records_folder_is_checked_in_one_line(cli, tmp_path):
    r = cli("probe", "step", "--records", str(tmp_path / "none"), "--no-write")
    assert r.exit_code == 2 and "--records" in r.output and "not a folder of probe records" in r.output
    (tmp_path / "other.json").write_text('{"architectures": []}')
    r = cli("probe", "step", "--records", str(tmp_path), "--no-write")
    assert r.exit_code == 2 and "no ok probe record of" in r.output
