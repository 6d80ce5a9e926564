"""The speculative-decoding draft's KV cache in the budget (issue 14): given for an external draft
(--draft-kv-bytes-per-token, said to be given), derived for an MTP head (DeepSeek-V3); K3 has no
MTP head. Expected numbers by hand in each test."""

from __future__ import annotations

import json

import pytest
from k3_testing import one_error_line

from k3plan.step.memory import BudgetTerms
from k3plan.workload.draft import DraftKv, add_draft_kv, given_draft_kv

SPEC = ("--spec-tokens", "3", "--acceptance", "0.8")


@pytest.fixture(scope="module")
def cli_m():
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def _json(cli, *args, code=0):
    r = cli(*args, "--json")
    assert r.exit_code == code or (code == 0 and r.exit_code == 3), r.output  # 3: the analytic temp (issue 50)
    return json.loads(r.stdout)


def test_add_draft_kv_by_hand():
    kv = DraftKv(bytes_per_token_per_device=10, given=True, source="test")
    # 3 sequences a device of 100 tokens: 1,000 B a sequence of draft KV, 3,000 B in all
    terms = BudgetTerms(
        weights_bytes=50000,
        reserve_bytes=4000,
        sequences=3,
        kv_bytes=6000,
        state_bytes=1500,
        free_bytes=20000,
        room_bytes=30000,
        sequence_bytes=2500,
        max_sequences=24,
        kv_bytes_per_token=20,
        state_bytes_per_sequence=500,
    )
    out = add_draft_kv(terms, kv=kv, context_tokens=100, block_tokens=1, split_across_dp=True, dp=2)
    assert isinstance(out, BudgetTerms)
    assert out.kv_bytes == 6000 + 3000 and out.free_bytes == 20000 - 3000
    assert out.sequence_bytes == 3500 and out.kv_bytes_per_token == 30
    assert out.max_sequences == (30000 // 3500) * 2  # 8 a DP group x 2 groups = 16
    # what the draft does not touch stays as it was
    assert (out.state_bytes, out.room_bytes, out.sequences, out.reserve_bytes) == (1500, 30000, 3, 4000)


def test_given_draft_kv_is_split_over_tp_rounding_up_and_says_given():
    kv = given_draft_kv(100, tp=32)
    assert kv.bytes_per_token_per_device == 4  # ceil(100 / 32)
    assert kv.given and kv.source.startswith("given, not derived")


def test_external_draft_kv_enters_fit_for_every_sequence(cli_m):
    cfg = ("fit", "-t", "2x4x4", "--tp", "32", "--batch", "8")
    no_kv = _json(cli_m, *cfg, *SPEC, "--draft-bytes", "30GB")
    d = _json(cli_m, *cfg, *SPEC, "--draft-bytes", "30GB", "--draft-kv-bytes-per-token", "131072")
    pd, base = d["per_device"], no_kv["per_device"]
    # 131,072 B a token (whole draft) over tp 32 = 4,096 B a token a device; 2x4x4 vllm-tpu: dp 2,
    # so 8 / 2 = 4 sequences a device, each 131,072 tokens
    assert d["parallel"]["dp"] == 2 and pd["sequences"] == 4
    draft_kv = 4 * 131072 * 4096  # 2 GiB
    assert pd["kv_bytes"] - base["kv_bytes"] == draft_kv
    assert base["free_bytes"] - pd["free_bytes"] == draft_kv
    assert pd["kv_bytes_per_token"] == base["kv_bytes_per_token"] + 4096
    # sequences the room holds: room / (a sequence's KV + state, the draft's included) x 2 DP groups
    room = pd["free_bytes"] + pd["kv_bytes"] + pd["state_bytes"]
    assert d["capacity"]["max_sequences"] == room // ((pd["kv_bytes"] + pd["state_bytes"]) // 4) * 2
    assert "given, not derived" in d["provenance"]["kv"]
    assert d["advice"]["spec_decode"]["draft_kv"]["given"] is True
    # without the figure the output says the draft's KV is not in the budget
    assert "NOT in the budget" in no_kv["advice"]["spec_decode"]["draft"]
    assert no_kv["advice"]["spec_decode"]["draft_kv"] is None
    text = cli_m(*cfg, *SPEC, "--draft-bytes", "30GB", "--draft-kv-bytes-per-token", "131072").stdout
    assert "draft KV: 4,096 B a token a device" in text and "given, not derived" in text


def test_draft_kv_stays_in_the_alternatives_budget(cli_m):
    # 2x2x4 tp 32 fails at 128K: the next topology up (2x4x4, the stack's tp 32 dp 2) carries the draft KV too
    spec = ("--batch", "8", *SPEC, "--draft-bytes", "32GB", "--draft-kv-bytes-per-token", "131072")
    d = _json(cli_m, "fit", "-t", "2x2x4", "--tp", "32", *spec, code=1)
    topo = next(s for s in d["advice"]["rules"]["suggestions"] if s["action"] == "topology")
    big = _json(cli_m, "fit", "-t", "2x4x4", "--tp", "32", "--dp", "2", *spec)
    assert topo["free_bytes_after"] == big["per_device"]["free_bytes"]
    plain = _json(cli_m, "fit", "-t", "2x4x4", "--tp", "32", "--dp", "2", "--batch", "8")
    # weights 32 GB / 32 and KV 4 sequences x 131,072 tokens x 4,096 B less free than with no draft
    assert big["per_device"]["free_bytes"] == plain["per_device"]["free_bytes"] - 32 * 10**9 // 32 - 4 * 131072 * 4096


def test_deepseek_v3_mtp_head_kv_is_derived(cli_m):
    args = ("fit", "-m", "deepseek-v3", "-t", "2x2x4", "--context", "32768")
    base = _json(cli_m, *args)
    d = _json(cli_m, *args, "--spec-tokens", "1", "--acceptance", "0.8")
    # one MTP layer with MLA laid out like the target's: tpu-inference's 512 + 128 = 640 values x 2 B (bf16), the whole
    # latent on every TP rank (vllm-tpu)
    assert d["per_device"]["kv_bytes"] - base["per_device"]["kv_bytes"] == 1 * 32768 * 640 * 2
    kv = d["advice"]["spec_decode"]["draft_kv"]
    assert kv["given"] is False and kv["source"].startswith("derived: ") and kv["bytes_per_token_per_device"] == 1280


def test_k3_has_no_mtp_head_so_no_derived_draft_kv():
    from k3plan.advice.wiring import draft_kv_for
    from k3plan.setup import make_setup

    setup = make_setup(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32)
    assert draft_kv_for(setup, external=False, given_bytes_per_token=None) is None  # num_nextn_predict_layers 0


@pytest.mark.parametrize("command", ["fit", "roofline"])
def test_draft_kv_flag_errors(cli_m, command):
    line = one_error_line(cli_m(command, "-t", "2x4x4", "--tp", "32", "--draft-kv-bytes-per-token", "100"))
    assert "--draft-kv-bytes-per-token: only with --spec-tokens" in line
    line = one_error_line(
        cli_m(command, "-t", "2x4x4", "--tp", "32", *SPEC, "--draft-bytes", "1GB", "--draft-kv-bytes-per-token", "-5")
    )
    assert "--draft-kv-bytes-per-token -5" in line


def test_drafting_reads_the_draft_weights_and_its_kv_each_drafted_position(cli_m):
    cfg = ("roofline", "-t", "2x4x4", "--tp", "32", "--batch", "8", "--context", "32768", *SPEC)
    d = _json(cli_m, *cfg, "--draft-bytes", "30GB", "--draft-kv-bytes-per-token", "131072")
    sd = d["spec_decode"]
    # hardware_specs/tpu-v7x.yaml: 3.69 TB/s a device (7.38 a chip, halved); roofline default 100% of it.
    # weights 30e9 / 32 = 937,500,000 B; KV 4 sequences a device (batch 8 over dp 2) x 32,768 x 4,096 B
    weights, kv = 30 * 10**9 // 32, 4 * 32768 * 4096
    assert abs(sd["draft_s_per_token"] - (weights + kv) / 3.69e12) < 1e-15
    assert f"+ its KV {kv:,} B (4 sequence(s) x 32,768 tokens x 4,096 B)" in sd["pricing"]
    no_kv = _json(cli_m, *cfg, "--draft-bytes", "30GB")["spec_decode"]
    assert abs(no_kv["draft_s_per_token"] - weights / 3.69e12) < 1e-15
