"""The transfer rule the commands use, scored leave one out (k3plan.app.score.transfer_rows): every published TPOT
and TTFT another benchmark of its configuration can speak for, predicted from the nearest one as roofline, fit and
plan stand behind it -- its figure x the model's ratio of the two runs, a TTFT's with the engine's TTFT floor on both
(the per-request path a measured TTFT holds) -- must beat the model alone on the same cases; and a command's TTFT
transfer carries the floor the admission fitted (admitted.json ttft_floor_ms)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from k3plan.app.score import score_rows, transfer_rows, transfer_summary
from k3plan.cli.app import app
from k3plan.speed.terms import admitted, ttft_floor_s

TTFT_S = 4038.0769618204795e-3  # the K3 nightly's published median TTFT (tests/engines/benchmarks)


def _mean(xs: list[float]) -> float:
    return sum(abs(math.log(x)) for x in xs) / len(xs)


@pytest.fixture(scope="module")
def rows():
    return score_rows()


@pytest.fixture(scope="module")
def transfers(rows):
    return transfer_rows(rows)


def test_a_transfer_beats_the_model_alone_left_out(transfers):
    for what in ("tpot", "ttft"):
        mine = [t for t in transfers if t.figure == what]
        assert len(mine) >= 30 and all(t.source != t.case for t in mine)  # never speaks for itself
        # session 39: TPOT 0.058 against the model's 0.147, TTFT 0.142 against 0.214 (the model alone nearer since
        # the term prefill-pass: 0.341 before); with family-min-floor TPOT 0.051 against 0.104, TTFT 0.180 against
        # 0.215 (the model alone's TTFT at its family's floor, 0.325 before): the margin on TTFT is 0.9
        margin = {"tpot": 0.8, "ttft": 0.9}[what]
        assert _mean([t.transferred_ratio for t in mine]) < margin * _mean([t.model_ratio for t in mine])
    lines = transfer_summary(transfers)
    assert len(lines) == 2 and lines[0].startswith("- TPOT transferred, leave one out")


def test_the_floor_on_both_runs_is_what_makes_a_ttft_transfer_generalise(rows, transfers):
    """The same transfers without the floor in the ratio: worse left out (session 35: 0.216 against 0.139)."""
    rows = {r.case: r for r in rows}
    with_floor, without = [], []
    for t in transfers:
        if t.figure != "ttft":
            continue
        r, o = rows[t.case], rows[t.source]
        own, other = r.ttft_model_ms - r.ttft_floor_ms, o.ttft_model_ms - o.ttft_floor_ms
        f = r.held_out_ttft_floor_ms
        assert t.transferred_ratio == pytest.approx(o.ttft_measured_ms * (own + f) / (other + f) / t.measured_ms)
        with_floor.append(t.transferred_ratio)
        without.append(o.ttft_measured_ms * own / other / t.measured_ms)
    assert _mean(with_floor) < _mean(without)


def test_a_command_s_ttft_transfer_carries_the_admitted_floor():
    floors = admitted()["ttft_floor_ms"]
    assert set(floors) >= {"*", "sglang", "vllm", "torchtpu-vllm"} and all(v > 0 for v in floors.values())
    assert ttft_floor_s("torchtpu-vllm") == pytest.approx(floors["torchtpu-vllm"] / 1e3)
    assert ttft_floor_s("an-engine-with-no-ttft") == pytest.approx(floors["*"] / 1e3)  # the pooled fit
    from pathlib import Path

    from k3plan.app.score import Models
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.serving import ModelAt, _as_asked, served_of

    (b,) = [b for b in load_benchmarks() if Path(b.path).stem == "kimi-k3-tp32-ep-isl8192-osl1024-c1"]
    _, (setup, _, why) = Models().setup_of(b)
    assert setup is not None, why
    m = ModelAt(setup, setup.hardware, evidence=None)
    there = served_of(m, _as_asked(b, batch=4, context=8192, chunk=512))[0].ttft_s
    own = served_of(m, b)[0].ttft_s
    f = ttft_floor_s("torchtpu-vllm")
    r = CliRunner().invoke(app, ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "4", "--context", "8192",
                                 "--chunk", "512", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["prefill"]
    assert p["ttft_source"] == "transferred"
    assert p["ttft_s"] == pytest.approx(TTFT_S * (there + f) / (own + f), rel=1e-9)
    assert f"both runs + torchtpu-vllm's TTFT floor {f * 1e3:,.1f} ms (admitted.json)" in p["ttft_label"]


def test_notebook_users_get_the_transfer_score_as_a_dataframe(rows, transfers, monkeypatch):
    import k3plan.api as k3
    import k3plan.app.score as score

    monkeypatch.setattr(score, "score_rows", lambda: rows)  # the module's rows: the score is computed once
    df = k3.transfers().to_pandas()
    assert len(df) == len(transfers) and {"case", "figure", "transferred_ratio", "model_ratio", "source"} <= set(df)


@pytest.mark.parametrize(
    "hardware, topology, stack, engine",
    [
        ("nvidia-b200", "8", "sglang", "sglang"),  # its own fit
        ("tpu-v7x", "2x2x4", "torchtpu-vllm", "torchtpu-vllm"),  # its own, though `vllm serve` starts it
        ("nvidia-b200", "8", "dp-attention", "sglang"),  # no TTFT of its own: SGLang's front end on a GPU
        ("tpu-v7x", "2x4x4", "dp-attention", "vllm"),  # and vLLM's on a TPU (Engine.launcher_on)
        ("tpu-v7x", "2x4x4", "tpu-inference", "vllm"),
        ("tpu-v7x", "2x4x4", "jax-native", "jax-native"),  # no fitted launcher: the pooled floor
    ],
)
def test_a_stack_s_floor_is_its_own_else_its_launcher_s_else_the_pooled(hardware, topology, stack, engine):
    from k3plan.setup import make_setup
    from k3plan.speed.serving import floor_label, stack_floor_s

    s = make_setup(model="deepseek-v3", hardware=hardware, topology=topology, stack=stack)
    floor, whose = stack_floor_s(s)
    fitted = admitted()["ttft_floor_ms"]
    family = f"{engine} x {hardware}"  # a family floor term: the engine x hardware's own where the admission fitted one
    assert whose == (family if family in fitted else engine) and floor == ttft_floor_s(engine, hardware) > 0
    assert stack_floor_s(s, family=False) == (ttft_floor_s(engine), engine)
    assert (engine in fitted) == ("pooled" not in floor_label(floor, whose))
    if engine not in fitted:
        assert floor == fitted["*"] / 1e3
