"""Bad input: one line on stderr, exit 2, no traceback, and jax never started."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "args, needle",
    [
        (["probe", "nope"], "unknown probe 'nope'"),
        (["probe", "a2a", "--bytes=-5"], "--bytes"),
        (["probe", "a2a", "--bytes", "0"], "--bytes"),
        (["probe", "a2a", "--mode", "sideways"], "--mode"),
        (["probe", "a2a", "--iters", "10,5"], "--iters"),
        (["probe", "a2a", "--timeout", "-1"], "--timeout"),
        (["probe", "a2a", "--distributed"], "--coordinator"),
        (
            ["probe", "a2a", "--distributed", "--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"],
            "HOST:PORT",
        ),
        (["probe", "a2a", "--dtype", "float128"], "--dtype"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, args, needle):
    result = cli(*args, "--no-write") if len(args) > 2 else cli(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.output
