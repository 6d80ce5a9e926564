"""One point, every command (brief qa-cmds item 2): K3 on TPU v7x 2x2x4 at TP 32, context 131,072, batch 1, under
torchtpu-vllm and jax-native. fit, roofline, curve, plan and report give the same verdict, free bytes, sequences, longest
context, TPOT and TTFT; report's pick is plan's first row (one stack, fewest chips) and its defaults are fit's."""

from __future__ import annotations

import json

import pytest

GiB = 2**30
POINT = ("-t", "2x2x4", "--tp", "32", "--context", "8192")  # at 131,072 torchtpu-vllm is 0.33 GiB short


def run(cli, *args) -> dict:
    r = cli(*args, "--json")
    assert r.exit_code in ((0, 3) if args[0] == "fit" else (0,)), (
        r.output
    )  # 3: fits on the analytic temp's lower bound (issue 50)
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def plan_rows():
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    r = CliRunner().invoke(app, ["plan", "-H", "tpu-v7x", "--max-chips", "16", "--context", "8192", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["ranked"]


@pytest.mark.parametrize("stack", ["torchtpu-vllm", "jax-native"])
def test_fit_roofline_curve_and_plan_agree(cli, plan_rows, stack):
    f = run(cli, "fit", *POINT, "--stack", stack)
    r = run(cli, "roofline", *POINT, "--stack", stack)
    c = run(cli, "curve", *POINT, "--stack", stack)
    assert (f["workload"]["context_tokens"], f["workload"]["batch"]) == (
        r["decode"]["context_tokens"],
        r["decode"]["batch"],
    )
    assert (c["context_tokens"], c["batch"]) == (8192, 1) == (f["workload"]["context_tokens"], f["workload"]["batch"])
    assert f["fits"] and r["fits"]
    assert f["speed"]["tpot_s"] == r["decode"]["tpot_s"]
    point = next(p for p in c["points"] if p["chunk_tokens"] == f["workload"]["prefill_chunk_tokens"])
    assert (point["max_context_tokens"], point["max_sequences"]) == (
        f["capacity"]["max_context_tokens"],
        f["capacity"]["max_sequences"],
    )
    assert point["decode_temp_bytes"] == f["temp"]["decode_bytes"]
    row = next(x for x in plan_rows if (x["topology"], x["tp"], x["stack"], x["pp"]) == ("2x2x4", 32, stack, 1))
    # issue 46 item 7: plan's best estimate is fit's TPOT, figure and kind (tpot_ms is the ceiling column it ranks on
    # where no benchmark speaks; fit then stands behind the model of the device kind, as the estimate does)
    assert row["estimate_tpot_ms"] == pytest.approx(f["speed"]["tpot_s"] * 1e3, rel=1e-12)
    assert row["estimate_source"] == f["speed"]["tpot_source"]
    assert row["free_gib_per_device"] == pytest.approx(f["per_device"]["free_bytes"] / GiB, rel=1e-12)
    assert row["max_sequences"] == f["capacity"]["max_sequences"]


def test_report_pick_is_plan_s_first_row_and_fit_s_numbers(cli, tmp_path):
    rep = run(cli, "report", "-H", "tpu-v7x", "-c", "8192", "--max-chips", "16", "--out", tmp_path / "r.md")
    (platform,) = rep["platforms"]
    (row,) = platform["rows"]
    assert platform["stack"] == "torchtpu-vllm"  # report's default for a TPU is fit's
    plan = run(cli, "plan", "-H", "tpu-v7x", "--stacks", "torchtpu-vllm", "--max-chips", "16", "-c", "8192")["ranked"][
        0
    ]
    s = row["setup"]
    assert (s["topology"], s["tp"], s["ep"], s["dp"], s["pp"]) == (
        plan["topology"],
        plan["tp"],
        plan["ep"],
        plan["dp"],
        plan["pp"],
    )
    f = run(cli, "fit", "-t", s["topology"], "--tp", str(s["tp"]), "--stack", "torchtpu-vllm", "-c", "8192")
    r = run(cli, "roofline", "-t", s["topology"], "--tp", str(s["tp"]), "--stack", "torchtpu-vllm", "-c", "8192")
    assert row["per_device"] == {k: f["per_device"][k] for k in row["per_device"]}
    assert (row["max_sequences"], row["max_context_tokens"]) == (
        f["capacity"]["max_sequences"],
        f["capacity"]["max_context_tokens"],
    )
    # issue 38: report, fit and roofline stand behind the same TPOT and TTFT (a serving benchmark's where one
    # speaks for the configuration), and print the same ceilings beside them
    d = row["decode"]["concurrency"]
    assert d["tpot_s"] == f["speed"]["tpot_s"] == r["decode"]["tpot_s"]
    assert d["tpot_source"] == f["speed"]["tpot_source"] == r["decode"]["tpot_source"]
    assert d["ceiling_tpot_s"] == f["speed"]["ceiling_tpot_s"] == r["decode"]["step_s"]
    assert row["prefill"]["ttft_s"] == r["prefill"]["ttft_s"]
    assert row["prefill"]["ceiling_ttft_s"] == r["prefill"]["ceiling_ttft_s"]


@pytest.mark.parametrize("hardware", ["tpu-v7x", "nvidia-h200", "nvidia-b300"])
def test_report_plan_fit_and_roofline_agree_at_131k_by_8(cli, tmp_path, hardware):
    """Issue 33: the same pick, free bytes, sequences, TPOT and TTFT from every command at 131,072 tokens x 8
    sequences, each command on its own defaults (report priced sglang on GPUs where fit and plan price vllm:
    its H200 row had 0.1 GiB free and 8 sequences where plan's had 7.2 GiB and 11)."""
    work = ("--context", "131072")
    rep = run(cli, "report", "-H", hardware, "-c", "131072", "--concurrency", "8", "--out", tmp_path / "r.md")
    (platform,) = rep["platforms"]
    (row,) = platform["rows"]
    s = row["setup"]
    # report prices the machine's default stack (fit's); plan ranks every stack that runs there, so it is asked for
    # that one (on tpu-v7x jax-native's TPOT ranks above torchtpu-vllm's two all-reduces a MoE layer)
    plan = run(cli, "plan", "-H", hardware, *work, "--concurrency", "8", "--stacks", platform["stack"])["recommended"]
    assert platform["stack"] == plan["stack"] == s["stack"]
    pick = (plan["topology"], plan["tp"], plan["ep"], plan["dp"], plan["pp"])
    assert (s["topology"], s["tp"], s["ep"], s["dp"], s["pp"]) == pick
    split = ("-H", hardware, "-t", plan["topology"], "--tp", str(plan["tp"]), "--dp", str(plan["dp"]))
    split += ("--ep", str(plan["ep"]), "--pp", str(plan["pp"]), *work, "--batch", "8")
    f = run(cli, "fit", *split)
    r = run(cli, "roofline", *split)
    free = plan["per_device"]["free_bytes"]
    assert row["per_device"]["free_bytes"] == f["per_device"]["free_bytes"] == free
    assert row["max_sequences"] == f["capacity"]["max_sequences"] == plan["max_sequences"]
    tpot = plan["estimate_tpot_ms"] / 1e3  # plan's best estimate (its tpot_ms: the ceiling it ranks on)
    assert row["decode"]["concurrency"]["tpot_s"] == pytest.approx(tpot, rel=1e-12)
    assert f["speed"]["tpot_s"] == pytest.approx(tpot, rel=1e-12) and r["decode"]["tpot_s"] == pytest.approx(
        tpot, rel=1e-12
    )
    assert row["prefill"]["ttft_s"] == pytest.approx(r["prefill"]["ttft_s"], rel=1e-12)
