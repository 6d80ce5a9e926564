"""Issue 36 point 1: fit's text output opens with the verdict (FITS / DOES NOT FIT, and why, in one
line), then the table, then the warnings; a thin-headroom warning reads as a fit with a thin margin,
not as a contradiction of the verdict."""

from __future__ import annotations


def _lines(r) -> list[str]:
    return [x for x in r.stdout.splitlines() if x.strip()]


def test_fits_verdict_is_the_first_line(cli):
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--context", "8192")
    assert r.exit_code == 0
    lines = _lines(r)
    assert lines[0].startswith("FITS: batch 1 x context 8,192 tokens, free ")
    assert "room for" in lines[0] and "sequence(s) at this context" in lines[0]
    table = next(i for i, x in enumerate(lines) if x.startswith("per device"))
    first_note = next(i for i, x in enumerate(lines) if x.startswith(("warning:", "note:")))
    assert 0 < table < first_note
    assert not any(x.strip() == "FITS" for x in lines[1:])  # said once, first


def test_thin_headroom_does_not_read_as_short(cli):
    """Was: "FITS", then "5.1 GiB short of leaving room for a real workload's KV peak"."""
    out = " ".join(cli("fit", "-t", "2x2x4", "--tp", "32", "--context", "8192").stdout.split())
    assert "short of leaving room" not in out
    assert "it fits, with thin headroom:" in out and "more free would leave room" in out


def test_does_not_fit_says_why_first(cli):
    r = cli("fit", "-t", "2x2x2", "--tp", "16")
    assert r.exit_code == 1
    first = _lines(r)[0]
    assert first.startswith("DOES NOT FIT: weights alone exceed usable HBM (")
    assert "GiB a device over usable HBM at batch 1 x context 131,072" in first
