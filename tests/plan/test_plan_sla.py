"""Issue 13 wired into `k3plan plan`: latency targets, cost on every row, the Pareto front, the
disaggregated alternative, launch command and cold start; numbers checked against the deploy/speed
functions called directly where hand arithmetic is impractical. The scheduler arithmetic on the ceilings' step
(fixture ``ceilings``) runs on AMD GPUs with the two terms that set a GPU stage from published figures off: every
GPU's decode step now stands on the model (term kernel-floor: a public trace's kernel time, transferred to AMD's by
the score's decision) and an NVIDIA GPU's prefill where a GEMM table sets its matmuls (term gpu-gemm); without them
no record sets a stage, and plan takes the ceilings' path."""

from __future__ import annotations

import json
import math
import time

import pytest
from k3_testing import one_error_line

from k3plan.deploy.disagg import size_pools, transfer_bytes_per_request
from k3plan.models import load_model
from k3plan.roofline.bounds import Efficiency
from k3plan.speed.scheduler import StepCoefficients, steady_state
from k3plan.step.work import attention_prefill_flops_per_token
from k3plan.structs import dump

DONE_WHEN = ["--ttft-ms", "2000", "--tpot-ms", "50", "--isl", "4000", "--osl", "500", "--request-rate", "2"]


@pytest.fixture(scope="module")
def done_when(tmp_path_factory):
    """The issue's done-when command, all bundled hardware, in-process; (text output, JSON, plot, seconds)."""
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    png = tmp_path_factory.mktemp("plot") / "pareto.png"
    runner = CliRunner()
    start = time.perf_counter()
    text = runner.invoke(app, ["plan", *DONE_WHEN, "--plot", str(png)])
    seconds = time.perf_counter() - start
    print(f"\ndone-when command in-process: {seconds:.2f} s")  # reported, not asserted
    assert text.exit_code == 0, text.output
    js = runner.invoke(app, ["plan", *DONE_WHEN, "--json"])
    assert js.exit_code == 0, js.output
    return text.stdout, json.loads(js.stdout), png


def test_done_when_answers_with_every_part(done_when):
    out, res, png = done_when
    assert "Traceback" not in out
    assert "best estimate" in out and "m / t / e / c" in out  # the label of the estimate: each figure marked
    assert "Pareto front" in out and "Disaggregated alternative" in out and "Launch (the pick)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res["pareto"] and res["disaggregated"] is not None and res["launch"]["text"]
    cmds = [ln for ln in res["launch"]["text"].splitlines() if ln and not ln.startswith(("#", "set ", ": "))]
    assert cmds[0].split()[:2] in (["vllm", "serve"], ["python", "-m"]) or "ici_tensor_parallelism" in cmds[0]
    assert set(res["search"]["hardware"]) >= {"tpu-v7x", "nvidia-b200", "nvidia-gb300-nvl72"}  # all bundled
    # the request's KV + KDA state in GiB (2^30 B), as every byte figure prints
    per_request = res["disaggregated"]["transfer"]["bytes_per_request"]
    assert f"KV + KDA state a request: {per_request / 2**30:.3f} GiB over" in " ".join(out.split())


def test_the_recommendation_names_the_tpot_its_row_stands_behind(done_when):
    """One TPOT for the pick: the Recommended line gives the row's figure under the load with its kind (it gave
    the no-load decode bound, 9.10 ms on B300 SGLang beside the row's transferred 8.56 ms)."""
    out, res, _ = done_when
    flat = " ".join(out.split())
    line = flat[flat.index("Recommended:") : flat.index("Check it:")]
    under = flat[flat.index("Under the load (") :]
    tpot = under[under.index("TPOT ", under.index("): ")) :].split()[1]
    assert f"TPOT {tpot} ms (" in line and "under the load)" in line and "no load" not in line


