"""Tier (c) of the temp evidence (issue 15 item 1): the shipped temp model and its band.

- the shipped file is what ``build_model`` derives from the committed grid record and the shipped
  calibrations (no number typed in);
- the band's arithmetic, written out by hand;
- fit uses it only where no calibration matches, counts the upper end, prints capacity at both ends;
- plan's rows equal fit's JSON for every modelled configuration of a small space, to the byte;
- a hostile or malformed model file is one line, exit 2.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from k3plan.budget.fit import Workload, fit
from k3plan.budget.temp_model import MODEL_FILE, StackBand, band, build_model, load_temp_model, model_bytes
from k3plan.errors import K3PlanError
from k3plan.setup import make_setup
from k3plan.structs import dump

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_model_is_derived_from_the_grid_record_and_the_calibrations():
    shipped = yaml.safe_load(MODEL_FILE.read_text())
    record_path = shipped["grid_record"]
    record = json.loads((ROOT / record_path).read_text())
    assert shipped == build_model(record, record_path)
    # the coefficients are the record's fit (set on its fit half), never refitted here
    assert shipped["coefficients"] == record["fit"]["coefficients"]
    held = [r for r in record["fit"]["rows"] if r["half"] == "held-out"]
    assert shipped["grid_held_out_points"] == len(held) >= 3
    for b in shipped["bands"]:
        mine = [r["error"] for r in held if r["point"].startswith(b["stack"] + " ")]
        # the band covers every held-out grid point of the stack, and more (full-size points)
        assert b["low_error"] <= min(mine) and b["high_error"] >= max(mine)
        # (>=: since issue 50 the compiled K3 file is torchtpu-vllm's, which the vllm-tpu coefficients' band does
        # not read yet -- build_model matches the stack by name; the band is the grid's held-out points)
        assert b["points"] >= len(mine)


def test_band_arithmetic_by_hand():
    b = StackBand(stack="s", low_error=-0.5, high_error=0.25, points=2, low_point="a", high_point="b")
    # the model said 100 where the compiler needed 200 (error -50%) and 80 (+25%)
    assert band(100.0, b) == (80.0, 200.0)
    lo, hi = band(np.array([100.0, 50.0]), b)
    assert lo.tolist() == [80.0, 40.0] and hi.tolist() == [200.0, 100.0]
    # total form: c_live x (largest op + resident) + c_fixed; named: a coefficient a feature
    f = {"peak": 10, "rest": 7, "resident": 5, "cache": 3}
    assert model_bytes({"c_live": 2.0, "c_fixed": 1.0}, f) == 2.0 * 15 + 1.0
    assert model_bytes({"c_peak": 1.0, "c_rest": 0.5, "c_resident": 2.0, "c_cache": 1.0, "c_fixed": 4.0}, f) == (
        10 + 3.5 + 10 + 3 + 4
    )


def test_fit_models_the_temp_only_where_no_calibration_matches():
    tm = load_temp_model()
    main = fit(make_setup(topology="2x2x4", tp=32), Workload())
    assert main.temp.prefill_band is None and main.capacity.band_low_max_context_tokens is None
    assert main.provenance.temp_prefill.startswith("compiled calibration")
    assert "prefill_band" not in dump(main)["temp"]

    r = fit(make_setup(topology="2x4x4", tp=32, stack="vllm-tpu"), Workload())
    b = tm.band_for("vllm-tpu")
    for stage in ("prefill", "decode"):
        lo, hi = getattr(r.temp, f"{stage}_band")
        assert getattr(r.temp, f"{stage}_bytes") == hi  # the verdict counts the upper end
        # both ends come from one model value m: hi = m / (1 + low_error), lo = m / (1 + high_error)
        assert hi * (1 + b.low_error) == pytest.approx(lo * (1 + b.high_error), rel=1e-9)
        assert getattr(r.provenance, f"temp_{stage}").startswith("temp model k3plan/evidence/temp_model.yaml")
    assert r.per_device.temp_bytes == max(r.temp.prefill_bytes, r.temp.decode_bytes)
    # capacity at the lower end is at least the verdict's
    assert r.capacity.band_low_max_sequences >= r.capacity.max_sequences
    assert r.capacity.band_low_max_context_tokens >= r.capacity.max_context_tokens
    j = dump(r)
    assert j["temp"]["prefill_band"] == list(r.temp.prefill_band)
    assert j["capacity"]["band_low_max_sequences"] == r.capacity.band_low_max_sequences


def test_no_model_where_it_was_not_checked():
    for setup in (
        make_setup(model="deepseek-v3", topology="2x2x2"),  # another model
        make_setup(hardware="nvidia-h200", topology="2x8", tp=16, ep=16, stack="sglang"),  # another compiler
        make_setup(topology="2x4x4", tp=32, stack="dp-attention"),  # a stack the grid did not compile
    ):
        r = fit(setup, Workload(context_tokens=4096))
        assert r.temp.prefill_band is None and r.provenance.temp_prefill.startswith("analytic")
    # evidence off (fit(..., evidence=False)): the analytic bound
    r = fit(make_setup(topology="2x4x4", tp=32, stack="vllm-tpu"), Workload(), evidence=False)
    assert r.temp.decode_band is None and r.provenance.temp_decode.startswith("analytic")


def test_plan_rows_equal_fit_where_the_temp_is_modelled():
    from k3plan.engines.stack import load_stack
    from k3plan.hardware import load_hardware
    from k3plan.models import load_model
    from k3plan.plan.evaluate import evaluate
    from k3plan.plan.rows import row
    from k3plan.plan.space import build_space
    from k3plan.roofline.bounds import Efficiency

    sp = build_space(hardware=[load_hardware("tpu-v7x")], stacks=[load_stack("vllm-tpu"), load_stack("jax-native")],
                     kv_dtypes=[None], chunks=[8192], max_chips=32, stacks_given=True)  # fmt: skip
    for context, batch in ((131072, 1), (32768, 8)):
        cols = evaluate(space=sp, model=load_model("kimi-k3"), context=context, batch=batch, eff=Efficiency()).cols
        modelled = np.flatnonzero(cols.temp_source == 3)
        assert modelled.size >= 4
        for i in modelled[:: max(1, modelled.size // 6)]:
            r = row(space=sp, cols=cols, i=int(i), rank=1)
            assert r.temp_evidence == "temp model"
            setup = make_setup(hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp,
                               stack=r.stack, kv_dtype=r.kv_dtype_override)  # fmt: skip
            f = fit(setup, Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=r.chunk_tokens))
            assert r.per_device.temp_bytes == f.per_device.temp_bytes, r
            assert r.per_device.free_bytes == f.per_device.free_bytes, r
            assert int(cols.prefill_temp_low_bytes[i]) == f.temp.prefill_band[0]
            assert int(cols.decode_temp_low_bytes[i]) == f.temp.decode_band[0]


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[1, 2]", "expected a mapping"),
        ("model: kimi-k3\n", "hardware_kind"),
        (re.sub(r"low_error: \S+", "low_error: -1.5", MODEL_FILE.read_text(), count=1), "low_error"),  # below -100%
        (MODEL_FILE.read_text().replace("c_live:", "c_live: .nan #", 1), "c_live"),
    ],
)
def test_malformed_model_file_is_one_line(tmp_path, text, needle):
    p = tmp_path / "temp_model.yaml"
    p.write_text(text)
    load_temp_model.cache_clear()
    try:
        with pytest.raises(K3PlanError) as err:
            load_temp_model(str(p))
    finally:
        load_temp_model.cache_clear()
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and str(p) in msg


def test_the_model_can_only_widen_the_analytic_bound():
    """max(analytic, upper end): where the live model is below the analytic bound the analytic bound counts."""
    r = fit(make_setup(topology="2x4x4", tp=32, stack="jax-native"), Workload(context_tokens=4096))
    analytic = sum(t.bytes for t in r.temp.prefill_terms)
    assert r.temp.prefill_band[0] >= analytic and r.temp.prefill_bytes >= analytic
    assert math.isfinite(r.temp.prefill_bytes)
