"""Issue 14's session model in `k3plan curve`: context growth a turn and the first turn that no
longer fits the fit's memory-allowed context; expected values worked out by hand."""

from __future__ import annotations

import json

from k3_testing import one_error_line

# jax-native: 8 x 32K fits on 2x2x4 TP=32 with its measured temp (vllm-tpu's compiled temp does not, issue 15)
FIT = ["-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--batch", "8", "--context", "32768"]
ARGS = [
    *FIT,
    "--chunks",
    "8192",
    "--turns",
    "6",
    "--system-tokens",
    "4000",
    "--user-tokens",
    "800",
    "--answer-tokens",
    "1200",
    "--tool-tokens",
    "2000",
    "--reasoning-tokens",
    "6000",
]


def _json(cli, *args):
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_reasoning_carried_back_grows_the_context_and_stops_at_the_fits_context(cli):
    d = _json(cli, "curve", *ARGS)
    cap = json.loads(cli("fit", *FIT, "--json").stdout)["capacity"]["memory_context_tokens"]
    g = d["sessions"]
    assert g["max_context_tokens"] == cap
    # peak of turn t = 4000 + (t-1) x (800+1200+2000+6000) + 800 + 1200 + 2000 + 6000
    assert g["peak_context_tokens"] == [14_000 + 10_000 * (t - 1) for t in range(1, 7)]
    assert g["prompt_tokens"] == [4_800 + 10_000 * (t - 1) for t in range(1, 7)]
    assert g["visible_context_tokens"] == [4_000 + 2_000 * t for t in range(1, 7)]
    first = 1 + (cap - 14_000) // 10_000 + 1  # the first turn whose peak exceeds cap
    assert g["first_turn_not_fitting"] == first and g["turns_fitting"] == first - 1


def test_dropping_reasoning_carries_4000_a_turn(cli):
    g = _json(cli, "curve", *ARGS, "--drop-reasoning")["sessions"]
    assert g["peak_context_tokens"] == [14_000 + 4_000 * (t - 1) for t in range(1, 7)]
    cap = g["max_context_tokens"]
    assert g["turns_fitting"] == min(6, 1 + (cap - 14_000) // 4_000)


def test_text_names_the_turn(cli):
    r = cli("curve", *ARGS)
    assert r.exit_code == 0 and "context grows 10,000 tokens a turn" in r.stdout and "no longer fits" in r.stdout


def test_session_flags_are_checked(cli):
    assert "--turns" in one_error_line(cli("curve", "-t", "2x2x4", "--tp", "32", "--turns", "3"))
    assert "--user-tokens" in one_error_line(
        cli("curve", "-t", "2x2x4", "--tp", "32", "--turns", "3", "--user-tokens", "-5")
    )
