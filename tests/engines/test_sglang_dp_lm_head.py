"""SGLang's LM head under DP attention, as its model classes build it: ParallelLMHead(..., use_attn_tp_group=
enable_dp_lm_head) (sglang 0.5.15 / 0.5.23 wheels models/deepseek_v2.py, deepseek_v4.py; Kimi-K3's kimi_k3.py
KimiK3LinearForCausalLM at sgl-project/sglang@0000e9b4): vocab-split over the attention-TP group with
--enable-dp-lm-head, over the whole TP group (tp_size = attention TP x dp) without it, SGLang's default. The command
sets the split on the stack (Stack.lm_head_whole_tp), so the budget's weights, the engine's start check and the step
read one figure: on 8 H200 at --tp 8 --dp 8 (attention TP 1) the head is 1/8 a GPU without the flag, whole with it,
and the engine's pool moves by exactly the difference."""

from __future__ import annotations

import json
import math

import pytest

from k3plan.engines.sglang.serve import LM_HEAD_WHOLE_TP
from k3plan.models import load_model
from k3plan.setup import make_setup
from k3plan.step.ops import decode_ops, tp_edge_ops
from k3plan.step.weight_budget import runtime_bytes

DP = " --tp 8 --dp 8 --enable-dp-attention"
V3 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3" + DP
K3 = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3" + DP


def _fit(cli, cmd: str) -> dict:
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _head_bytes(model: str) -> int:
    """The LM head's bytes, whole, from its tensor's shape (bf16: 2 B a value)."""
    (head,) = [t for t in load_model(model).inventory.text if t.role == "lm_head"]
    assert head.fmt == "bf16"
    return math.prod(head.shape) * 2


@pytest.mark.parametrize(
    ("model", "cmd", "shape"),
    [("deepseek-v3", V3, (129_280, 7_168)), ("kimi-k3", K3, (163_840, 7_168))],
    ids=["deepseek-v3", "kimi-k3"],
)
def test_the_head_is_over_tp_x_dp_without_the_flag_and_over_attention_tp_with_it(cli, model, cmd, shape):
    whole = _head_bytes(model)
    assert whole == shape[0] * shape[1] * 2  # 1,853,358,080 B (V3), 2,348,810,240 B (K3)
    off, on = _fit(cli, cmd), _fit(cli, cmd + " --enable-dp-lm-head")
    assert off["parallel"]["tp"] == on["parallel"]["tp"] == 1 and off["parallel"]["dp"] == 8  # attention TP 1
    assert on["weights_by_role"]["lm_head"] == whole  # the attention-TP group of 1: whole on every GPU
    assert off["weights_by_role"]["lm_head"] == whole // 8  # tp_size 8: a vocabulary shard of 20,480 / 16,160 rows
    moved = whole - whole // 8
    # the budget's weights and the engine's start check read the same split
    assert on["per_device"]["weights_bytes"] - off["per_device"]["weights_bytes"] == moved
    assert on["engine"]["weights_bytes"] - off["engine"]["weights_bytes"] == moved
    assert any("lm_head: the vocabulary split over every device of a stage, tp 1 x dp 8" in n for n in off["notes"])
    assert not any("lm_head: the vocabulary" in n for n in on["notes"])


def test_deepseek_v3_s_pool_moves_by_exactly_the_head_s_difference(cli):
    off, on = _fit(cli, V3), _fit(cli, V3 + " --enable-dp-lm-head")
    whole = _head_bytes("deepseek-v3")
    assert off["engine"]["starts"] and on["engine"]["starts"]
    assert off["engine"]["kv_pool_bytes"] - on["engine"]["kv_pool_bytes"] == whole - whole // 8 == 1_621_688_320


def test_kimi_k3_does_not_start_on_8_h200_either_way_its_weights_message_moves_by_the_head(cli):
    off, on = _fit(cli, K3), _fit(cli, K3 + " --enable-dp-lm-head")
    assert not off["engine"]["starts"] and not on["engine"]["starts"]
    assert "CUDA out of memory while loading the weights" in off["engine"]["message"]
    assert on["engine"]["weights_bytes"] - off["engine"]["weights_bytes"] == 2_348_810_240 - 293_601_280


