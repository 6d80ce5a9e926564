"""Issue 48 item 3: a configuration whose stack cannot launch it is never ranked above one that can.

`plan -H tpu-v7x --context 131072 --concurrency 8` recommended jax-native at 2x4x4 TP16 EP64 DP4, whose launch file
cannot be written (MaxText holds every sequence's KV on each device: "MaxText launch: dp 4 cannot be expressed",
exit 2 from --emit launch). Such rows are now rejected with reason ``launch`` (the families say why), or, with
--include-unlaunchable, ranked after every row that can launch, each with its ``launch_error``."""

from __future__ import annotations

import json

import pytest

from k3plan.plan import plan

ASK = {"hardware": ["tpu-v7x"], "context": 131072, "concurrency": 8}


@pytest.fixture(scope="module")
def default():
    return plan(**ASK)


@pytest.fixture(scope="module")
def included():
    return plan(**ASK, include_unlaunchable=True, top=40)


def test_the_recommendation_is_one_its_stack_can_launch(default):
    r = default.recommended
    assert r is not None
    assert default.launch is not None and default.launch.error is None and default.launch.text is not None
    assert all(x.launch_error is None for x in default.ranked)
    assert not any(x.stack == "jax-native" and x.dp > 1 for x in default.ranked)


def test_rows_left_out_are_counted_under_reason_launch_with_why(default):
    fam = next(f for f in default.families if (f.hardware, f.stack) == ("tpu-v7x", "jax-native"))
    assert fam.reasons.launch and fam.reasons.launch > 0
    assert any("cannot launch" in d and "dp" in d and "cannot be expressed" in d for d in fam.detail), fam.detail
    assert "launch" in dict(default.reasons.items())


def test_included_rows_come_after_every_launchable_row_marked(included, default):
    marks = [x.launch_error is not None for x in included.ranked]
    assert any(marks), "expected some rows their stack cannot launch"
    first = marks.index(True)
    assert all(marks[first:]), "an unlaunchable row ranked above a launchable one"
    # the launchable rows keep the default's order
    assert [(x.topology, x.split_text, x.stack) for x in included.ranked[:first]][: len(default.ranked)] == [
        (x.topology, x.split_text, x.stack) for x in default.ranked
    ][:first]
    bad = included.ranked[first]
    assert "cannot be expressed" in bad.launch_error


def test_plan_json_carries_launch_error_only_where_set(cli):
    r = cli(
        "plan",
        "-H",
        "tpu-v7x",
        "--context",
        "131072",
        "--concurrency",
        "8",
        "--include-unlaunchable",
        "--top",
        "40",
        "--json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    errs = [row.get("launch_error") for row in d["ranked"]]
    assert "launch_error" not in d["ranked"][0] and any(errs)
    assert "launch" in d["reasons"]


def test_the_table_marks_included_rows_and_says_what_was_left_out(cli):
    r = cli("plan", "-H", "tpu-v7x", "--context", "131072", "--concurrency", "8")
    assert r.exit_code == 0, r.output
    assert "left out:" in r.output and "--include-unlaunchable" in r.output
    r = cli(
        "plan", "-H", "tpu-v7x", "--context", "131072", "--concurrency", "8", "--include-unlaunchable", "--top", "30"
    )
    assert r.exit_code == 0, r.output
    assert "cannot launch: MaxText launch: dp" in r.output


def test_under_a_load_too_unlaunchable_rows_rank_last():
    res = plan(
        hardware=["tpu-v7x"],
        stacks=["jax-native", "torchtpu-vllm"],
        isl=4000,
        osl=500,
        include_unlaunchable=True,
        top=200,
    )
    marks = [x.launch_error is not None for x in res.ranked]
    if any(marks):
        assert all(marks[marks.index(True) :])
    assert res.recommended is not None and res.recommended.launch_error is None