def test_every_row_has_a_cost_cell_and_unpriced_says_so(done_when):
    _, res, _ = done_when
    prices = {p["hardware"]: p for p in res["prices"]}
    assert res["ranked"]
    for r in res["ranked"]:
        c = r["cost"]
        p = prices[r["hardware"]]["usd_per_chip_hour"]
        if p is None:
            assert c["usd_per_hour"] is None and c["note"].startswith("n/a") and "--price" in c["note"]
        else:  # chips x price, and the hour's cost over the hour's output tokens
            assert c["usd_per_hour"] == pytest.approx(r["chips"] * p)
            out = r["sla"]["output_tokens_per_s"]
            assert c["usd_per_million_output_tokens"] == pytest.approx(r["chips"] * p * 1e6 / (out * 3600))
    assert any(p["usd_per_chip_hour"] is None for p in res["prices"])  # the n/a case is exercised


def test_request_rate_rows_meet_first_and_carry_the_rate(done_when):
    _, res, _ = done_when
    meets = [r["sla"]["meets"] for r in res["ranked"]]
    assert meets == sorted(meets, reverse=True)  # best-effort: every meeting row before any miss
    for r in res["ranked"]:
        if r["sla"]["output_tokens_per_s"] is not None:  # open loop: what arrives leaves, 2/s x 500 tokens
            assert r["sla"]["output_tokens_per_s"] == pytest.approx(2 * 500)
            assert r["sla"]["output_tokens_per_s_per_chip"] == pytest.approx(1000 / r["chips"])


def test_pareto_front_is_non_dominated(done_when):
    _, res, _ = done_when
    pts = [(p["tokens_per_s_per_user"], p["tokens_per_s_per_chip"]) for p in res["pareto"]]
    for i, (x, y) in enumerate(pts):
        assert not any(x2 >= x and y2 >= y and (x2, y2) != (x, y) for j, (x2, y2) in enumerate(pts) if j != i)
    assert [x for x, _ in pts] == sorted(x for x, _ in pts)


@pytest.fixture
def ceilings(monkeypatch):
    """The admitted terms less kernel-floor and gpu-gemm (module docstring)."""
    from k3plan.speed import terms

    on = terms.default_terms() - {"kernel-floor", "gpu-gemm"}
    monkeypatch.setattr(terms, "default_terms", lambda: on)


