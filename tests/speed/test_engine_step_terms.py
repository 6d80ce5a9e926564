"""Issue 38, session 18: the terms added to the model of torchtpu-vllm's step and to the naming of its gap --
the routed experts of the busiest EP rank, the LatentMoE's two all-reduces, the engine's own profile of a decode
step (a weight-read rate and the share of device time it implies) -- each checked against what could fail."""

from __future__ import annotations

import json
from math import comb

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.step.work import busiest_rank_experts

NIGHTLY = ["-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512"]


def run(*args) -> dict:
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def nightly() -> dict:
    return run("roofline", *NIGHTLY)


def _exact_busiest(num_experts: int, top_k: int, ranks: int) -> float:
    """E[max over ranks] of one token's top_k distinct experts drawn uniformly: counted exactly."""
    per = num_experts // ranks

    def ways_at_most(m: int) -> int:
        res = [1] + [0] * top_k
        for _ in range(ranks):
            new = [0] * (top_k + 1)
            for i, a in enumerate(res):
                for j in range(min(m, per) + 1):
                    if a and i + j <= top_k:
                        new[i + j] += a * comb(per, j)
            res = new
        return res[top_k]

    total = comb(num_experts, top_k)
    return sum(1 - ways_at_most(m) / total for m in range(top_k))


def test_the_busiest_rank_at_one_token_is_the_exact_draw_s():
    busiest, mean = busiest_rank_experts(num_experts=896, top_k=16, batch=1, ep=32)
    assert mean == pytest.approx(0.5)
    assert busiest == pytest.approx(_exact_busiest(896, 16, 32), rel=0.01)  # 2.349 vs 2.360
    assert 2.3 < busiest < 2.4


def test_the_busiest_rank_evens_out_with_the_batch_and_without_ep():
    ratios = [
        (lambda b_m: b_m[0] / b_m[1])(busiest_rank_experts(num_experts=896, top_k=16, batch=b, ep=32))
        for b in (1, 8, 64, 256)
    ]
    assert ratios == sorted(ratios, reverse=True) and ratios[0] > 4.5 and ratios[-1] == pytest.approx(1.0, abs=0.02)
    assert busiest_rank_experts(num_experts=896, top_k=16, batch=1, ep=1) == pytest.approx((16.0, 16.0))


def test_a_skewed_router_histogram_makes_one_rank_the_busiest():
    hist = [16 / 28] * 28 + [0.0] * (896 - 28)  # every token's 16 experts on rank 0
    busiest, mean = busiest_rank_experts(num_experts=896, top_k=16, batch=4, ep=32, histogram=hist)
    assert mean == pytest.approx(busiest / 32) and busiest > 15


def test_the_decode_step_prices_the_busiest_rank(nightly):
    ops = {o["name"]: o for o in nightly["expected"]["decode"]["ops"]}
    routed = sum(o["expected_s"] for o in ops.values() if o["kind"] == "grouped_matmul")
    busiest, mean = busiest_rank_experts(num_experts=896, top_k=16, batch=1, ep=32)
    term = ops["routed experts of the busiest EP rank"]
    assert term["expected_s"] == pytest.approx(routed * (busiest / mean - 1), rel=1e-12)
    assert "TPU_MOE_HIERARCHICAL_EP" in term["label"]  # the engine's own words, cited
    assert "routed experts of the busiest EP rank" not in {o["name"] for o in nightly["expected"]["prefill"]["ops"]}


def test_the_latent_moe_reduces_twice_a_layer_in_torchtpu_vllm_once_in_the_porting_study_s_graph():
    tt = run("roofline", "-t", "2x2x4", "--tp", "32", "-c", "8192")["decode"]["comm"]
    jn = run("roofline", "-t", "2x2x4", "--tp", "32", "-c", "8192", "--stack", "jax-native")["decode"]["comm"]
    assert tt["pattern"] == jn["pattern"] == "all_reduce"
    assert (tt["expert_calls_per_step"], jn["expert_calls_per_step"]) == (2 * 92, 92)


def test_apart_needs_the_engine_code_that_reduces_twice():
    import msgspec

    from k3plan.engines.stack import Collectives

    with pytest.raises((ValueError, msgspec.ValidationError), match="latent_reduce_sources"):
        msgspec.convert({"experts": "all_reduce", "source": "x", "latent_reduce": "apart"}, Collectives)


def test_two_calls_carry_the_bytes_of_one():
    from k3plan.models import load_model
    from k3plan.step.comm import comm_terms

    spec = load_model("kimi-k3").spec
    kw = dict(
        all_to_all=False,
        act=2,
        dispatch=2,
        tp=32,
        dp=1,
        ep=32,
        devices_per_chip=2,
        chips=16,
        tokens=16,
        logits_all_gather=True,
    )
    one, two = comm_terms(spec, **kw), comm_terms(spec, **kw, latent_calls=2)
    assert two.bytes_per_chip == pytest.approx(one.bytes_per_chip, rel=1e-12)
    assert two.calls - one.calls == spec.n_moe


