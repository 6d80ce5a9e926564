"""The uneven expert placement (vLLM: 896 experts over EP 72, 13 on 32 devices and 12 on 40) is said by
every command that shows that configuration, in the same words as fit's note: plan's row (table and
--json), curve (table and --json). fit, roofline and validate are covered in test_uneven_experts.py."""

from __future__ import annotations

import json

NOTE = "experts 896 over ep 72: 32 devices hold 13, 40 hold 12 (vllm-project/vllm determine_expert_map"
NVL72 = ("-H", "nvidia-gb200-nvl72", "-t", "72", "--tp", "8", "--ep", "72", "--stack", "vllm")
PLAN = ("plan", "-H", "nvidia-gb200-nvl72", "--stacks", "vllm", "--max-chips", "72", "--max-pp", "1", "--top", "100")


def _fit_note(cli) -> str:
    res = cli("fit", *NVL72, "--json")
    assert res.exit_code in (0, 3), res.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    (note,) = [n for n in json.loads(res.stdout)["notes"] if n.startswith(NOTE)]
    return note


def test_curve_json_carries_the_placement_note(cli):
    res = cli("curve", *NVL72, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["notes"] == [_fit_note(cli)]
    even = cli("curve", "-H", "nvidia-gb200-nvl72", "-t", "64", "--tp", "8", "--ep", "64", "--stack", "vllm", "--json")
    assert json.loads(even.stdout)["notes"] == []  # 896 / 64 = 14: nothing to say


def test_plan_row_of_ep72_carries_the_placement_note_and_even_rows_do_not(cli):
    res = cli(*PLAN, "--json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["ranked"]
    uneven = [r for r in rows if 896 % r["ep"]]
    assert {(r["chips"], r["ep"]) for r in uneven} == {(72, 72)}  # 16 and 32 devices divide 896
    note = _fit_note(cli)
    for r in rows:
        assert (note in r["layout_notes"]) == (896 % r["ep"] != 0), r
    text = cli(*PLAN)
    flat = " ".join(text.stdout.split())
    assert "72 vllm: experts 896 over ep 72: 32 devices hold 13, 40 hold 12" in flat


def test_report_pick_on_an_uneven_split_says_so(cli, tmp_path):
    # 500 sequences of 131,072 tokens on GB200 NVL72 under vLLM: the smallest viable split is 72 devices,
    # tp 2, experts over all 72 (896 / 72 uneven); the report's pick must say what fit says of it
    out = tmp_path / "r.md"
    args = ("report", "-H", "nvidia-gb200-nvl72", "--stack", "vllm", "-c", "131072", "--concurrency", "500")
    res = cli(*args, "--out", out, "--json")
    assert res.exit_code == 0, res.stderr
    (row,) = json.loads(res.stdout)["platforms"][0]["rows"]
    assert (row["setup"]["devices"], row["setup"]["ep"]) == (72, 72)
    (note,) = row["notes"]
    assert note.startswith(NOTE) and note.endswith("a 13-expert device's")
    res = cli(*args, "--out", out)
    assert res.exit_code == 0, res.stderr
    assert f"note: {note}" in out.read_text()
