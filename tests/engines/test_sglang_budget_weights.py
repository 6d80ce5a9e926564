"""Under fit --serve with an SGLang command, k3plan's budget and the engine's start check are one accounting of the
weights: what SGLang holds with the weights beside the model's own tensors -- the speculative draft's weights
(engines/sglang/spec.py draft_pricing), DeepSeek-V4's RoPE tables (engines/sglang/dsv4_buffers.py
sglang_dsv4_model_buffers, read in the sglang 0.5.15-0.5.23 wheels) and V4.1's wo_a dequantized to bf16 -- is computed
once (engines/sglang/memory.py sglang_loaded_extras), carried on the serve command's stack (Stack.extra_weights) into
the budget's weights as terms of their own, and the start check reads those weights (``engine.weights_bytes``, the
figure SGLang's "Load weight end ... mem usage" measures) rather than adding them a second time. The engine's figures
are unchanged by the move: the check read the same bytes before, the budget now holds them too."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.sglang.dsv4_buffers import sglang_dsv4_model_buffers
from k3plan.engines.sglang.releases import NEWEST_RELEASE
from k3plan.models.loader import load_model

FLASH = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8"
EAGLE = (
    " --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1"
    " --speculative-num-draft-tokens 4"
)


def _fit(cli, cmd: str) -> dict:
    r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", cmd, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("cmd", [FLASH, FLASH + EAGLE], ids=["plain", "eagle"])
def test_the_budget_weights_are_the_start_checks_to_the_byte(cli, cmd):
    out = _fit(cli, cmd)
    assert out["per_device"]["weights_bytes"] == out["engine"]["weights_bytes"]
    roles = out["weights_by_role"]
    # the RoPE tables as the check's own function gives them: V4-Flash's two classes of layers (compressed and
    # window-only), complex64 freqs_cis + float32 cos_sin_cache over 1,048,576 positions and 64 RoPE dims each
    d = load_model("deepseek-v4-flash").spec.dsv4
    target, own, _ = sglang_dsv4_model_buffers(
        d, release=NEWEST_RELEASE, vendor="nvidia", draft="EAGLE" if "EAGLE" in cmd else None
    )
    assert roles["rope_tables"] == target + own == 2**30  # the EAGLE draft's window-only layer shares the target's
    assert "RoPE tables" in out["provenance"]["weights"]
    if "EAGLE" in cmd:
        # the NextN draft, sharded as the target's (EP 8 experts, TP 8 attention, its own embed / head over 8)
        assert roles["draft_weights"] > 0 and "the speculative draft" in out["provenance"]["weights"]
    else:
        assert "draft_weights" not in roles


def test_the_check_is_unchanged_and_the_budget_holds_the_draft(cli):
    """The engine's figures read the same bytes as before the move (the plain command's weights are its EAGLE
    command's less the draft's), and the budget's weights differ by exactly the draft's term."""
    plain, eagle = _fit(cli, FLASH), _fit(cli, FLASH + EAGLE)
    draft = eagle["weights_by_role"]["draft_weights"]
    assert eagle["engine"]["weights_bytes"] - plain["engine"]["weights_bytes"] == draft
    assert eagle["per_device"]["weights_bytes"] - plain["per_device"]["weights_bytes"] == draft
