"""An adversarial new-user pass over the CLI (the qa brief): each finding a named regression test that
failed before its fix. Bad input gives exit 2 and one line naming the argument and what was expected."""

from __future__ import annotations

import pytest
from k3_testing import one_error_line


@pytest.mark.parametrize("command", ["fit", "roofline", "curve"])
def test_pp_zero_is_bad_input_not_pp_one(cli, command):
    """Was: `--pp 0` read as `--pp 1` (`pp or 1`): the command answered for an unpipelined split, exit 0."""
    line = one_error_line(cli(command, "-t", "2x2x4", "--tp", "32", "--pp", "0"))
    assert "--pp 0" in line and "expected a positive integer" in line
