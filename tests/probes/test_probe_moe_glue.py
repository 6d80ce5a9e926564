"""probe moe-glue (issue 38): the routing/permute/combine glue around an engine's expert matmuls at decode, loaded
from a file at run time, timed in a loop; on CPU with tests/probes/moe_glue_standin.py (gather and scatter-add with
moe_glue's call signature), no TPU, no network, no engine source. The committed TPU v5 lite record
(k3plan/evidence/probes/moe-glue-tpu-v5-lite-*.json) says what the engine's glue costs at K3's decode shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.evidence.probe_record import CPU_LABEL, ProbePoint, ProbeRecord, Stats
from k3plan.specfile import convert
from k3plan.structs import dump

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "moe_glue_standin.py"
PROBES = REPO / "k3plan" / "evidence" / "probes"
SMALL = ("--hidden", "256", "--experts", "64", "--topk", "4", "--ep", "4", "--tokens", "16,8")


def _records(out: Path) -> list[ProbeRecord]:
    return [convert(ProbeRecord, json.loads(p.read_text()), p.name) for p in sorted(out.glob("*.json"))]


def test_moe_glue_probe_times_the_file_and_checks_it(run_probe_cli):
    result, _, out = run_probe_cli("moe-glue", "--kernel", str(STANDIN), *SMALL)
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(out)
    assert rec.probe == "moe-glue" and rec.backend == "cpu" and rec.label.startswith(CPU_LABEL)
    assert "glue only, from moe_glue_standin.py" in rec.label
    assert rec.ok and rec.verified is True and len(rec.verification) == 2
    assert "group sizes sum right: True" in rec.verification[0].detail
    assert rec.params["kernel"]["source"]["path"] == "tests/probes/moe_glue_standin.py"
    assert rec.params["local_experts"] == 16 and rec.params["onehot_moe_permute_threshold"] == 511
    assert convert(ProbeRecord, json.loads(json.dumps(dump(rec))), "a record") == rec
    assert [p.params["tokens"] for p in rec.points] == [16, 8]
    q = rec.points[0].params  # 16 tokens x top-4 = 64 routed rows of 256
    assert q["touched_bytes"] == 16 * 256 * 2 + 2 * 64 * 256 * 2 + 16 * 256 * 2 + 64 * 8
    assert q["flops"] == 2 * 2 * 64 * 16 * 256 and q["ceiling_s"] is None  # CPU: no spec, no ceiling
    for p in rec.points:
        assert p.value == p.stats.p50 > 0 and p.unit == "s"


def test_a_glue_that_combines_wrong_is_not_ok(run_probe_cli, tmp_path):
    wrong = tmp_path / "wrong_glue.py"
    wrong.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('standin', {str(STANDIN)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "def moe_glue(*args, **kw):\n"
        "    out, x, sizes = mod.moe_glue(*args, **kw)\n"
        "    return out * 2, x, sizes\n"
    )
    result, _, out = run_probe_cli("moe-glue", "--kernel", str(wrong), *SMALL[:8])
    assert result.exit_code == 1
    (rec,) = _records(out)
    assert not rec.ok and rec.verified is False


def test_a_point_faster_than_its_ceiling_is_refused():
    from k3plan.probes.moe_glue import glue_cost
    from k3plan.probes.peak import refuse_below_bound

    moved, flops = glue_cost(tokens=16, topk=16, hidden=3584)
    bound = max(sum(moved.values()) / 819e9, flops / 197e12)  # TPU v5e
    assert bound == sum(moved.values()) / 819e9 and 4.7e-6 < bound < 4.8e-6  # 3.9 MB: HBM-bound
    fast = ProbePoint(
        params={"path": "p"}, stats=Stats(n=1, min=1e-7, p50=1e-7, p90=1e-7), value=1e-7, unit="s", expected=bound
    )
    assert len(refuse_below_bound([fast], what="moe-glue")) == 1 and fast.value is None


def test_committed_tpu_record_is_k3s_decode_glue():
    recs = [json.loads(f.read_text()) for f in sorted(PROBES.glob("moe-glue-tpu-v5-lite-*.json"))]
    assert recs, "no committed moe-glue TPU record"
    rec = recs[-1]  # the newest: its label says it is the glue alone
    assert "glue only" in rec["label"]
    assert rec["ok"] and rec["verified"] and rec["params"]["kernel"]["source"]["commit"].startswith("15e5264a")
    (p,) = rec["points"]
    assert (p["params"]["tokens"], p["params"]["topk"], p["params"]["local_experts"], p["params"]["hidden"]) == (
        16,
        16,
        28,
        3584,
    )
    assert p["value"] >= p["expected"] > 0


@pytest.mark.parametrize(
    "args, needle",
    [
        ([], "give --kernel"),
        (["--kernel", "no/such/file.py"], "no such file"),
        (["--kernel", str(STANDIN), "--tokens", "64"], "one-hot threshold"),
        (["--kernel", str(STANDIN), "--experts", "100"], "must divide"),
    ],
)
def test_moe_glue_probe_bad_input_is_one_line(cli, args, needle):
    result = cli("probe", "moe-glue", "--no-write", *args)
    assert result.exit_code == 2 and needle in result.stderr
