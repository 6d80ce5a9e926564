"""`k3plan probe step`: a scaled-down K3 decode step timed end to end vs its expected time (issue 17)."""
