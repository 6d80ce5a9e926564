"""Issue 36 point 3: contexts and sizes as people write them (131072, 128k, 1M; k = 1,024 tokens, as
model cards count contexts), wherever a token count is taken; a bad one is one line, exit 2."""

from __future__ import annotations

import json

import pytest

from k3plan.tokencount import parse_tokens


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("131072", 131072),
        ("128k", 131072),
        ("128K", 131072),
        ("1M", 1048576),
        ("1m", 1048576),
        ("8_192", 8192),
        ("1.5k", 1536),
        ("0.5M", 524288),
        ("-5", -5),
    ],
)
def test_parse(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["12x", "1.1", "1.0001k", "", "k", "1e5", "128kb", "1 28k"])
def test_parse_refuses(text):
    with pytest.raises(ValueError):
        parse_tokens(text)


def test_fit_128k_is_131072(cli):
    a = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "--context", "128k", "--chunk", "8k", "--json").stdout)
    b = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "--context", "131072", "--json").stdout)
    assert a["workload"] == b["workload"] and a["workload"]["context_tokens"] == 131072


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "-H", "tpu-v7x", "--max-chips", "32", "--isl", "4k", "--osl", "1k", "--context", "32k"),
        ("curve", "-t", "2x2x4", "--tp", "32", "--chunks", "4k,8k", "--context", "64k"),
        ("roofline", "-t", "2x2x4", "--tp", "32", "--context", "1M"),
        (
            "curve",
            "-t",
            "2x4x4",
            "--tp",
            "32",
            "--context",
            "32k",
            "--turns",
            "2",
            "--user-tokens",
            "1k",
            "--answer-tokens",
            "2k",
        ),
    ],
)
def test_every_token_flag_takes_suffixes(cli, args):
    r = cli(*args, "--json")
    assert r.exit_code in (0, 1), r.output  # a verdict, not bad input
    json.loads(r.stdout)


@pytest.mark.parametrize(
    "args, flag",
    [
        (("fit", "--context", "12x"), "--context"),
        (("fit", "--chunk", "1.1"), "--chunk"),
        (("plan", "--isl", "4q", "--osl", "1k"), "--isl"),
        (("report", "--context", "128k,1x"), "--context"),
    ],
)
def test_bad_counts_are_one_line_exit_2(cli, args, flag):
    r = cli(*args)
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in r.output


def test_help_says_the_unit_rule(cli):
    out = " ".join(cli("fit", "--help").stdout.replace("│", " ").split())
    assert "k = 1,024 tokens, as model cards count contexts" in out
