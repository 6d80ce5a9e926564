"""fit, roofline and curve name the whole split in their titles, the pipeline included: at pp 2 the
title said "tp=8 ep=8 dp=1" (fit, curve: "tp=8") for a deployment whose numbers were pp 2's."""

import pytest

POINT = ("-H", "nvidia-b200", "-t", "2x8", "--tp", "8", "--pp", "2", "--stack", "vllm", "--context", "32768")


def _title(out: str) -> str:
    """The first line after fit's verdict line (issue 36: fit says FITS / DOES NOT FIT first)."""
    return next(x for x in out.splitlines() if not x.startswith(("FITS", "DOES NOT FIT")))


@pytest.mark.parametrize("command", ["fit", "roofline", "curve"])
def test_title_names_the_pipeline(cli, command):
    r = cli(command, *POINT)
    assert r.exit_code in ((0, 3) if command == "fit" else (0,)), r.output  # 3: fits on the analytic temp (issue 50)
    title = _title(r.stdout)
    assert "tp=8 ep=8 dp=1 pp=2" in title, title


def test_no_pipeline_no_pp(cli):
    r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--tp", "8", "--stack", "vllm", "--context", "32768")
    title = _title(r.stdout)
    assert "tp=8 ep=8 dp=1," in title and "pp=" not in title, title
