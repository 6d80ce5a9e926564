"""DeepSeek-V4.1's DSpark drafts through the speculative-decoding accounting (issue 49 item 2): per step, per
drafted and per accepted token, with the drafter's blocks drafting a block of positions a forward.

From the bundled config.json: num_nextn_predict_layers 3 (the DSpark blocks), dspark_block_size 5 (draft positions
a forward), sliding_window 128, head_dim 512. The blocks' cache as vLLM lays it out: one uncompressed BF16 KV plane,
one head, the target window's geometry (vllm-project/vllm-ascend vllm_ascend/core/deepseek_v41.py @0dcdd80d
DeepseekV41DraftSWASpec): 3 x 128 x 512 x 2 B = 393,216 B a sequence.
"""

from __future__ import annotations

import json

import pytest

from k3plan.models import load_model
from k3plan.workload.draft import draft_head
from k3plan.workload.specdecode import parse_spec_decode, spec_decode_speed


@pytest.fixture(scope="module")
def head():
    return draft_head(load_model("deepseek-v4.1-flash"), kv_dtype="bf16")


def test_dspark_head_from_the_config(head):
    assert head.drafter == "dspark" and head.mtp_layers == 3 and head.positions_per_pass == 5
    assert head.window_bytes_per_sequence == 3 * 128 * 512 * 2 == 393_216
    assert head.kv_bytes_per_token == 0  # a window a sequence, not a latent a token
    assert [head.forwards(k) for k in (1, 5, 6, 10, 11)] == [1, 1, 2, 2, 3]


def test_an_mtp_head_drafts_one_position_a_forward():
    v3 = draft_head(load_model("deepseek-v3"), kv_dtype="bf16")
    assert v3.drafter == "mtp" and v3.forwards(3) == 3


def test_per_step_per_drafted_per_accepted():
    spec = parse_spec_decode(spec_tokens=5, acceptance="0.8")
    mtp = spec_decode_speed(spec=spec, batch=4, verify_step_s=0.004, draft_s_per_token=0.001)
    ds = spec_decode_speed(spec=spec, batch=4, verify_step_s=0.004, draft_s_per_token=0.001, draft_forwards=1)
    assert (mtp.draft_forwards_per_step, ds.draft_forwards_per_step) == (5, 1)
    assert mtp.draft_s == pytest.approx(0.005) and ds.draft_s == pytest.approx(0.001)
    for s in (mtp, ds):  # the token counts a step do not depend on how the drafts were made
        assert s.drafted_tokens_per_step == 20 and s.forward_tokens_per_step == 24
        assert s.accepted_tokens_per_step == pytest.approx(4 * spec.expected_accepted_tokens)
        assert s.emitted_tokens_per_step == pytest.approx(4 * (spec.expected_accepted_tokens + 1))
        assert s.accepted_tokens_per_s == pytest.approx(s.accepted_tokens_per_step / s.step_s)
    assert ds.s_per_emitted_token < mtp.s_per_emitted_token


def test_fit_prices_one_draft_forward_for_five_positions(cli):
    out = cli(
        "fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-b200", "-t", "4", "--spec-tokens", "5",
        "--acceptance", "0.8", "--json",
    )  # fmt: skip
    assert out.exit_code in (0, 3), out.output
    sd = json.loads(out.stdout)["advice"]["spec_decode"]
    text = " ".join(cli("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-b200", "-t", "4", "--spec-tokens", "5",
                        "--acceptance", "0.8").output.split())  # fmt: skip
    assert "DSpark drafter" in text and "393,216 B a sequence" in text
    assert "1 draft forward(s) for 5 drafted position(s)" in text
    assert sd["speed"]["draft_forwards_per_step"] == 1 and sd["speed"]["drafted_tokens_per_step"] == 5