def test_the_engine_profile_splits_the_decode_gap_into_device_and_host(nightly):
    from k3plan.evidence.profiles import load_profiles

    (prof,) = load_profiles()
    s = nightly["serving"]["decode"]
    gaps = {t["name"]: t for t in s["gap_terms"]}
    device = gaps["device time beyond the model's (the engine's profile)"]
    host = gaps["host time between steps beyond the model's"]
    ops = {o["name"]: o for o in nightly["expected"]["decode"]["ops"]}
    pair_ceiling = sum(ops[name]["ceiling_s"] for name in prof.ops)
    implied = pair_ceiling * 3.69e12 / prof.op_bytes_per_s / prof.share_of_device_time
    model_host = ops["host and scheduler time a synchronous step"]["expected_s"]
    assert device["seconds"] == pytest.approx(implied - (s["model_s"] - model_host), rel=1e-9)
    assert host["seconds"] == pytest.approx(s["measured_s"] - implied - model_host, rel=1e-9)
    assert 19e-3 < implied < 20e-3  # 2 x 92 x 51.4 MB at 2.2 TB/s = 4.30 ms, 22% of it
    assert "latent_proj_intra_chip.py" in device["source"] and "not published" in device["source"]


def test_the_profile_s_weight_read_is_an_efficiency_not_the_chip_s_bandwidth(nightly):
    ops = {o["name"]: o for o in nightly["expected"]["decode"]["ops"]}
    down = ops["moe.block_sparse_moe.routed_expert_down_proj"]
    assert down["expected_s"] == pytest.approx(down["ceiling_s"] * 3.69e12 / 2.2e12, rel=1e-6)
    assert "engine-profile" in down["efficiency"]["record_path"]
    # the roofline's bound keeps the spec's HBM bandwidth: probe "hbm" records alone stand for the chip's
    assert not any("HBM bandwidth 2.2" in n for n in nightly["notes"])


def test_a_bad_profile_file_is_one_line(tmp_path):
    from k3plan.errors import K3PlanError
    from k3plan.evidence.profiles import load_profile

    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nshare_of_device_time: 1.5\n")
    with pytest.raises(K3PlanError) as e:
        load_profile(p)
    assert "\n" not in str(e.value) and "bad.yaml" in str(e.value)


def test_the_engine_s_small_kernels_are_priced_as_the_chip_timed_them(nightly):
    """probe attnres and probe moe-glue (TPU v5e): a fixed cost a 16-row tile, so the decode step and each chunk
    carry them as measured: 186 Attention Residual calls a forward (K from the engine's block schedule) and, at
    decode where its term is ON, 92 MoE layers of routing glue."""
    from collections import Counter

    from k3plan.evidence.probe_records import load_with_paths
    from k3plan.step.attnres import attnres_call_blocks

    records = [
        r
        for r, _ in load_with_paths(__import__("pathlib").Path("k3plan/evidence/probes"))
        if r.probe in ("attnres", "moe-glue")
    ]
    at = {  # every attnres record's points, the newest where two timed the same shape
        (int(p.params["tokens"]), int(p.params["blocks"])): p.value
        for r in sorted((r for r in records if r.probe == "attnres"), key=lambda r: r.date)
        for p in r.points
    }
    assert {(16, 8), (512, 8), (8192, 8)} <= set(at)
    calls = Counter(attnres_call_blocks(93, 12))
    assert sum(calls.values()) == 186 and max(calls) == 8
    glue = max((r for r in records if r.probe == "moe-glue"), key=lambda r: r.date).points[0].value
    # each ON or off as the admission decided (speed/admitted.json); ON, each prices the measured points
    from k3plan.app.setup import setup_from
    from k3plan.speed.serving import ModelAt
    from k3plan.speed.terms import default_terms

    attnres, name = "the engine's Attention Residual kernel", "the engine's MoE routing and one-hot permute at decode"
    ops = {o["name"]: o["expected_s"] for o in nightly["expected"]["decode"]["ops"]}
    assert (name in ops, attnres in ops) == ("moe-glue" in default_terms(), "attnres-kernel" in default_terms())

    setup = setup_from(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32, ep=None, dp=None, stack=None)
    terms = default_terms() | {"moe-glue", "attnres-kernel"}
    on = ModelAt(setup, setup.hardware, evidence=None, terms=terms).speed(1, 8192, 512)
    dec = {o.name: o.expected_s for o in on.decode.ops}
    assert dec[name] == pytest.approx(92 * glue)
    assert dec[attnres] == pytest.approx(sum(n * at[(16, k)] for k, n in calls.items()))
    # a 512-token chunk: the 512-row points; 16 chunks a prompt; no glue (the SparseCore path, not timed)
    pre = {o.name: o.expected_s for o in on.prefill.ops if o.kind == "overhead"}
    assert pre[attnres] == pytest.approx(16 * sum(n * at[(512, k)] for k, n in calls.items()))
    assert name not in pre


