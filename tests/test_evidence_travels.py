"""Issue 46 item 1: the evidence travels with the tool. The probe records the default answer reads ship in the
package (k3plan/evidence/probes), so roofline's speed figures are byte-identical from the checkout's top and from
an empty folder (a fresh process each, PYTHONPATH = the checkout, as the house check at stop runs them);
``--probes DIR`` adds records to the shipped ones, never replaces them; the JSON names every record used by its
package-relative name. The wheel-installed k3plan answers the same: tests/test_packaging.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOFLINE = ("roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--json")
FIGURES = (
    ("expected", "decode", "expected_s"),
    ("expected", "prefill", "expected_s"),
    ("decode", "tpot_s"),
    ("prefill", "ttft_s"),
)


def _k3plan(cwd: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run(
        [sys.executable, "-m", "k3plan", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def figures(d: dict) -> tuple[str, ...]:
    """The four figures as JSON prints them (byte-identical, not approximately equal)."""
    out = []
    for path in FIGURES:
        v = d
        for k in path:
            v = v[k]
        out.append(json.dumps(v))
    return tuple(out)


def test_speed_figures_are_the_same_from_the_checkout_and_from_an_empty_folder(tmp_path):
    root = _k3plan(REPO, *ROOFLINE)
    empty = tmp_path / "empty"
    empty.mkdir()
    elsewhere = _k3plan(empty, *ROOFLINE)
    assert figures(root) == figures(elsewhere)
    assert root["expected"] == elsewhere["expected"]
    # the default answer has measured records (the shipped ones), named by their package path
    used = root["expected"]["records_used"]
    assert used and all(p.startswith("k3plan/evidence/probes/") for p in used)
    assert root["expected"]["decode"]["expected_s"] != root["expected"]["decode"]["ceiling_s"]
    assert not any(str(REPO) in json.dumps(d) for d in (root, elsewhere))


def test_the_shipped_records_are_package_data():
    shipped = sorted(p.name for p in (REPO / "k3plan" / "evidence" / "probes").glob("*.json"))
    assert shipped and not any("-cpu-" in n for n in shipped)  # CPU records never price an accelerator
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"evidence/probes/*.json"' in pyproject


def test_the_json_names_every_record_a_figure_used(cli):
    """Issue 46 item 3: roofline, fit and plan name the records their figures used, package-relative."""
    r = json.loads(cli(*ROOFLINE).stdout)
    assert set(r["expected"]["records_used"]) <= set(r["records_used"])
    assert any("mla-engine-" in p for p in r["records_used"])  # an engine kernel's measured time is a record too
    f = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "--context", "8192", "--json").stdout)["speed"]
    assert f["tpot_source"] == "transferred" and f["records_used"]  # the model ratio read the shipped records
    p = json.loads(cli("plan", "-H", "tpu-v7x", "--stacks", "torchtpu-vllm", "--max-chips", "32", "--json").stdout)
    row = p["ranked"][0]
    assert row["expected_tpot_ms"] is not None and row["expected_records"]
    for used in (r["records_used"], f["records_used"], row["expected_records"]):
        assert all(u.startswith("k3plan/evidence/probes/") and (REPO / u).is_file() for u in used)


def test_probes_adds_to_the_shipped_records(cli, tmp_path):
    """--probes DIR with one more record (a TPU7x HBM copy at 80% of the spec's bandwidth): the shipped records
    still set the figures they set, and the added one is named beside them (never hiding the shipped ones)."""
    from k3plan.hardware import load_hardware

    shipped = json.loads(cli(*ROOFLINE).stdout)
    bw = load_hardware("tpu-v7x").hbm_bw_bytes_per_s_per_device
    rec = {
        "probe": "hbm",
        "op": "copy",
        "mode": None,
        "params": {},
        "backend": "tpu",
        "device_kind": "TPU7x",
        "device_count": 8,
        "date": "2026-12-01T00:00:00Z",
        "implementation": "xla",
        "label": None,
        "points": [
            {"params": {"bytes": 2**20}, "value": 0.8 * bw, "unit": "bytes/s"},
            {"params": {"bytes": 2**30}, "value": 0.8 * bw, "unit": "bytes/s"},
        ],
    }
    (tmp_path / "hbm-tpu7x-mine.json").write_text(json.dumps(rec))
    added = json.loads(cli(*ROOFLINE, "--probes", tmp_path).stdout)
    assert added["expected"]["records"].startswith(
        f"efficiency records of TPU7x in k3plan/evidence/probes + --probes {tmp_path}"
    )
    mine = str(tmp_path / "hbm-tpu7x-mine.json")
    assert mine in added["records_used"] and mine in added["expected"]["records_used"]
    assert any(u.startswith("k3plan/evidence/probes/") for u in added["expected"]["records_used"])
    # the shipped records' efficiencies and kernel times stay (the v5e HBM curve only ever stood in, transferred,
    # where no TPU7x one existed: it was not among them)
    assert set(shipped["expected"]["records_used"]) <= set(added["expected"]["records_used"])
    assert any("mla-engine-" in u for u in added["expected"]["records_used"])
    assert added["expected"]["decode"]["expected_s"] != shipped["expected"]["decode"]["expected_s"]


def test_a_library_call_without_evidence_reads_the_shipped_records_afresh(no_shipped_records):
    """No module-level Evidence outlives a question: a library call that passes none gets a fresh value, so the
    records one call read (here none: the shipped folder hidden) are not what the next call answers from (the leak
    that made tests/speed/test_serving_figures.py depend on running after test_roofline_expected.py's report)."""
    import k3plan.evidence.value as value

    hidden = value.evidence_of(None)
    assert hidden.records == () and value.evidence_of(None) is not hidden
    value.SHIPPED_DIR = REPO / "k3plan" / "evidence" / "probes"  # no_shipped_records' monkeypatch restores it after
    assert value.evidence_of(None).records