def _plan(cli, *args):
    r = cli("plan", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_step_coefficients_and_scheduler_figures(cli, ceilings):
    """base + a d from plan's own decode TPOT at batches 1 and 2; b from the prefill ceiling; then
    steady_state called directly gives the row's TTFT and TPOT."""
    one = ["-H", "amd-mi355x", "--stacks", "vllm", "--max-chips", "16", "--context", "4500"]
    res = _plan(cli, *one, "--isl", "4000", "--osl", "500", "--concurrency", "1")
    t1 = _plan(cli, *one, "--max-pp", "1")["recommended"]  # SLA mode searches pp 1 only
    t2 = _plan(cli, *one, "--concurrency", "2", "--max-pp", "1")["recommended"]
    r = res["recommended"]
    assert (
        (r["topology"], r["tp"], r["ep"])
        == (t1["topology"], t1["tp"], t1["ep"])
        == (t2["topology"], t2["tp"], t2["ep"])
    )
    a = (t2["tpot_ms"] - t1["tpot_ms"]) / 1e3
    base = t1["tpot_ms"] / 1e3 - a
    m = load_model("kimi-k3")
    eff = Efficiency()
    flops = 2 * m.inventory.active_params + attention_prefill_flops_per_token(m.spec, 4000)
    from k3plan.hardware import load_hardware

    hw = load_hardware("amd-mi355x")
    b = flops / (hw.flops_per_s_per_device(eff.compute_dtype) * r["devices"] * eff.mfu)
    s = r["sla"]
    assert s["step_base_ms"] == pytest.approx(base * 1e3)
    assert s["step_per_decode_seq_ms"] == pytest.approx(a * 1e3)
    assert s["step_per_prefill_token_us"] == pytest.approx(b * 1e6)
    want = steady_state(
        step=StepCoefficients(base_s=base, per_decode_seq_s=a, per_prefill_token_s=b, source="test"),
        isl=4000,
        osl=500,
        token_budget=r["chunk_tokens"],
        concurrency=1,
        chips=r["chips"],
    )
    assert s["ttft_ms"] == pytest.approx(want.ttft_s * 1e3)
    assert s["tpot_ms"] == pytest.approx(want.tpot_s * 1e3)
    assert s["in_flight_sequences"] == 1


def test_disaggregated_pools_and_transfer(cli, ceilings):
    res = _plan(cli, "-H", "amd-mi355x", "--stacks", "vllm", "--max-chips", "16", *DONE_WHEN)
    d, r = res["disaggregated"], res["recommended"]
    s = r["sla"]
    base, a, b = s["step_base_ms"] / 1e3, s["step_per_decode_seq_ms"] / 1e3, s["step_per_prefill_token_us"] / 1e6
    chunk = r["chunk_tokens"]
    prefill = chunk / (base + b * chunk)  # a full chunk a step
    batch = min(r["max_sequences"], math.floor((0.050 - base) / a))  # largest batch under --tpot-ms 50
    decode = batch / (base + a * batch)
    want = size_pools(
        request_rate_per_s=2,
        isl_tokens=4000,
        osl_tokens=500,
        prefill_tokens_per_s_per_instance=prefill,
        decode_tokens_per_s_per_instance=decode,
    )
    assert d["decode_batch"] == batch and d["tpot_ms"] <= 50
    assert d["pools"] == dump(want)
    assert d["chips"] == (want.prefill_instances + want.decode_instances) * r["chips"]
    from k3plan.engines.stack import load_stack
    from k3plan.hardware import load_hardware

    hw = load_hardware("amd-mi355x")
    nbytes = transfer_bytes_per_request(spec=load_model("kimi-k3").spec, stack=load_stack("vllm"), isl_tokens=4000)
    link = hw.scale_up if d["chips"] <= (hw.scale_up.domain_chips or hw.chips_per_host) else hw.scale_out
    assert d["transfer"]["bytes_per_request"] == nbytes and d["transfer"]["link"] == link.name
    assert d["transfer"]["transfer_s"] == pytest.approx(link.latency_s + nbytes / link.bw_bytes_per_s)
    assert d["aggregated_chips"] == r["chips"] and d["aggregated_ttft_ms"] == s["ttft_ms"]


def test_strict_rejects_with_the_reason_best_effort_ranks_last(cli):
    args = [
        "-H",
        "amd-mi355x,amd-mi325x",
        "--stacks",
        "vllm",
        "--max-chips",
        "16",
        "--isl",
        "4000",
        "--osl",
        "500",
        "--concurrency",
        "8",
        "--ttft-ms",
        "150",
    ]
    loose = _plan(cli, *args, "--top", "200")
    misses = [r for r in loose["ranked"] if not r["sla"]["meets"]]
    meets = [r for r in loose["ranked"] if r["sla"]["meets"]]
    assert misses and meets, "the target should split the rows"
    assert loose["ranked"] == meets + misses
    m = misses[0]["sla"]
    assert m["misses"][0].startswith("TTFT") and "> 150 ms target (+" in m["misses"][0]
    over = m["ttft_ms"] - 150
    assert f"+{over:,.1f} ms" in m["misses"][0]
    strict = _plan(cli, *args, "--top", "200", "--strict")
    assert all(r["sla"]["meets"] for r in strict["ranked"]) and len(strict["ranked"]) == len(meets)
    assert strict["feasible"] == len(meets) and "sla" in strict["reasons"]
    hit = [f for f in strict["families"] if "sla" in f["reasons"]]
    assert hit and all(any(d.startswith("SLA (--strict)") and "TTFT" in d for d in f["detail"]) for f in hit)
    assert sum(f["reasons"]["sla"] for f in hit) == len(misses)


def test_price_override_fills_the_cost_column(cli):
    res = _plan(cli, "-H", "tpu-v7x", "--max-chips", "16", "--isl", "4000", "--osl", "500", "--price", "tpu-v7x=4.5")
    for r in res["ranked"]:
        assert r["cost"]["price_origin"] == "override" and r["cost"]["usd_per_hour"] == pytest.approx(4.5 * r["chips"])
        assert r["cost_usd_per_hour"] == pytest.approx(4.5 * r["chips"])  # the old column follows the override


def test_emit_launch_and_cold_start(cli, tmp_path):
    path = tmp_path / "launch.sh"
    r = cli(
        "plan",
        "-H",
        "nvidia-b200",
        "--stacks",
        "sglang",
        "--max-chips",
        "16",
        "--context",
        "8192",
        "--emit",
        "launch",
        str(path),
        "--load-gbps",
        "100",
        "--json",
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    text = path.read_text()
    assert text == res["launch"]["text"] and "python -m sglang.launch_server" in text
    rec = res["recommended"]
    assert "--context-length 8192" in text and f"--chunked-prefill-size {rec['chunk_tokens']}" in text
    cs = res["cold_start"]
    per_host = math.ceil(rec["devices"] / cs["hosts"])
    sharded = rec["per_device"]["weights_bytes"] * per_host
    assert cs["sharded_read_bytes_per_host"] == sharded
    assert cs["sharded_load_s"] == pytest.approx(sharded * 8 / 100e9)  # Gbit/s -> bytes/s by hand


@pytest.mark.parametrize(
    "args",
    [
        ["--ttft-ms", "100"],  # needs --isl/--osl
        ["--isl", "4000"],  # --osl missing
        ["--isl", "4000", "--osl", "500", "--request-rate", "2", "--concurrency", "4"],
        ["--isl", "4000", "--osl", "500", "--ttft-ms", "-1"],
        ["--isl", "4000", "--osl", "500", "--ttft-ms", "1e-300"],  # printed a 300-digit miss percentage
        ["--tpot-ms", "0"],
        ["--tpot-ms", "1e-300"],
        ["--isl", "4000", "--osl", "500", "--request-latency-ms", "1e12"],
        ["--isl", "4000", "--osl", "500", "--request-rate", "1e30"],
        ["--price", "nvidia-b200"],
        ["--price", "nope=3"],
        ["--load-gbps", "0"],
        ["--emit", "script", "x.sh"],
        ["--plot", "x.png"],  # the front needs --isl/--osl
        ["--isl", "4000", "--osl", "500", "--plot", "x.pdf"],  # .png or .svg only
    ],
)
def test_bad_sla_input_exits_2(cli, args):
    one_error_line(cli("plan", "-H", "nvidia-b200", "--max-chips", "8", *args))


def test_strict_with_nothing_left_exits_1_and_says_why(cli, tmp_path):
    png, sh = tmp_path / "p.png", tmp_path / "l.sh"
    r = cli(
        "plan",
        "-H",
        "nvidia-b200",
        "--max-chips",
        "16",
        "--isl",
        "4000",
        "--osl",
        "500",
        "--ttft-ms",
        "5",
        "--strict",
        "--plot",
        png,
        "--emit",
        "launch",
        sh,
        "--json",
    )
    assert r.exit_code == 1, r.output
    res = json.loads(r.stdout)
    assert res["recommended"] is None and res["ranked"] == [] and res["pareto"] == []
    hit = [f for f in res["rejected_families"] if "sla" in f["reasons"]]
    assert hit and all(any("TTFT" in d and "> 5 ms target" in d for d in f["detail"]) for f in hit)
    assert not png.exists() and not sh.exists()


def test_maximize_throughput_uses_the_largest_batch_that_meets_tpot(cli):
    res = _plan(
        cli,
        "-H",
        "nvidia-b200,tpu-v7x",
        "--max-chips",
        "32",
        "--isl",
        "4000",
        "--osl",
        "500",
        "--tpot-ms",
        "50",
        "--maximize",
        "throughput",
        "--top",
        "20",
    )
    got = [r["sla"]["throughput_tokens_per_s_per_chip"] for r in res["ranked"]]
    assert res["objective"] == "throughput" and got[0] is not None
    assert [g for g in got if g is not None] == sorted((g for g in got if g is not None), reverse=True)
    for r in res["ranked"][:5]:
        s, batch = r["sla"], r["sla"]["throughput_batch"]
        # memory, and each DP group's token budget (a group is an engine: plan/sla.py)
        assert 1 <= batch <= min(r["max_sequences"], r["dp"] * r["chunk_tokens"])
        step = StepCoefficients(
            base_s=s["step_base_ms"] / 1e3,
            per_decode_seq_s=s["step_per_decode_seq_ms"] / 1e3,
            per_prefill_token_s=s["step_per_prefill_token_us"] / 1e6,
            source="test",
        )
        groups = min(r["dp"], batch)  # the batch spread over the DP groups, each its own scheduler
        want = steady_state(
            step=step, isl=4000, osl=500, token_budget=r["chunk_tokens"], concurrency=batch / groups, chips=r["chips"]
        )
        assert want.tpot_s <= 0.050 and s["throughput_tokens_per_s_per_chip"] == pytest.approx(
            groups * want.output_tokens_per_s / r["chips"]
        )
        assert batch > 1  # scored at its largest batch, not at --concurrency 1


def test_maximize_throughput_needs_the_request_shape(cli):
    one_error_line(cli("plan", "-H", "nvidia-b200", "--maximize", "throughput"))


@pytest.mark.parametrize("extra", [[], ["--strict"], ["--maximize", "throughput"]])
def test_top_only_limits_the_rows_typed_not_the_answer(cli, extra, ceilings):
    """The SLA pass types only the rows it returns or names (plan/wire.py apply_sla): a short --top must
    give the same leading rows, Pareto front, pick, families (--strict's closest misses) and reasons as a
    --top that holds every feasible row."""
    args = [
        "-H",
        "amd-mi355x,amd-mi325x",
        "--stacks",
        "vllm",
        "--max-chips",
        "16",
        "--isl",
        "4000",
        "--osl",
        "500",
        "--concurrency",
        "8",
        "--ttft-ms",
        "300",
        *extra,
    ]
    short = _plan(cli, *args, "--top", "2")
    full = _plan(cli, *args, "--top", "500")
    assert len(full["ranked"]) > 2 and len(short["ranked"]) == 2
    assert short["ranked"] == full["ranked"][:2]
    assert [r["rank"] for r in full["ranked"]] == list(range(1, len(full["ranked"]) + 1))
    for key in (
        "pareto",
        "recommended",
        "families",
        "rejected_families",
        "reasons",
        "feasible",
        "disaggregated",
        "launch",
    ):
        assert key in full, key
        assert short.get(key) == full.get(key), key


def test_a_dp_row_prefills_a_prompt_on_its_group_as_roofline_does(cli, ceilings):
    """One answer per question: with DP > 1 a request runs on one DP group (an engine of its own), so
    plan's prefill coefficient is roofline's one-prompt rate on that group (the experts over the EP group),
    not the whole deployment's; the decode coefficient is a group's sequence, dp of the deployment's.
    Before, on B200 2x8 the tp 2 dp 8 row prefilled 4,000 tokens almost as fast as tp 16 dp 1 (TTFT 95.8 vs
    87.4 ms at --concurrency 8; 391.3 ms now)."""
    from k3plan.roofline.bounds import prefill_bound
    from k3plan.setup import make_setup

    res = _plan(
        cli,
        "-H",
        "amd-mi355x",
        "--stacks",
        "vllm",
        "--max-chips",
        "16",
        "--isl",
        "4000",
        "--osl",
        "500",
        "--concurrency",
        "8",
        "--top",
        "500",
    )
    rows = [r for r in res["ranked"] if r["dp"] > 1 and r["pp"] == 1]
    assert rows
    for r in rows[:3]:
        setup = make_setup(
            model="kimi-k3",
            hardware="amd-mi355x",
            topology=r["topology"],
            tp=r["tp"],
            ep=r["ep"],
            dp=r["dp"],
            stack="vllm",
        )
        p = prefill_bound(setup, prompt_tokens=4000, chunk_tokens=r["chunk_tokens"], eff=Efficiency())
        assert p.devices == r["tp"] and p.devices < r["devices"]
        assert r["sla"]["step_per_prefill_token_us"] == pytest.approx(1e6 / p.prompt_tokens_per_s, rel=1e-9)
        assert r["sla"]["ttft_ms"] > 4000 / p.prompt_tokens_per_s * 1e3  # the prompt's own compute, at least
