"""Issue 48 item 2: `roofline`'s default view is the answer first, in a screen: the TPOT and TTFT it stands behind
with their sources and bands, one model and one ceiling a stage, then the largest terms; --verbose prints
everything the command printed before; the model is never below the ceiling it prints."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from k3plan.cli.app import app

OPTIONS = dict(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32, ep=None, dp=None, pp=None, stack=None,
               kv_dtype=None, shardspecs=None)  # fmt: skip
MAIN_JOB = ("roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512")


def run(*args: str):
    r = CliRunner(env={"COLUMNS": "120"}).invoke(app, list(args))
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    return r


@pytest.fixture(scope="module")
def main_job() -> tuple[str, dict]:
    return run(*MAIN_JOB).stdout, json.loads(run(*MAIN_JOB, "--json").stdout)


def test_the_main_job_fits_a_screen(main_job):
    out, _ = main_job
    lines = out.splitlines()
    assert len(lines) <= 25, out
    assert max(len(line) for line in lines) <= 120, out


def test_the_answer_comes_first_with_its_source_and_band(main_job):
    out, d = main_job
    head = out.splitlines()[:6]
    s = d["serving"]
    for name, fig, stage in (("TPOT", s["tpot"], s["decode"]), ("TTFT", s["ttft"], s["prefill"])):
        i = next(i for i, line in enumerate(head) if line.startswith(name))
        first, band = head[i], head[i + 1]
        assert f"{fig['value_s'] * 1e3:,.2f} ms" in first and fig["source"] == "measured" and " measured " in first
        assert "kimi-k3-tp32-ep nightly" in first  # the benchmark named
        lo, hi = sorted((stage["model_s"], fig["value_s"]))
        assert f"band {lo * 1e3:,.2f}-{hi * 1e3:,.2f} ms" in band
        assert f"{stage['model_over_measured']:.2f}x" in band
        # one ceiling a stage, the op-serial one the model is built on
        assert f"ceiling {stage['ceiling_s'] * 1e3:,.2f} ms" in band
    flat = " ".join(out.split())
    # one ceiling: the roofline bound (max(compute, link) at MFU 30%) is in --verbose, named, not here
    assert "bound" not in flat and flat.count("ceiling ") == 2
    assert "76d74757" in flat  # the engine commit the benchmark ran


def test_the_terms_name_what_prices_them_and_sum_to_the_model(main_job):
    out, d = main_job
    x = d["expected"]
    assert f"{x['decode']['expected_s'] * 1e3:,.2f} ms" in out
    assert f"{x['prefill']['expected_s'] * 1e3:,.2f} ms" in out
    assert "the engine's MLA kernel at its blocks" in out and "probe mla-engine-tpu-v5-lite" in out
    assert "280 calls x 9.88 us (spec)" in out  # the collectives: the spec's latency a call
    assert "gmm-tpu-v5-lite (transferred)" in out  # another TPU's record, labelled
    from k3plan.app.roofline import RooflineQuestion, answer
    from k3plan.report.roofline_summary import terms_of

    r = answer(RooflineQuestion(setup_options=OPTIONS, context=8192, batch=1, chunk=512)).result
    assert r is not None
    for stage in (r.expected.decode, r.expected.prefill):
        assert sum(t[1] for t in terms_of(stage)) == pytest.approx(stage.expected_s, rel=1e-9)


def test_verbose_prints_what_the_old_output_did(main_job):
    _, d = main_job
    out = run(*MAIN_JOB, "--verbose").stdout
    flat = " ".join(out.split())
    for said in (
        "bytes a device a step",
        "study view (ideal)",
        "collective traffic a chip",
        "long context: absorbed-MLA attention FLOPs overtake the linear part at 44,161 tokens",
        "expected vs ceiling (a device; ops one after another)",
        "records: efficiency records of TPU7x",
        "ceiling / model / measured",
        "TPOT stood behind: 30.90 ms, measured: median TPOT of kimi-k3-tp32-ep nightly",
        "TTFT stood behind: 4,038.08 ms",
        "decode: the model's terms (ms)",
        "prefill: the gap, measured - model",
        "per-chunk fixed cost beyond the model's",
        "serving benchmarks of this configuration",
        "assumptions: ops run serially",
        "advice (ok",
        "memory-bound decode",
        "link-bound",
    ):
        assert said in flat, said
    # the other figure once called a ceiling: the roofline bound, named as such
    assert f"roofline bound │ {d['prefill']['ceiling_ttft_s'] * 1e3:,.3f} ms" in flat
    assert "roofline bound at MFU 30% and HBM 100%, overlapped" in flat
    # prose wraps at 120 columns; only a table, or a word longer than a line (a URL), is wider
    for line in out.splitlines():
        if len(line) > 120:
            assert line[0] in "┏┃┡│└" or any(len(w) > 60 for w in line.split()), line


def test_a_bound_above_the_model_is_not_called_a_ceiling():
    """DeepSeek-V3 on H20 (no serving benchmark, no probe record of the device kind, no published GEMM table at
    its tensor-core rate): the TTFT stood behind is the roofline bound at MFU 30%, 14.3 s at 32,768 tokens, while
    the model at the spec's peaks is 3.8 s. It was labelled "ceiling: roofline's prefill bound" beside a model below
    it; the output names it a bound and says why. (On an H200 the published bf16 GEMM table now sets the dense
    matmuls' efficiency: the model stands behind its TTFT, labelled with the table.)"""
    args = ("roofline", "-m", "deepseek-v3", "-H", "nvidia-h20", "-t", "8", "--tp", "8", "--stack", "vllm",
            "--context", "32768")  # fmt: skip
    d = json.loads(run(*args, "--json").stdout)
    assert d["prefill"]["ttft_source"] == "ceiling"  # speed.serving's fallback (shared with fit and plan)
    assert d["expected"]["prefill"]["expected_s"] < d["prefill"]["ttft_s"]
    out = run(*args).stdout
    ttft = next(line for line in out.splitlines() if line.startswith("TTFT"))
    assert " bound " in ttft and "ceiling" not in ttft.split("ms", 1)[1]
    flat = " ".join(out.split())
    assert "is below the bound, whose MFU is assumed" in flat
    assert f"ceiling {d['expected']['prefill']['ceiling_s'] * 1e3:,.2f} ms" in flat
    verbose = " ".join(run(*args, "--verbose").stdout.split())
    assert "note: the prefill model" in verbose and "is below the roofline bound" in verbose


@settings(max_examples=6, deadline=None)
@given(
    batch=st.sampled_from([1, 2, 8, 32]),
    context=st.sampled_from([2048, 4096, 8192, 16384]),
    chunk=st.sampled_from([512, 1024, 2048, 8192]),
)
def test_the_model_is_never_below_the_ceiling_it_prints(batch, context, chunk):
    from k3plan.app.roofline import RooflineQuestion, answer
    from k3plan.speed.terms import ttft_floor_s

    a = answer(RooflineQuestion(setup_options=OPTIONS, context=context, batch=batch, chunk=chunk, ignore_fit=True))
    r = a.result
    assert r is not None and r.serving is not None
    for stage, cmp in (("decode", r.serving.decode), ("prefill", r.serving.prefill)):
        x = getattr(r.expected, stage)
        # the prefill's model is the model's TTFT: its engine's admitted floor on top (speed.serving._stage)
        floor = ttft_floor_s("torchtpu-vllm") if stage == "prefill" else 0.0
        assert cmp.ceiling_s == x.ceiling_s and cmp.model_s == pytest.approx(x.expected_s + floor, rel=1e-12)
        assert x.expected_s >= x.ceiling_s * (1 - 1e-12), (stage, batch, context, chunk)
        for kind, t in x.by_kind.items():
            assert t.expected_s >= t.ceiling_s * (1 - 1e-12), (stage, kind)
    # and the default view prints that ceiling, the model and the figure stood behind, within a screen
    from rich.console import Console

    from k3plan.cli.roofline import _render_default

    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    _render_default(r, console, prefix_hit=None)
    text = console.export_text()
    assert len(text.splitlines()) <= 26, text
    assert f"ceiling {r.serving.prefill.ceiling_s * 1e3:,.2f} ms" in " ".join(text.split())
    assert re.search(r"^TPOT +[\d,.]+ ms", text, re.M) and re.search(r"^TTFT +[\d,.]+ ms", text, re.M)


@pytest.mark.parametrize(
    "args",
    [
        # a transfer far from its benchmark (two 3-line labels) and a thin-headroom warning: 27 lines before
        ("-t", "2x2x4", "--tp", "32", "--batch", "32", "--context", "2048", "--chunk", "1024"),
        # no benchmark: the model's figures, read from nine probe records
        ("-t", "2x4x4", "--tp", "32", "--batch", "1", "--context", "131072"),
    ],
)
def test_long_headlines_take_rows_from_the_terms_table_not_the_screen(args):
    out = run("roofline", *args).stdout
    lines = out.splitlines()
    assert len(lines) <= 25, out
    # each stage keeps its name, its model's total and at least one term; what is left out is summed and named
    assert re.search(r"^ decode +\S", out, re.M) and re.search(r"^ prefill +\S", out, re.M)
    assert "more terms" in out and "--verbose lists them" in out
    # the records the model read are counted here and listed in --verbose, never a screen of paths
    assert "probes/" not in out
    if "--batch" in args and args[args.index("--batch") + 1] == "1":
        assert re.search(r"efficiencies and kernel times from \d+ probe record\(s\)", " ".join(out.split()))
