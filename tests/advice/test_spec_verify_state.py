"""The KDA state a speculative verify step moves, by engine (Stack.verify_state_slots), and vLLM's state pool
with speculative decoding: K3 on H200 4x8, TP 32, batch 8 at 32,768 tokens, 3 draft tokens (a verify step checks
4 tokens a sequence).

Hand arithmetic. K3's whole recurrent + conv state is 449,372,160 B a sequence, split by heads over TP 32:
14,042,880 B a device a slot (69 KDA layers, 203,520 B a layer). Before, the verify step was the decode roofline
at batch 8 x 4 with each token a sequence of its own: 32 slots read and 32 written, 898,744,320 B on SGLang.

- SGLang: the verify reads a request's state once and writes one intermediate state a token checked (4), then
  update_mamba_state_after_mtp_verify reads the accepted one back and writes it into the request's slot: 2 read,
  5 written a sequence a layer: 8 x 7 x 14,042,880 = 786,401,280 B.
- vLLM: the GDN verify kernel reads the accepted token's block and writes a block a token checked: 1 read,
  4 written. A state page is padded to the attention page: 64 x ceil(203,520 / (64 x 1,152)) = 192 tokens x
  1,152 B = 221,184 B a layer; a step reads 69 of them: 8 x 5 x 69 x 221,184 = 610,467,840 B. The pool holds
  1 + 3 blocks a request (MambaSpec.num_speculative_blocks), each of the 72 layer pages of vLLM's KDA groups:
  8 x 4 x 72 x 221,184 = 509,607,936 B a device (127,401,984 before, one block a request).
"""

from __future__ import annotations

import json

SLOT32 = 449_372_160 // 32  # 14,042,880 B: K3's state a sequence a device at TP 32
PAGE = 128 * -(-(SLOT32 // 69) // (128 * 576 * 2)) * 576 * 2  # 294,912 B: vLLM's state page, padded to a block
# aligned to 128 tokens (0.27.0 on: engines/vllm/releases.py hybrid_mla_align; 221,184 B at 64 before)
ARGS = ("fit", "-H", "nvidia-h200", "-t", "4x8", "--tp", "32", "--context", "32768", "--batch", "8",
        "--spec-tokens", "3", "--acceptance", "0.8", "--draft-bytes", "2GB", "--json")  # fmt: skip


def _fit(cli, stack: str) -> dict:
    res = cli(*ARGS, "--stack", stack)
    assert res.exit_code in (0, 3), res.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    return json.loads(res.stdout)


def test_sglang_verify_reads_two_slots_and_writes_one_a_token_plus_the_copy_back(cli):
    sd = _fit(cli, "sglang")["advice"]["spec_decode"]
    assert sd["verify_state_slots"] == [2, 5]
    assert sd["verify_state_bytes"] == 8 * (2 + 5) * SLOT32 == 786_401_280  # 898,744,320 before (8 x 4 x 2)
    assert "KDA state 2 slot(s) read and 5 written" in sd["pricing"]


def test_vllm_verify_reads_the_accepted_block_and_writes_one_a_token_and_the_pool_holds_one_a_draft(cli):
    d = _fit(cli, "vllm")
    sd = d["advice"]["spec_decode"]
    assert PAGE == 294_912
    assert sd["verify_state_slots"] == [1, 4]
    assert sd["verify_state_bytes"] == 8 * (1 + 4) * 69 * PAGE == 813_957_120  # 610,467,840 at 64-token alignment
    assert "refuses speculative decoding" in sd["pricing"]  # K3's KDA: an assumption, shown
    assert d["per_device"]["state_bytes_per_sequence"] == (1 + 3) * 72 * PAGE
    assert d["per_device"]["state_bytes"] == 8 * 4 * 72 * PAGE == 679_477_248  # 509,607,936 at 64-token alignment


def test_a_stack_without_a_verify_rule_prices_each_token_as_a_sequence_and_says_so(cli):
    sd = _fit(cli, "jax-native")["advice"]["spec_decode"]
    assert sd["verify_state_slots"] == [4, 4]
    assert "has no verify rule" in sd["pricing"]
