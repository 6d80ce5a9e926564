"""Issue 49's done-when: fit, plan, roofline and report answer for DeepSeek-V4.1-Flash on v7x, B200 and H200,
with its Engram tables in HBM and offloaded (--engram hbm|host): an exit of 0, 1 or 3 and no traceback, each
answer saying where the tables are; and what a device holds of them is the same figure in fit and in plan's row.

The table bytes are the bundled safetensors index's (tests/models/test_deepseek_v41.py holds them exact).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app

MODEL = "deepseek-v4.1-flash"
HARDWARE = ("tpu-v7x", "nvidia-b200", "nvidia-h200")
PLACEMENTS = ("hbm", "host")
WHERE = {"hbm": "in HBM, rows split over the TP group", "host": "in host memory"}


def run(*args: str):
    return CliRunner().invoke(app, [*args])


def flat(out) -> str:
    return " ".join(out.output.split())


def answered(out) -> None:
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output
    assert out.exit_code in (0, 1, 3), out.output


@pytest.mark.parametrize("engram", PLACEMENTS)
@pytest.mark.parametrize("hw", HARDWARE)
def test_fit_answers(hw, engram):
    out = run("fit", "-m", MODEL, "-H", hw, "--engram", engram)
    answered(out)
    assert f"Engram tables 202,758,032,400 B {WHERE[engram]}" in flat(out)


@pytest.mark.parametrize("engram", PLACEMENTS)
@pytest.mark.parametrize("hw", HARDWARE)
def test_roofline_answers(hw, engram):
    out = run("roofline", "-m", MODEL, "-H", hw, "--engram", engram, "--verbose")
    answered(out)
    if out.exit_code == 0:
        assert ("Engram in HBM" if engram == "hbm" else "Engram in host memory: decode at") in flat(out)


@pytest.mark.parametrize("engram", PLACEMENTS)
@pytest.mark.parametrize("hw", HARDWARE)
def test_plan_answers_and_its_row_is_fit(hw, engram):
    out = run("plan", "-m", MODEL, "-H", hw, "--engram", engram, "--max-chips", "8", "--top", "1", "--json")
    answered(out)
    rows = json.loads(out.stdout)["ranked"]
    assert rows, out.stdout  # 8 chips hold it either way on these three
    r = rows[0]
    assert r["engram"] == engram
    fit = run(
        "fit",
        "-m",
        MODEL,
        "-H",
        r["hardware"],
        "-t",
        r["topology"],
        "--tp",
        str(r["tp"]),
        "--ep",
        str(r["ep"]),
        "--dp",
        str(r["dp"]),
        "--stack",
        r["stack"],
        "--engram",
        engram,
        "--json",
    )
    answered(fit)
    f = json.loads(fit.stdout)
    # the weights a device, Engram's share included, are one figure in plan's row and in fit
    assert r["per_device"]["weights_bytes"] == f["per_device"]["weights_bytes"]


def test_placements_differ_by_the_tables_share():
    """In HBM a device holds its TP share of the tables on top of the projections; offloaded, the projections."""
    at = {}
    for engram in PLACEMENTS:
        out = run("fit", "-m", MODEL, "-H", "nvidia-b200", "-t", "8", "--tp", "8", "--engram", engram, "--json")
        answered(out)
        at[engram] = json.loads(out.stdout)["per_device"]["weights_bytes"]
    assert at["hbm"] - at["host"] == -(-202_758_032_400 // 8)


@pytest.mark.parametrize("engram", PLACEMENTS)
def test_report_answers(tmp_path, engram):
    out = run(
        "report",
        "-m",
        MODEL,
        "-H",
        ",".join(HARDWARE),
        "-c",
        "131072",
        "--engram",
        engram,
        "--out",
        str(tmp_path / "r.md"),
    )
    answered(out)
    text = " ".join((tmp_path / "r.md").read_text().split())
    assert f"Engram tables 202,758,032,400 B {WHERE[engram]}" in text


def test_engram_flag_is_checked():
    bad = run("fit", "-m", MODEL, "-H", "nvidia-b200", "--engram", "disk")
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "--engram" in bad.output
    k3 = run("plan", "-H", "nvidia-b200", "--engram", "host")
    assert k3.exit_code == 2 and "has no Engram tables" in k3.output


def test_a_row_away_from_the_engine_s_placement_says_the_launch_line_does_not_set_it():
    vllm = ("--stacks", "vllm", "--max-chips", "8", "--top", "1", "--json")
    out = run("plan", "-m", MODEL, "-H", "nvidia-b200", "--engram", "hbm", *vllm)
    notes = json.loads(out.stdout)["ranked"][0]["layout_notes"]
    assert any("not stack vllm's default (host" in n and "the launch line does not" in n for n in notes), notes
    same = run("plan", "-m", MODEL, "-H", "nvidia-b200", "--engram", "host", *vllm)
    assert not any("Engram" in n for n in json.loads(same.stdout)["ranked"][0]["layout_notes"])


SGLANG = (
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 8 --context-length 131072 "
    "--trust-remote-code"
)


def test_fit_serve_reads_sglang_s_engram_placement():
    """SGLang's Engram placement: the tables in HBM over the TP group by default; in host memory under
    SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 (the sglang 0.5.21-0.5.23 wheels, layers/engram.py: engines/sglang/serve.py
    engram_host_env). The --engram-config placement of docs.sglang.io advanced_features/engram is registered by no
    sglang wheel read, 0.4.0-0.5.23 (engines/sglang/server_flags.py): 0.5.23's argparse stops at it, refused in one
    line naming the flag and the release."""
    at = {}
    for where, env in (("hbm", ""), ("host", "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 ")):
        out = run("fit", "-H", "nvidia-b200", "-t", "8", "--serve", env + SGLANG, "--json")
        answered(out)
        d = json.loads(out.stdout)
        assert any(f"Engram tables 202,758,032,400 B {WHERE[where]}" in w for w in d["warnings"])
        at[where] = d["per_device"]["weights_bytes"]
    assert at["hbm"] - at["host"] == -(-202_758_032_400 // 8)
    bad = run("fit", "-H", "nvidia-b200", "-t", "8", "--serve", "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT=ssd " + SGLANG)
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1
    flag = run("fit", "-H", "nvidia-b200", "-t", "8", "--serve", SGLANG + ' --engram-config \'{"placement": "cpu"}\'')
    assert flag.exit_code == 2 and len(flag.output.strip().splitlines()) == 1
    assert "--engram-config: sglang 0.5.23's parser has no such option" in flag.output
