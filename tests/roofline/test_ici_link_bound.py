"""Issue 38: a prefill whose collectives need more than the scale-up link at the compute rate runs
(the nightly's K3 prefill at TP 32 needs 111% of ICI and runs every night): it is link-bound, not
infeasible, and the output says which."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app


def test_nightly_prefill_is_link_bound_not_infeasible():
    r = CliRunner().invoke(
        app, ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--json"]
    )
    assert r.exit_code == 0, r.output
    pre = json.loads(r.stdout)["prefill"]
    assert pre["link_share"] > 1.0
    assert pre["feasible"] is True
    assert pre["note"].startswith("link-bound")
    r = CliRunner().invoke(
        app,
        ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--verbose"],
    )
    assert "INFEASIBLE" not in r.stdout and "link-bound" in r.stdout
