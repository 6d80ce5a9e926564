"""`k3plan probe step` (issue 17 item 4): the whole loop on CPU fake devices -- efficiency records measured
in the run, the scaled step's expected time from its op list against them, the step timed, the error
printed -- checked for consistency, not for speed (a CPU run is the machinery, and says so). One run:
XLA's CPU compile of even the 2-layer step takes 5-20 s."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest


def test_probe_step_measured_vs_expected_on_two_fake_devices(cli, tmp_path, monkeypatch):
    import k3plan.cli.probe as cli_probe

    bar: dict = {"plans": [], "started": 0}  # the CLI's progress bar, recorded

    @contextmanager
    def recording_bar():
        def progress(text):
            bar["started"] += 1

        yield progress, bar["plans"].append

    monkeypatch.setattr(cli_probe, "_sweep_bar", recording_bar)
    out = tmp_path / "records"
    r = cli(
        "probe",
        "step",
        "--repeats",
        "2",
        "--warmup",
        "0",
        "--timeout",
        "120",
        "--topology",
        "1x1x1",
        "--tp",
        "2",
        "--batch",
        "2",
        "--context",
        "64",
        "--out",
        out,
    )
    assert r.exit_code == 0, r.output
    assert "measured " in r.stdout and " vs expected " in r.stdout and "error " in r.stdout
    assert "checks the machinery" in r.stdout
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    by_probe = {rec["probe"]: rec for rec in records}
    assert sorted(by_probe) == ["allreduce", "hbm", "matmul", "step"]  # the step's record and the three it used
    # one bar over the whole run: planned once (the sub-probes' points + the step), ending n/n (issue 12:
    # each sub-probe planned its own total while the count ran on, '10/4 points')
    ar = by_probe["allreduce"]  # a point a size, timed at each N (the marginal between them)
    sub_points = len(by_probe["matmul"]["points"]) + len(by_probe["hbm"]["points"])
    sub_points += len(ar["points"]) * len(ar["params"]["n_values"])
    assert bar["plans"] == [sub_points + 1] and bar["started"] == sub_points + 1
    step = by_probe["step"]
    assert step["label"].startswith("CPU backend") and "machinery" in step["label"]
    assert step["verified"] is True
    (pt,) = step["points"]
    p = pt["params"]
    assert (p["devices"], p["tp"], p["layers"], p["experts"]) == (2, 2, 2, 8)
    # the error printed is measured / expected - 1, on the p50 of the samples
    assert pt["value"] == pt["stats"]["p50"] and pt["expected"] == p["expected_s"]
    assert p["error"] == pytest.approx(pt["value"] / p["expected_s"] - 1)
    assert f"error {p['error']:+.1%}" in r.stdout
    # expected = the by-kind sum, and never under the ceiling: the peaks are the run's best rates, so every
    # measured efficiency is at most ~1 (a point at the peak's own size may round a hair above)
    assert p["expected_s"] == pytest.approx(sum(p["expected_by_kind_s"].values()), rel=1e-12)
    assert p["expected_s"] >= 0.99 * p["ceiling_s"] > 0
    notes = " ".join(pt["notes"])
    assert "checks the machinery" in notes
    assert "efficiency of this run: matmul" in notes and "efficiency of this run: hbm copy" in notes
    assert "ceiling: no measured efficiency for bf16 grouped matmul on cpu" in notes  # no ragged-dot in the run
    # item 7's count check, on the step just compiled (scaled K3: layer 0 dense MLP, layer 1 MoE; torchtpu-vllm, TP 2):
    # all-reduces: an attention o_proj in each of the 2 layers + the expert sum of the 1 MoE layer + the dense
    # MLP's down_proj of the 1 dense layer + the vocabulary-split embedding's lookup = 2 + 1 + 1 + 1;
    # all-gathers: vLLM's LogitsProcessor gathers the vocabulary-split logits once = 1
    assert p["op_list_collective_calls"] == {"all-reduce": 2 + 1 + 1 + 1, "all-gather": 1}
    hlo = p["hlo_collectives"]
    assert {k: hlo[k] for k in ("all-reduce", "all-gather")} == p["op_list_collective_calls"]
    # bytes a device: validate's step reduces in f32 where the op list counts the stack's bf16 activations (x 2):
    # o_proj x 2, embedding, dense down_proj: [2 tokens, 256 hidden]; the MoE: [2, 256 hidden + 128 latent]
    assert p["op_list_collective_bytes"]["all-reduce"] == 4 * 2 * 256 * 2 + 2 * (256 + 128) * 2 == 5632
    assert p["hlo_collective_bytes"]["all-reduce"] == 2 * 5632
    # the logits: a device sends its [2 tokens, vocab 1,024 / TP 2] bf16 shard (vLLM's LogitsProcessor all-gather)
    assert p["op_list_collective_bytes"]["all-gather"] == 2 * (1024 // 2) * 2 == 2048
    # XLA's census counts the gathered result, [2, 1,024] in validate's f32: x TP 2 (whole vs shard) x 2 (f32 vs bf16)
    assert (
        p["hlo_collective_bytes"]["all-gather"] == 2 * 1024 * 4 == 2 * 2 * p["op_list_collective_bytes"]["all-gather"]
    )
    # nothing else: validate's graph keeps KDA's per-head A_log slice replicated, so XLA no longer reshards it
    # with a collective-permute (a partitioner artefact, not a call the engine code makes)
    assert set(hlo) == {"all-reduce", "all-gather"}
