"""plan accepts the session workload of issue 14: the context it plans for is a session's peak at
its last turn (K3 carries earlier reasoning back), worked out by hand here."""

from __future__ import annotations

import json

from k3_testing import one_error_line

SESSION = ["--turns", "20", "--user-tokens", "800", "--answer-tokens", "1200", "--reasoning-tokens", "6000"]


def test_plan_sizes_for_the_peak_of_the_last_turn(cli):
    r = cli("plan", "-H", "tpu-v7x", *SESSION, "--json")
    assert r.exit_code in (0, 1), r.output
    d = json.loads(r.stdout)
    # every turn adds user 800 + answer 1,200 + reasoning 6,000 = 8,000 carried tokens; 20 turns
    assert d["workload"]["context_tokens"] == 20 * (800 + 1200 + 6000) == 160_000
    # the visible conversation is 20 x 2,000 = 40,000 tokens: 4.00x less
    assert any("turn 20" in a and "4.00x the visible" in a for a in d["assumptions"])


def test_turns_and_context_together_are_refused(cli):
    line = one_error_line(cli("plan", *SESSION, "--context", "5000"))
    assert "--turns sets the context" in line
