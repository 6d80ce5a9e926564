"""probe kda-engine (issue 38): an engine's KDA kernels loaded from files at run time, timed in a loop; on CPU with
tests/probes/kda_engine_standin.py (jnp recurrences with chunk_kda's and decode_kda's call signatures), no TPU,
no network, no kernel source. The committed TPU v5 lite records (k3plan/evidence/probes/kda-engine-tpu-v5-lite-*.json)
say what the engine's own kernels cost at K3's per-device shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.evidence.probe_record import CPU_LABEL, ProbePoint, ProbeRecord
from k3plan.specfile import convert
from k3plan.structs import dump

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "kda_engine_standin.py"
PROBES = REPO / "k3plan" / "evidence" / "probes"
SMALL = ("--head-dim", "16", "--prefill", "64x2,40x1", "--decode", "4x2,1x2", "--decode-real", "2")


def _records(out: Path) -> list[ProbeRecord]:
    return [convert(ProbeRecord, json.loads(p.read_text()), p.name) for p in sorted(out.glob("*.json"))]


def test_kda_engine_probe_times_both_kernel_files_and_round_trips(run_probe_cli):
    result, _, out = run_probe_cli("kda-engine", "--kernel", str(STANDIN), "--decode-kernel", str(STANDIN), *SMALL)
    assert result.exit_code == 0, result.stderr
    recs = {r.op: r for r in _records(out)}
    assert sorted(recs) == ["chunk_kda", "decode_kda"]
    for rec in recs.values():
        assert rec.probe == "kda-engine" and rec.backend == "cpu" and rec.label.startswith(CPU_LABEL)
        assert rec.ok and rec.verified is True and all(c.ok for c in rec.verification)
        info = rec.params["kernel"]
        assert info["source"]["path"] == "tests/probes/kda_engine_standin.py" and len(info["sha256"]) == 64
        assert info["local_edits"] and len(info["dependencies"]["gmm_standin.py"]["sha256"]) == 64
        assert rec.params["dispatch_floor_s"] > 0 and rec.params["lower_bound"] == -5.0
        assert convert(ProbeRecord, json.loads(json.dumps(dump(rec))), "a record") == rec
        for p in rec.points:
            assert p.value == p.stats.p50 > 0 and p.unit == "s" and p.params["floor_s"] >= 0
            assert p.params["stream_s"] is None and p.params["ceiling_s"] is None  # CPU: no spec, no ceiling
    chunk, dec = recs["chunk_kda"], recs["decode_kda"]
    assert [(p.params["tokens"], p.params["heads"]) for p in chunk.points] == [(64, 2), (40, 1)]
    p = chunk.points[0].params
    # 64 tokens, 2 heads of 16: q k v g and the output in bf16, beta, the f32 state in and out, A_log + dt_bias
    assert (
        p["touched_bytes"]
        == 4 * 64 * 2 * 16 * 2 + 64 * 2 * 2 + 64 * 2 * 16 * 2 + 2 * 2 * 16 * 16 * 4 + 2 * 4 + 2 * 16 * 4
    )
    assert p["flops"] == 1 * 2 * (2 * 64**2 * 5 * 16 + 6 * 64 * 16 * 16)  # one 64-token chunk, 2 heads
    assert chunk.points[1].params["flops"] == 1 * 1 * (2 * 64**2 * 5 * 16 + 6 * 64 * 16 * 16)  # 40 tokens: 1 chunk
    assert [(p.params["rows"], p.params["real_sequences"]) for p in dec.points] == [(4, 2), (1, 1)]
    q = dec.points[0].params
    assert q["state_bytes"] == 2 * 2 * 2 * 16 * 16 * 4 and q["slots"] == 3  # 2 real sequences' f32 state in+out
    assert "null-slot rows zero: True" in dec.verification[0].detail


def test_a_kernel_that_computes_wrong_is_not_ok(run_probe_cli, tmp_path):
    wrong = tmp_path / "wrong_kda.py"
    wrong.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('standin', {str(STANDIN)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "def chunk_kda(*args, **kw):\n"
        "    o, s = mod.chunk_kda(*args, **kw)\n"
        "    return o * 2, s\n"
    )
    result, _, out = run_probe_cli("kda-engine", "--kernel", str(wrong), "--head-dim", "16", "--prefill", "64x1")
    assert result.exit_code == 1
    (rec,) = _records(out)
    assert not rec.ok and rec.verified is False and "numerics" in rec.verification[0].check


def test_a_point_faster_than_its_ceiling_is_refused():
    from k3plan.evidence.probe_record import Stats
    from k3plan.probes.kda_engine import decode_cost, prefill_cost
    from k3plan.probes.peak import refuse_below_bound

    moved, flops = prefill_cost(tokens=512, heads=3, d=128)
    hbm, bf16 = 819e9, 197e12  # TPU v5e
    bound = max(sum(moved.values()) / hbm, flops / bf16)
    assert 2e-6 < bound < 4e-6  # ~2.4 MB must move for a 512-token chunk of 3 heads: ~3 us at HBM peak
    fast = ProbePoint(
        params={"path": "p"}, stats=Stats(n=1, min=1e-7, p50=1e-7, p90=1e-7), value=1e-7, unit="s", expected=bound
    )
    slow = ProbePoint(params={"path": "q"}, value=bound * 10, unit="s", expected=bound)
    refused = refuse_below_bound([fast, slow], what="kda-engine chunk_kda")
    assert len(refused) == 1 and fast.value is None and slow.value == bound * 10
    dmoved, dflops = decode_cost(real=1, heads=3, d=128, conv=4)
    assert dmoved["state_bytes"] == 2 * 3 * 128 * 128 * 4 and dflops < 1e6


@pytest.mark.parametrize(
    "args, needle",
    [
        ([], "give --kernel"),
        (["--kernel", "no/such/file.py"], "no such file"),
        (["--kernel", str(STANDIN), "--prefill", "512by3"], "expected AxB"),
        (["--kernel", str(STANDIN), "--lower-bound", "0.5"], "must be negative"),
        (["--kernel", str(STANDIN), "--lower-bound", "low"], "--lower-bound"),
        (["--kernel", str(STANDIN), "--decode-real", "0"], "--decode-real"),
    ],
)
def test_kda_engine_probe_bad_input_is_one_line(cli, args, needle):
    result = cli("probe", "kda-engine", "--no-write", *args)
    assert result.exit_code == 2 and needle in result.stderr
