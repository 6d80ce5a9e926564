"""probe attnres (issue 38): an engine's Attention Residual kernel loaded from a file at run time, timed in a loop;
on CPU with tests/probes/attnres_standin.py (a jnp mix with attention_residual's call signature), no TPU, no
network, no kernel source. The committed TPU v5 lite records (k3plan/evidence/probes/attnres-tpu-v5-lite-*.json) say what
the engine's own kernel costs at K3's per-device shapes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from k3plan.evidence.probe_record import CPU_LABEL, ProbePoint, ProbeRecord, Stats
from k3plan.specfile import convert
from k3plan.structs import dump

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "attnres_standin.py"
PROBES = REPO / "k3plan" / "evidence" / "probes"
SMALL = ("--tokens", "16,32", "--blocks", "1,2", "--hidden", "256", "--layers", "3", "--block-size", "2")


def _records(out: Path) -> list[ProbeRecord]:
    return [convert(ProbeRecord, json.loads(p.read_text()), p.name) for p in sorted(out.glob("*.json"))]


def test_k3_call_blocks_follow_the_engines_block_schedule():
    from k3plan.probes.attnres_engine import k3_call_blocks

    calls = k3_call_blocks()  # 93 layers, a block every 12: layer 0's self_attention_res sees no block, skipped
    assert len(calls) == 92 + 93 + 1 == 186
    assert sorted(Counter(calls).items()) == [(k, 24) for k in range(1, 8)] + [(8, 18)]
    assert calls[:3] == [1, 1, 1] and calls[-1] == 8  # layer 0's mlp_res sees its own block; output sees all 8
    # layer 12: self_attention_res on 1 block, then the append, mlp_res on 2
    assert calls[1 + 2 * 11 : 1 + 2 * 11 + 2] == [1, 2]
    assert k3_call_blocks(3, 2) == [1, 1, 1, 1, 2, 2]  # layer 2: self on 1 block, append, mlp on 2


def test_attnres_probe_times_the_kernel_file_and_sums_a_step(run_probe_cli):
    result, _, out = run_probe_cli("attnres", "--kernel", str(STANDIN), *SMALL)
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(out)
    assert rec.probe == "attnres" and rec.backend == "cpu" and rec.label.startswith(CPU_LABEL)
    assert rec.ok and rec.verified is True and len(rec.verification) == 4
    info = rec.params["kernel"]
    assert info["source"]["path"] == "tests/probes/attnres_standin.py" and len(info["sha256"]) == 64
    assert rec.params["calls_by_blocks"] == {"1": 4, "2": 2} and rec.params["dispatch_floor_s"] > 0
    assert convert(ProbeRecord, json.loads(json.dumps(dump(rec))), "a record") == rec
    assert [(p.params["tokens"], p.params["blocks"]) for p in rec.points] == [(16, 1), (16, 2), (32, 1), (32, 2)]
    for p in rec.points:
        assert p.value == p.stats.p50 > 0 and p.unit == "s" and p.params["floor_s"] >= 0
        assert p.params["ceiling_s"] is None  # CPU: no spec, no ceiling
    q = rec.points[1].params  # 16 rows, 2 blocks of 256: prefix, history, out in bf16, the f32 weight
    assert q["touched_bytes"] == 16 * 256 * 2 + 16 * 2 * 256 * 2 + 16 * 256 * 2 + 256 * 4
    assert q["flops"] == 6 * 16 * 3 * 256
    step = rec.params["per_step"]["16"]
    v = {p.params["blocks"]: p.value for p in rec.points if p.params["tokens"] == 16}
    assert (
        step["calls"] == 6 and step["missing_blocks"] == [] and step["measured_s"] == pytest.approx(4 * v[1] + 2 * v[2])
    )


def test_a_step_sum_needs_every_k_it_uses(run_probe_cli):
    result, _, out = run_probe_cli("attnres", "--kernel", str(STANDIN), *SMALL[:2], "--blocks", "1", *SMALL[4:])
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(out)
    assert rec.params["per_step"]["16"]["missing_blocks"] == [2] and "measured_s" not in rec.params["per_step"]["16"]


def test_a_kernel_that_computes_wrong_is_not_ok(run_probe_cli, tmp_path):
    wrong = tmp_path / "wrong_attnres.py"
    wrong.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('standin', {str(STANDIN)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "def attention_residual(prefix, history, w, *, eps=1e-5):\n"
        "    return mod.attention_residual(prefix, history, w, eps=eps) * 2\n"
    )
    result, _, out = run_probe_cli(
        "attnres", "--kernel", str(wrong), "--tokens", "16", "--blocks", "1", "--hidden", "128"
    )
    assert result.exit_code == 1
    (rec,) = _records(out)
    assert not rec.ok and rec.verified is False and "numerics" in rec.verification[0].check


def test_a_point_faster_than_its_ceiling_is_refused():
    from k3plan.probes.attnres_engine import attnres_cost
    from k3plan.probes.peak import refuse_below_bound

    moved, flops = attnres_cost(tokens=16, blocks=8, hidden=7168)
    hbm, bf16 = 819e9, 197e12  # TPU v5e
    bound = max(sum(moved.values()) / hbm, flops / bf16)
    assert bound == sum(moved.values()) / hbm and 2.8e-6 < bound < 2.9e-6  # 2.32 MB: HBM-bound, not FLOP-bound
    fast = ProbePoint(
        params={"path": "p"}, stats=Stats(n=1, min=1e-7, p50=1e-7, p90=1e-7), value=1e-7, unit="s", expected=bound
    )
    slow = ProbePoint(params={"path": "q"}, value=bound * 3, unit="s", expected=bound)
    refused = refuse_below_bound([fast, slow], what="attnres")
    assert len(refused) == 1 and fast.value is None and slow.value == bound * 3


def test_committed_tpu_records_hold_every_k3_point_and_sum():
    recs = [json.loads(f.read_text()) for f in sorted(PROBES.glob("attnres-tpu-v5-lite-*.json"))]
    assert recs, "no committed attnres TPU record"
    full = next(r for r in recs if len(r["points"]) == 16)  # the full run: T 16 and 512 at every K
    assert full["ok"] and full["verified"] and full["params"]["kernel"]["source"]["commit"].startswith("589f3946")
    pts = {(p["params"]["tokens"], p["params"]["blocks"]): p for p in full["points"]}
    assert set(pts) == {(t, k) for t in (16, 512) for k in range(1, 9)}
    for p in pts.values():
        assert p["value"] >= p["expected"] > 0  # never faster than the spec's ceiling
    for t in ("16", "512"):
        step = full["params"]["per_step"][t]
        want = sum(n * pts[(int(t), int(k))]["value"] for k, n in full["params"]["calls_by_blocks"].items())
        assert step["calls"] == 186 and step["measured_s"] == pytest.approx(want)


@pytest.mark.parametrize(
    "args, needle",
    [
        ([], "give --kernel"),
        (["--kernel", "no/such/file.py"], "no such file"),
        (["--kernel", str(STANDIN), "--tokens", "24"], "multiple of 16"),
        (["--kernel", str(STANDIN), "--blocks", "0"], "--blocks"),
        (["--kernel", str(STANDIN), "--hidden", "0"], "--hidden"),
    ],
)
def test_attnres_probe_bad_input_is_one_line(cli, args, needle):
    result = cli("probe", "attnres", "--no-write", *args)
    assert result.exit_code == 2 and needle in result.stderr
