"""Issue 38: roofline, fit and plan stand behind the nightly's measured TPOT and TTFT for its
configuration, name the benchmark, transfer it nearby by the model's ratio, and keep the model's own
figures (expected.*) free of any serving benchmark; the three-way comparison names every term of the gap."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app

NIGHTLY = ["-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512"]
TPOT_S, TTFT_S = 30.899158045435588e-3, 4038.0769618204795e-3  # the published medians (tests/engines/benchmarks)


def run(*args) -> dict:
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def nightly() -> dict:
    return run("roofline", *NIGHTLY)


def test_roofline_reports_the_nightly_within_ten_percent_and_names_it(nightly):
    d, p = nightly["decode"], nightly["prefill"]
    assert d["tpot_s"] == pytest.approx(TPOT_S, rel=0.10) and d["tpot_source"] == "measured"
    assert p["ttft_s"] == pytest.approx(TTFT_S, rel=0.10) and p["ttft_source"] == "measured"
    assert "kimi-k3-tp32-ep nightly" in d["tpot_label"] and "kimi-k3-tp32-ep nightly" in p["ttft_label"]
    assert d["step_s"] < d["tpot_s"] and p["ceiling_ttft_s"] < p["ttft_s"]  # the bounds stay beside them
    assert "kimi-k3-tp32-ep.baseline.json" in nightly["serving"]["decode"]["benchmark"]


def test_the_model_is_computed_without_any_serving_benchmark(nightly, monkeypatch):
    import k3plan.evidence.benchmarks as b

    monkeypatch.setattr(b, "load_benchmarks", lambda folder=b.FOLDER: ())
    alone = run("roofline", *NIGHTLY)
    assert alone["expected"]["decode"]["expected_s"] == nightly["expected"]["decode"]["expected_s"]
    assert alone["expected"]["prefill"]["expected_s"] == nightly["expected"]["prefill"]["expected_s"]
    # issue 46 item 7: no benchmark, a model of TPU7x (its records set ops): the model's TPOT, never the ceiling
    assert alone["decode"]["tpot_source"] == "model"
    assert alone["decode"]["tpot_s"] == alone["expected"]["decode"]["expected_s"]
    assert alone["serving"]["decode"]["measured_s"] is None


def test_every_term_of_the_gap_is_named_and_they_sum_to_it(nightly):
    from k3plan.speed.terms import ttft_floor_s

    for stage in ("decode", "prefill"):
        s = nightly["serving"][stage]
        # the prefill's model is the model's TTFT: the stage's time and its engine's floor, a term of its own
        floor = ttft_floor_s("torchtpu-vllm") if stage == "prefill" else 0.0
        assert s["model_s"] == pytest.approx(nightly["expected"][stage]["expected_s"] + floor, rel=1e-12)
        assert (stage == "prefill") == any(t["name"] == "torchtpu-vllm's TTFT floor" for t in s["model_terms"])
        assert s["model_over_measured"] == pytest.approx(s["model_s"] / s["measured_s"])
        assert sum(t["seconds"] for t in s["model_terms"]) == pytest.approx(s["model_s"], rel=1e-9)
        assert sum(t["seconds"] for t in s["gap_terms"]) == pytest.approx(s["measured_s"] - s["model_s"], rel=1e-9)
        assert all(t["name"] and t["source"] for t in s["model_terms"] + s["gap_terms"])
    from k3plan.speed.terms import default_terms

    names = [t["name"] for t in nightly["serving"]["decode"]["model_terms"]]
    # an admitted term is named where it is ON (speed/admitted.json decides op-fixed by the held-out score)
    assert ("fixed cost of the step's ops" in names) == ("op-fixed" in default_terms())
    for term in (
        "host and scheduler time a synchronous step",
        "MXFP4 expert dequantisation",
        "MoE gather and combine",
        "decode padding to the compiled bucket",
        "sampling and logits",
    ):
        assert term in names
    gap = [t["name"] for t in nightly["serving"]["prefill"]["gap_terms"]]
    assert gap[:2] == ["per-chunk fixed cost beyond the model's", "per-token cost beyond the model's"]


def _runs_model(context: int) -> tuple[float, float]:
    """(TPOT of the nightly's run moved to ``context`` tokens in, TPOT of the nightly's own run), the model's: its
    requests through the scheduler (served_of), as the measured figure is that run's."""
    from pathlib import Path

    from k3plan.app.score import Models
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.serving import ModelAt, _as_asked, served_of

    (b,) = [b for b in load_benchmarks() if Path(b.path).stem == "kimi-k3-tp32-ep-isl8192-osl1024-c1"]
    _, (setup, _, why) = Models().setup_of(b)  # the nightly's own configuration, as the score builds it
    assert setup is not None, why
    model = ModelAt(setup, setup.hardware, evidence=None)
    moved = _as_asked(b, batch=1, context=context, chunk=512)
    assert (moved.workload.isl, moved.workload.num_prompts, moved.chunk_tokens) == (context, 64, 512)
    return served_of(model, moved)[0].tpot_s, served_of(model, b)[0].tpot_s


