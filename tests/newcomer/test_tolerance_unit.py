"""Issue 36 point 8: `check --tolerance` says its unit: a bare number other than 0 (it was read as bytes:
'--tolerance 5' meant 5 B) is refused with the two spellings it could mean; --help names both units."""

from __future__ import annotations

import pytest

from k3plan.check.compare import parse_tolerance
from k3plan.errors import K3PlanError


def test_a_bare_number_is_refused_with_both_readings(cli):
    r = cli("check", "--baseline", "reports/baseline/k3.json", "--tolerance", "5")
    assert r.exit_code == 2
    (line,) = [x for x in r.output.splitlines() if x.strip()]
    assert "no unit" in line and "'5%'" in line and "'5MiB'" in line


@pytest.mark.parametrize(
    "text, pct, nbytes", [("5%", 5.0, None), ("5B", None, 5), ("512MiB", None, 512 * 2**20), ("0", None, 0)]
)
def test_spelled_with_a_unit(text, pct, nbytes):
    t = parse_tolerance(text)
    assert (t.percent, t.bytes) == (pct, nbytes)


def test_bare_fraction_is_refused_too():
    with pytest.raises(K3PlanError, match="no unit"):
        parse_tolerance("0.5")


def test_help_says_the_units(cli):
    out = " ".join(cli("check", "--help").stdout.replace("│", " ").split())
    assert "a percent of the recorded term ('1%')" in out and "a bare number other than 0 is refused" in out
