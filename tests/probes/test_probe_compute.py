"""hbm, matmul, kda, kda-decode, ragged-dot on the CPU backend: small shapes, valid records,
fallbacks visible, numerics checked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from k3plan.evidence.probe_record import CPU_LABEL, ProbeRecord
from k3plan.specfile import convert


def _valid(out, n):
    files = sorted(out.glob("*.json"))
    assert len(files) == n
    recs = [convert(ProbeRecord, json.loads(p.read_text()), "a probe record") for p in files]
    for rec in recs:
        assert rec.backend == "cpu" and rec.label.startswith(CPU_LABEL) and rec.ok and rec.verified is True
        assert rec.points and all(pt.value is not None and pt.stats.n == 2 for pt in rec.points)
    return recs


def test_hbm_xla(run_probe_cli):
    result, records, out = run_probe_cli("hbm", "--size", "1MiB,4MiB")
    assert result.exit_code == 0, result.stderr
    recs = _valid(out, 2)
    assert {r.op for r in recs} == {"copy", "reduce"} and all(r.implementation == "xla" for r in recs)
    assert all(pt.unit == "bytes/s" and pt.value > 0 for r in recs for pt in r.points)


def test_hbm_pallas_falls_back_to_interpret_visibly(run_probe_cli):
    result, records, out = run_probe_cli(
        "hbm", "--size", "1MiB", "--impl", "pallas", "--op", "copy", "--block-rows", "64"
    )
    assert result.exit_code == 0, result.stderr
    (rec,) = _valid(out, 1)
    assert rec.implementation == "pallas-interpret" and rec.fallback
    assert "needs a TPU or GPU" in rec.fallback_reasons[0] and "interpret" in rec.label
    assert rec.points[0].params["bytes"] == 2**20


def test_matmul(run_probe_cli):
    result, records, out = run_probe_cli("matmul", "--size", "64,128", "--dtype", "bfloat16,float32")
    assert result.exit_code == 0, result.stderr
    (rec,) = _valid(out, 1)
    assert [(p.params["dtype"], p.params["size"]) for p in rec.points] == [
        ("bfloat16", 64),
        ("bfloat16", 128),
        ("float32", 64),
        ("float32", 128),
    ]
    assert all(p.unit == "flop/s" for p in rec.points)


@pytest.fixture
def tiny_plan(tmp_path):
    """--from-plan options for tiny K3 (tests/k3_testing.py) at tp 2 on one tpu-v7x chip, 2 fake CPU devices."""
    from k3_testing import tiny_kimi_raw

    (tmp_path / "config.json").write_text(json.dumps(tiny_kimi_raw()))
    return [
        "--from-plan",
        "-m",
        tmp_path / "config.json",
        "-t",
        "1x1x1",
        "--tp",
        "2",
        "--batch",
        "4",
        "--context",
        "64",
        "--chunk",
        "16",
        "--cpu-devices",
        "2",
        "--dtype",
        "float32",
    ]


def test_matmul_and_ragged_dot_from_plan(run_probe_cli, tiny_plan):
    from k3plan.speed.curves import _point_values
    from k3plan.speed.peaks import LinkPeak, Peaks

    result, _, out = run_probe_cli("matmul", *tiny_plan)
    assert result.exit_code == 0, result.stderr
    (mm,) = _valid(out, 1)
    assert "tp 2 ep 2 dp 1" in mm.params["from_plan"] and mm.params["cpu_scale_factor"] == 1
    assert any("shapes of the step's matmul ops" in n for n in mm.notes)
    # tiny K3's decode lm_head at tp 2: 4 sequences x vocab 1024 / 2 x hidden 256 (test_op_shapes.py has them all)
    head = next(p for p in mm.points if p.params["ops"] == ["decode:global.lm_head"])
    assert (head.params["m"], head.params["n"], head.params["k"]) == (4, 512, 256)
    # 13 distinct shapes a phase: the row-parallel dense down_proj [256, 512] runs 256 x 256 on a device,
    # the shape of the column-parallel gate/up [512, 256] (one point for the three)
    assert head.params["flops"] == 2 * 4 * 512 * 256 and len(mm.points) == 26
    # the efficiency curve keys a matmul by (M N K)^(1/3): every point lands on it at that size
    link = LinkPeak(bw_bytes_per_s=1.0, latency_s=0.0)
    peaks = Peaks(
        device_kind="cpu",
        hardware="hand-made",
        flops_per_s_by_dtype={"bf16": 1e12, "float32": 1e12},
        hbm_bw_bytes_per_s=1e11,
        scale_up=link,
        scale_out=link,
    )
    values = _point_values(mm, peaks)
    assert any(d.startswith("float32 4x512x256 (decode:global.lm_head)") for _, _, _, d in values)
    xs = sorted(x for _, x, _, _ in values)
    assert xs[-1] == pytest.approx((16 * 512 * 256) ** (1 / 3)) and len(xs) == 26

    result, _, out2 = run_probe_cli("ragged-dot", *tiny_plan[:-2], "--dtype", "float32", "--out", str(out) + "-rd")
    assert result.exit_code == 0, result.stderr
    (rd,) = _valid(out.parent / "records-rd", 1)
    # decode: 3 of the 4 local experts touched, 4 rows; prefill chunk 16: 16 rows over all 4 (test_op_shapes.py)
    got = sorted((p.params["tokens"], p.params["k"], p.params["experts_touched"], p.params["rows"]) for p in rd.points)
    assert got == [(4, 64, 3, 4), (4, 128, 3, 4), (16, 64, 4, 16), (16, 128, 4, 16)]
    assert all(p.params["ops"] and p.params["ops"][0].split(":")[0] in ("decode", "prefill") for p in rd.points)
    assert sorted(x for _, x, _, _ in _point_values(rd, peaks)) == pytest.approx([4 / 3, 4 / 3, 4, 4])


def test_kda_falls_back_to_reference_and_paths_agree(run_probe_cli):
    result, records, out = run_probe_cli(
        "kda", "--heads", "2", "--head-dim", "16", "--chunk", "16", "--seq-lens", "32,64"
    )
    assert result.exit_code == 0, result.stderr
    recs = {r.mode: r for r in _valid(out, 2)}
    chunked, recurrent = recs["chunked"], recs["recurrent"]
    assert recurrent.implementation == "reference-recurrent"
    try:
        import tokamax  # noqa: F401
    except ImportError:
        assert chunked.implementation == "reference-chunked" and chunked.fallback
        assert any("tokamax is not installed" in r for r in chunked.fallback_reasons)
    assert [p.params["seq_len"] for p in chunked.points] == [32, 64]
    assert all(p.unit == "s/token" for p in chunked.points)
    assert "vs reference-recurrent" in chunked.verification[0].detail


def test_kda_decode_pallas_interpret_matches_reference(run_probe_cli):
    result, records, out = run_probe_cli("kda-decode", "--heads", "4", "--head-dim", "16", "--heads-per-block", "2")
    assert result.exit_code == 0, result.stderr
    (rec,) = _valid(out, 1)
    assert rec.implementation == "pallas-interpret" and rec.fallback and "interpret" in rec.label
    assert [p.params["path"] for p in rec.points] == ["pallas-interpret", "reference"]
    assert "atol" in rec.verification[0].detail


def test_kda_decode_kernel_against_numpy():
    """The Pallas step (interpret) against a plain numpy loop over heads, independent of jnp."""
    from k3plan.probes.kda import base
    from k3plan.probes.kda_decode.pallas import decode_step

    h, d = 4, 8
    q, k, v, g, beta = (
        a[0, 0].astype(np.float64) for a in base.inputs(batch=1, seq_len=1, heads=h, head_dim=d, seed=3)
    )
    state = np.random.default_rng(2).standard_normal((h, d, d)) * 0.1
    new_state, o = decode_step(
        state.astype(np.float32),
        *(a.astype(np.float32) for a in (q, k, v, g, beta)),
        scale=0.5,
        heads_per_block=2,
        interpret=True,
    )
    for i in range(h):
        s = state[i] * np.exp(g[i])[:, None]
        s = s + np.outer(k[i], beta[i] * (v[i] - k[i] @ s))
        np.testing.assert_allclose(np.asarray(new_state)[i], s, atol=1e-5)
        np.testing.assert_allclose(np.asarray(o)[i], 0.5 * q[i] @ s, atol=1e-5)


def test_ragged_dot_scaled_down(run_probe_cli):
    result, records, out = run_probe_cli(
        "ragged-dot",
        "--tokens",
        "1,32",
        "--experts",
        "32",
        "--top-k",
        "4",
        "--d-in",
        "64",
        "--d-out",
        "48",
        "--ep",
        "4",
        "--dtype",
        "float32",
    )
    assert result.exit_code == 0, result.stderr
    (rec,) = _valid(out, 1)
    one, many = rec.points
    assert one.params["rows"] >= 1 and one.params["experts_touched"] <= 4  # top-4 of one token
    assert many.params["rows"] > one.params["rows"] and rec.params["local_experts"] == 8


@pytest.mark.parametrize(
    "args, needle",
    [
        (["hbm", "--impl", "cuda"], "--impl"),
        (["kda", "--seq-lens", "100", "--chunk", "64"], "multiple of --chunk"),
        (["kda-decode", "--heads", "6", "--heads-per-block", "4"], "must divide"),
        (["ragged-dot", "--ep", "5"], "--ep 5"),
        (["matmul", "--dtype", "float64"], "--dtype"),
        (["matmul", "--from-plan", "--size", "64"], "--from-plan"),
        (["matmul", "--from-plan", "--tp", "3"], "tp"),
        (["ragged-dot", "--plan-ep", "4"], "--plan-ep: a --from-plan option"),
    ],
)
def test_bad_probe_options_exit_2(cli, args, needle):
    result = cli("probe", *args, "--no-write", "--timeout", "5")  # never write into the repo
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