def test_the_step_runs_every_dp_group_s_rows_through_the_split_head_and_gathers_its_logits_over_tp_x_dp():
    """SGLang's LogitsProcessor under DP attention without the flag: the hidden states of every DP group gathered
    (dp_gather_replicate), each GPU's [dp x rows, vocab / (tp x dp)] logits, all-gathered over the whole TP group:
    the head's FLOPs a GPU are those of the attention-TP split, its bytes 1 / dp of them."""
    kw = dict(model="deepseek-v3", hardware="nvidia-h200", topology="8", tp=1, dp=8, stack="dp-attention")
    split, whole = make_setup(**kw, lm_head_whole_tp=LM_HEAD_WHOLE_TP), make_setup(**kw)
    assert split.stack.lm_head_whole_tp and not whole.stack.lm_head_whole_tp
    spec = split.model.spec
    (head,) = [t for t in split.model.inventory.text if t.role == "lm_head"]
    assert split.plan.specs[head.name].shards(split.mesh) == 8 and whole.plan.specs[head.name].shards(whole.mesh) == 1
    assert runtime_bytes(head, split.stack) == _head_bytes("deepseek-v3")

    def head_op(setup):
        ops = decode_ops(
            spec,
            weights=setup.weight_groups,
            kv_bytes_per_token=0,
            state_bytes_per_sequence=0,
            tp=1,
            seqs=4,
            ep_tokens=32,
            touched=8,
            context=1024,
        )
        (op,) = [o for o in ops if o.tensor is not None and o.tensor.role == "lm_head"]
        return op

    a, b = head_op(split), head_op(whole)
    assert a.flops == b.flops == 2 * 4 * head.params  # 4 rows a DP group x the whole head, or 32 rows x 1/8 of it
    assert a.tokens == 32 and b.tokens == 4
    assert a.bytes_read * 8 == b.bytes_read
    gather = dict(act=2, tp=1, dp=8, devices_per_chip=1, tokens=32, sequences=32, logits_all_gather=True)
    (old,) = [o for o in tp_edge_ops(spec, **gather) if o.name == "logits.gather"]
    (new,) = [o for o in tp_edge_ops(spec, **gather, logits_whole_tp=True) if o.name == "logits.gather"]
    assert old.calls == 0  # attention TP 1: no gather
    assert (new.calls, new.group) == (1, 8)
    assert new.message_bytes == 32 * (spec.vocab_size // 8) * 2  # every DP group's 4 rows x a GPU's vocabulary shard
    assert new.wire_bytes == 7 * new.message_bytes


def test_the_nextn_draft_s_head_follows_the_flag_as_the_target_s(cli):
    """deepseek_nextn.py builds the draft's shared_head.head as ParallelLMHead(..., use_attn_tp_group=
    enable_dp_lm_head) too (sglang 0.5.15 / 0.5.23 wheels): with the flag both heads are whole at attention TP 1."""
    cmd = V3.replace(" --dp 8", " --dp-size 8 --ep-size 8") + " --speculative-algorithm NEXTN"
    off, on = _fit(cli, cmd), _fit(cli, cmd + " --enable-dp-lm-head")
    whole = _head_bytes("deepseek-v3")
    (draft_head,) = [t for t in load_model("deepseek-v3").inventory.of_kind("mtp") if "shared_head.head" in t.name]
    assert draft_head.nbytes == whole
    assert on["engine"]["weights_bytes"] - off["engine"]["weights_bytes"] == 2 * (whole - whole // 8)


def _parse(cmd: str):
    from k3plan.engines.serve import parse_serve

    return parse_serve(cmd, platform="gpu", device_gib=139.8, device_name="nvidia-h200")


def test_kimi_linear_s_head_is_over_the_whole_tp_group_with_the_flag_too_and_dp_1_sets_nothing():
    """kimi_linear.py's KimiLinearForCausalLM passes no use_attn_tp_group (sglang 0.5.15 / 0.5.23 wheels): its head is
    over the whole TP group whatever the flag says, and its embedding too (a caveat: k3plan holds that over the
    attention-TP group). At dp 1 the whole TP group is the attention-TP group: nothing is set."""
    linear = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-Linear-48B-A3B-Instruct" + DP
    for cmd in (linear, linear + " --enable-dp-lm-head"):
        q = _parse(cmd)
        assert q.lm_head_whole_tp is not None and "Kimi-Linear" in q.lm_head_whole_tp.holds
        assert any("Kimi-Linear's embedding over the whole TP group" in c for c in q.caveats)
    at_dp1 = _parse(V3.replace(" --tp 8 --dp 8", " --tp 8"))
    assert at_dp1.lm_head_whole_tp is None and not any("LM head" in c for c in at_dp1.caveats)