def test_the_small_kernels_scale_by_tiles_away_from_the_measured_rows():
    from k3plan.engines.torchtpu_vllm.speed import per_call as _per_call
    from k3plan.speed.curves import KernelTime

    pts = (
        KernelTime(tokens=16, blocks=1, seconds=5e-6, record_path="r", device_kind="TPU v5 lite"),
        KernelTime(tokens=512, blocks=1, seconds=160e-6, record_path="r", device_kind="TPU v5 lite"),
    )
    assert _per_call(pts, tokens=8192, blocks=1)[0] == pytest.approx(
        160e-6 * 16
    )  # (a measured 8,192 point wins)  # 16x the 512-row point's tiles
    assert _per_call(pts, tokens=1, blocks=1)[0] == pytest.approx(5e-6)  # the engine pads to a 16-row tile
    assert _per_call(pts, tokens=32, blocks=3)[0] == pytest.approx(10e-6)  # nearest K, 2 tiles


def test_other_stacks_carry_none_of_the_engine_s_kernels():
    d = run("roofline", "-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--batch", "1", "--context", "8192")
    names = {o["name"] for o in d["expected"]["decode"]["ops"]}
    assert not any(n.startswith("the engine's") for n in names)


def test_the_mxfp4_term_cites_torchtpu_vllm_only_where_that_engine_runs():
    h200 = run("roofline", "-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "-b", "32", "-c", "4000", "-s", "sglang")
    assert "MXFP4 expert dequantisation" not in {o["name"] for o in h200["expected"]["decode"]["ops"]}
    tpu = run("roofline", "-t", "2x2x4", "--tp", "32", "-c", "8192")
    term = next(o for o in tpu["expected"]["decode"]["ops"] if o["name"] == "MXFP4 expert dequantisation")
    assert "kowalski-4831/vllm-torchtpu" in term["label"]


def test_the_chip_never_beats_the_compiler_s_schedule_of_gmm_v2():
    """A static schedule counts issue slots and no stall, so each call the v5e ran (probe gmm) takes at least
    the same compiler's schedule of it (probe gmm-schedule): a parser or grid count that doubled the steps would
    put a call below its schedule (as reading w13's fused halves as two grid steps once did)."""
    from pathlib import Path

    from k3plan.evidence.probe_records import load_with_paths
    from k3plan.speed.curves import schedule_checks

    checks = [
        c for c in schedule_checks(load_with_paths(Path("k3plan/evidence/probes"))) if c.device_kind == "TPU v5 lite"
    ]
    assert {c.call for c in checks} == {f"{p} int4 {pt}" for p in ("w13", "w2") for pt in ("16x2", "256x28")}
    for c in checks:
        assert 1.0 < c.measured_s / c.scheduled_s < 3.0, c


def test_tpu7x_s_schedule_of_the_experts_is_in_the_gap_text(nightly):
    """The TPU7x compiler's schedule of the routed experts a prefill chunk, x the v5e's measured / scheduled
    range, is what the per-chunk gap says the kernel would take: below the model's own experts, so the kernel
    is not where the per-chunk gap lies."""
    from pathlib import Path

    from k3plan.evidence.probe_records import load_with_paths
    from k3plan.speed.curves import schedule_checks

    ratios = sorted(
        c.measured_s / c.scheduled_s
        for c in schedule_checks(load_with_paths(Path("k3plan/evidence/probes")))
        if c.device_kind == "TPU v5 lite"
    )
    gaps = {t["name"]: t for t in nightly["serving"]["prefill"]["gap_terms"]}
    text = next(t["source"] for name, t in gaps.items() if name.startswith("per-chunk fixed cost"))
    m = __import__("re").search(
        r"carry gmm_v2's efficiency measured on TPU v5 lite; TPU7x's own compiler schedules the kernel .*? at "
        r"([\d.]+) ms a step .*? took ([\d.]+)-([\d.]+)x .*? would take ([\d.]+)-([\d.]+) ms a step",
        text,
    )
    assert m, text
    sched, lo, hi, t_lo, t_hi = map(float, m.groups())
    assert (lo, hi) == (round(ratios[0], 2), round(ratios[-1], 2))
    assert t_lo == pytest.approx(sched * ratios[0], abs=0.06) and t_hi == pytest.approx(sched * ratios[-1], abs=0.06)
    experts = nightly["expected"]["prefill"]["by_kind"]["experts"]["expected_s"] * 1e3 / 16
    assert 15 < sched < t_hi < experts  # ~19 ms scheduled, 27-40 ms with the v5e's stalls, 51.9 ms modelled
