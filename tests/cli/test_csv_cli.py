"""issue 51 item 4: `plan --csv`, `curve --csv` and `report --csv` write k3plan.api's table: the CSV's rows are the
JSON's rows (plan's ``ranked``, curve's ``points``), a nested field as an ``outer.inner`` column, a list as one
cell (an item a line) but a band (lo, hi) as two number columns, a missing figure an empty cell. The flattening here is the test's own, from the JSON."""

from __future__ import annotations

import csv
import io
import json

import pytest
from k3_testing import one_error_line


def _flat(obj: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif k.endswith("_band_ms") and isinstance(v, list):  # a band: two number columns, .lo and .hi
            out.update(_flat({"lo": v[0], "hi": v[1]}, f"{prefix}{k}."))
        elif isinstance(v, list):
            out[f"{prefix}{k}"] = "\n".join(str(x) for x in v)
        else:
            out[f"{prefix}{k}"] = "" if v is None else str(v)
    return out


def _same(csv_rows: list[dict[str, str]], json_rows: list[dict]) -> None:
    assert len(csv_rows) == len(json_rows) > 0
    for got, row in zip(csv_rows, json_rows):
        want = _flat(row)
        assert set(want) <= set(got)
        for k, v in want.items():
            if got[k] != v:  # a whole number in a column of floats reads 8.0 for 8
                assert float(got[k]) == float(v), (k, got[k], v)
        # a column some other row has and this one has not is empty in this row
        assert all(got[k] == "" for k in set(got) - set(want))


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


PLAN = ("plan", "-H", "tpu-v7x,nvidia-b200", "--isl", "4000", "--osl", "500", "--concurrency", "8", "--top", "4")


def test_plan_csv_rows_are_the_json_rows(cli):
    j = cli(*PLAN, "--json")
    c = cli(*PLAN, "--csv", "-")
    assert j.exit_code == c.exit_code == 0, c.output
    _same(_csv_rows(c.stdout), json.loads(j.stdout)["ranked"])


def test_curve_csv_rows_are_the_json_points(cli, tmp_path):
    args = ("curve", "-t", "2x2x4", "--tp", "32", "--context", "8192")  # a curve with room (issue 50: not at 128K)
    j = cli(*args, "--json")
    path = tmp_path / "curve.csv"
    c = cli(*args, "--csv", path)
    assert j.exit_code == c.exit_code == 0, c.output
    assert f"CSV written to {path}" in " ".join(c.stdout.split())
    _same(_csv_rows(path.read_text()), json.loads(j.stdout)["points"])


def test_curve_csv_to_stdout_of_a_workload_that_does_not_fit_exits_1_with_the_reason_on_stderr(cli):
    r = cli("curve", "-t", "2x2x2", "--tp", "16", "--csv", "-")
    assert r.exit_code == 1
    assert r.stdout.startswith("chunk_tokens,") and "DOES NOT FIT" in r.stderr


def test_report_csv_is_the_platforms_table(cli, tmp_path):
    r = cli("report", "-H", "tpu-v7x", "-c", "131072", "--out", tmp_path / "r.md", "--csv", "-")
    assert r.exit_code == 0, r.output
    rows = _csv_rows(r.stdout)
    assert [(x["hardware"], x["context_tokens"]) for x in rows] == [("tpu-v7x", "131072")]
    assert rows[0]["setup.topology"] and int(rows[0]["per_device.free_bytes"]) > 0


@pytest.mark.parametrize("command", [PLAN[:3], ("curve", "-t", "2x2x4", "--tp", "32")])
def test_csv_to_stdout_and_json_is_one_error_line(cli, command):
    assert "--csv - and --json" in one_error_line(cli(*command, "--csv", "-", "--json"))


def test_csv_into_a_missing_folder_fails_before_the_search(cli, tmp_path):
    assert "--csv" in one_error_line(cli(*PLAN, "--csv", tmp_path / "no" / "plan.csv"))