def test_nearby_workloads_are_transferred_by_the_model_ratio(nightly):
    """Like for like: the ratio is the model of the nightly's run moved to the asked workload over the model of the
    run as it ran (both through the scheduler), not one step over another."""
    r = run("roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "16384", "--chunk", "512")
    d = r["decode"]
    assert d["tpot_source"] == "transferred" and "ratio" in d["tpot_label"]
    there, own = _runs_model(16384)
    assert d["tpot_s"] == pytest.approx(TPOT_S * there / own, rel=1e-9)
    assert r["serving"]["decode"]["measured_s"] is None  # measured only at the benchmark's own workload


def test_a_queued_ttft_is_not_carried_to_one_request():
    """A run whose TTFT is mostly its queue (SGLang's DeepSeek-V4-Flash cookbook cell at concurrency 1,024: 193 s)
    speaks for one request by the model of both runs, not as one prompt's prefill over another's (which kept the
    queue: 193 s for one 8,192-token prompt)."""
    r = run(
        "roofline", "-m", "deepseek-v4-flash", "-H", "nvidia-h200", "-t", "4", "--tp", "4", "--ep", "4",
        "--stack", "sglang:moe_a2a_backend=none", "--batch", "1", "--context", "8192", "--chunk", "8192",
    )  # fmt: skip
    p = r["prefill"]
    assert p["ttft_source"] == "transferred" and "193,474" in p["ttft_label"]
    assert p["ttft_s"] < 2.0  # the prompt's own prefill, scaled by the run's measured-to-model gap


def test_a_larger_batch_decodes_together_not_queued_behind_the_run_s_max_num_seqs():
    """The nightly runs --max-num-seqs 1 at concurrency 1. Moved to a batch of 4 (speed.serving._as_asked) the
    asked requests decode together: the flag is raised to the batch. Kept at 1 it queued them one by one, and
    `roofline --batch 4` printed the nightly's TPOT unchanged (ratio 1) beside a TTFT of 86,175 ms (ratio 21.3)."""
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.serving import _as_asked

    (b,) = [b for b in load_benchmarks() if b.name.endswith("(ISL 8192, OSL 1024, concurrency 1, chunk 512)")]
    assert b.flags.max_num_seqs == 1
    assert _as_asked(b, batch=4, context=8192, chunk=512).flags.max_num_seqs == 4
    r = run("roofline", "-t", "2x2x4", "--tp", "32", "--batch", "4", "--context", "8192", "--chunk", "512")
    d, p = r["decode"], r["prefill"]
    assert (d["tpot_source"], p["ttft_source"]) == ("transferred", "transferred")
    assert d["tpot_s"] > 1.15 * TPOT_S  # four decode together, each new prompt's chunks riding in their steps
    assert p["ttft_s"] < 2 * TTFT_S  # a prompt's own prefill among three decodes, not three prompts' queue


def test_an_asked_output_length_is_part_of_the_key():
    """plan --isl/--osl: the OSL is a key of the workload (under a served load each request's prefill rides in the
    others' decode steps once every OSL tokens). At the nightly's own 1,024 its medians are measured; at 500 they
    are transferred, the label naming the output length."""
    args = ["plan", "-H", "tpu-v7x", "--max-chips", "16", "--isl", "8192", "--concurrency", "1", "--chunks", "512",
            "--stacks", "vllm-tpu"]  # fmt: skip

    def row(osl: int) -> dict:
        rows = run(*args, "--osl", str(osl))["ranked"]
        return next(x for x in rows if (x["topology"], x["tp"], x["ep"], x["dp"], x["pp"]) == ("2x2x4", 32, 32, 1, 1))

    same, other = row(1024)["sla"], row(500)["sla"]
    assert (same["ttft_source"], same["tpot_source"]) == ("measured", "measured")
    assert (other["ttft_source"], other["tpot_source"]) == ("transferred", "transferred")
    assert "output 1,024->500" in json.dumps(other)


def test_a_configuration_no_benchmark_speaks_for_takes_the_model_of_its_device_kind():
    """Issue 46 item 7: never the ceiling while a model exists (TPU7x records set its ops; an NVIDIA GPU's decode
    step, whose kernels' fixed cost a published trace sets: term kernel-floor); where no record sets a stage (an AMD
    GPU's prefill) the ceiling stays, labelled."""
    r = run("roofline", "-t", "2x4x4", "--tp", "32", "--batch", "1", "--context", "8192")
    assert r["decode"]["tpot_source"] == "model" and r["decode"]["tpot_s"] == r["expected"]["decode"]["expected_s"]
    assert r["prefill"]["ttft_source"] == "model" and r["prefill"]["ttft_label"]
    assert r["decode"]["step_s"] < r["decode"]["tpot_s"]  # the bound stays beside it
    g = run("roofline", "-m", "deepseek-v3", "-H", "nvidia-h200", "-t", "8", "--tp", "8", "--context", "1024")
    assert g["decode"]["tpot_source"] == "model" and g["decode"]["tpot_s"] == g["expected"]["decode"]["expected_s"]
    assert "evidence/gpu_kernel_floor.yaml" in g["decode"]["tpot_label"]
    assert g["decode"]["step_s"] < g["decode"]["tpot_s"]  # the bound, below the model, beside it
    # an AMD GPU's decode too (no AMD trace is public: the B200's, transferred across vendors); its prefill, with
    # no GEMM table of AMD's, stands on the bound, labelled
    a = run("roofline", "-m", "deepseek-v3", "-H", "amd-mi300x", "-t", "8", "--tp", "8", "--context", "1024")
    assert a["decode"]["tpot_source"] == "model" and a["prefill"]["ttft_source"] == "ceiling"


def test_fit_and_plan_take_the_same_tpot(nightly):
    f = run("fit", *NIGHTLY)
    assert f["speed"]["tpot_s"] == nightly["decode"]["tpot_s"] and f["speed"]["tpot_source"] == "measured"
    assert f["speed"]["ceiling_tpot_s"] == nightly["decode"]["step_s"]
    rows = run(
        "plan", "-H", "tpu-v7x", "--max-chips", "16", "--context", "8192", "--chunks", "512", "--stacks", "vllm-tpu"
    )["ranked"]
    row = next(x for x in rows if (x["topology"], x["tp"], x["ep"], x["dp"], x["pp"]) == ("2x2x4", 32, 32, 1, 1))
    assert row["tpot_ms"] == pytest.approx(TPOT_S * 1e3, rel=1e-12) and row["tpot_source"].startswith("measured")


def test_plan_under_the_nightly_s_load_stands_behind_its_medians_in_the_columns():
    """plan --isl/--osl at the nightly's load: the row of its configuration takes the measured medians in its TTFT
    and TPOT columns (the figures roofline and fit stand behind), marked m and named; the JSON says each one's source;
    the other rows stand on the model under the load (the scheduler on the model's step), labelled "model": never
    the ceiling while a model of TPU7x exists (issue 38 item 2, issue 46 item 7)."""
    args = ["plan", "-H", "tpu-v7x", "--max-chips", "16", "--isl", "8192", "--osl", "1024", "--concurrency", "1",
            "--chunks", "512", "--stacks", "vllm-tpu"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert "4,038 m" in flat and "30.90 m" in flat
    assert (
        "TTFT: measured: median TTFT of kimi-k3-tp32-ep nightly (ISL 8192, OSL 1024, concurrency 1, chunk 512)" in flat
    )
    assert "e = the model (the scheduler on the model's step)" in flat
    rows = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)["ranked"]
    row = next(x for x in rows if (x["topology"], x["tp"], x["ep"], x["dp"], x["pp"]) == ("2x2x4", 32, 32, 1, 1))
    q = row["sla"]
    assert (q["ttft_source"], q["tpot_source"]) == ("measured", "measured")
    assert q["ttft_ms"] == pytest.approx(TTFT_S * 1e3, rel=1e-12) and q["tpot_ms"] == pytest.approx(
        TPOT_S * 1e3, rel=1e-12
    )
    assert q["request_latency_ms"] == pytest.approx((TTFT_S + 1023 * TPOT_S) * 1e3, rel=1e-12)
    assert all(x["sla"]["tpot_source"] == "model" for x in rows if x is not row)


def test_plan_under_a_heavier_load_transfers_between_served_workloads():
    """issue 46 item 4: plan --isl/--osl at 4 requests transfers the nightly's medians by the ratio of the served
    workloads, like for like: the nightly's own run at 1 and the same run moved to 4 requests (speed.serving._as_asked:
    its prompts scaled, the asked lengths), in which each new prompt's chunks ride in the decode steps: the TPOT ratio
    is above the single decode step's. Not the question's steady state over the run's (a closed loop without the
    run's ramp and drain against a run with them)."""
    from k3plan.app.setup import setup_from
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.serving import ModelAt, _as_asked, served_of

    args = ["plan", "-H", "tpu-v7x", "--max-chips", "16", "--isl", "8192", "--osl", "1024", "--concurrency", "4",
            "--chunks", "512", "--stacks", "vllm-tpu"]  # fmt: skip
    rows = run(*args)["ranked"]
    row = next(x for x in rows if (x["topology"], x["tp"], x["ep"], x["dp"], x["pp"]) == ("2x2x4", 32, 32, 1, 1))
    q = row["sla"]
    assert (q["ttft_source"], q["tpot_source"]) == ("transferred", "transferred")
    setup = setup_from(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32, dp=1, ep=32, stack="torchtpu-vllm")
    m = ModelAt(setup, setup.hardware, evidence=None)
    (b,) = [b for b in load_benchmarks() if b.name.endswith("(ISL 8192, OSL 1024, concurrency 1, chunk 512)")]
    moved = served_of(m, _as_asked(b, batch=4, context=8192, chunk=512, osl=1024))[0]
    ratio = moved.tpot_s / served_of(m, b)[0].tpot_s
    assert ratio > m.decode_s(4, 8192) / m.decode_s(1, 8192)
    assert q["tpot_ms"] == pytest.approx(TPOT_S * 1e3 * ratio, rel=1e-6)


def test_a_bound_below_the_ops_own_ceiling_is_not_stood_behind():
    """Where no record sets a prefill (an AMD GPU's: no GEMM table), the TTFT stood behind was the MFU-30% roofline
    bound, which can sit below the ops' own ceiling (each at the spec's peaks, one after another: the model's first
    term): DeepSeek-V4.1-Flash on 8 MI355X at 65,536 tokens, 398.00 ms against 406.41. The higher one stands, named."""
    r = run("roofline", "-m", "deepseek-v4.1-flash", "-H", "amd-mi355x", "-t", "8", "--context", "65536")
    pre, serial = r["prefill"], r["expected"]["prefill"]["ceiling_s"]
    assert pre["ttft_source"] == "ceiling" and serial > pre["ceiling_ttft_s"]
    assert pre["ttft_s"] == serial and "above roofline's prefill bound" in pre["ttft_label"]
    assert f"{pre['ceiling_ttft_s'] * 1e3:,.2f} ms" in pre["ttft_label"]
    # where the bound is the higher (DeepSeek-V3 on an H20, compute-bound at MFU 30%) it stays, as before
    h = run("roofline", "-m", "deepseek-v3", "-H", "nvidia-h20", "-t", "8", "--tp", "8", "--stack", "vllm",
            "--context", "32768")  # fmt: skip
    assert h["prefill"]["ttft_s"] == h["prefill"]["ceiling_ttft_s"] > h["expected"]["prefill"]["ceiling_s"]
