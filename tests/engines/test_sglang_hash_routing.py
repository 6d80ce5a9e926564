"""SGLang's DeepSeek-V4 hash-routing table, read in the sglang 0.5.12-0.5.23 wheels (PyPI):
layers/moe/hash_topk.py ``HashTopK.__init__`` allocates ``tid2eid = nn.Parameter(torch.empty(vocab_size, topk,
dtype=torch.int32))`` (0.5.12-0.5.22: ``topk - num_fused_shared_experts`` columns with ``topk = num_experts_per_tok +
num_fused_shared_experts``; 0.5.23: ``num_experts_per_tok``: the same shape), built by models/deepseek_v2.py
``DeepseekV2MoE.__init__`` with ``vocab_size=config.vocab_size`` for ``layer_id < num_hash_layers`` (never the V4 NextN
layer); models/deepseek_v4.py ``load_weights`` renames ``gate.tid2eid`` to ``topk.tid2eid`` and
``default_weight_loader`` copies the checkpoint's int64 rows into the int32 parameter. No TP split, under DP attention
neither: the whole [vocab, top_k] int32 table on every GPU (engines/sglang/stack.yaml and engines/dp_attention/
stack.yaml runtime_formats ``router@i64`` and sharding ``role:router``)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.stack import parse_stack
from k3plan.models.loader import load_model
from k3plan.sharding import make_mesh, resolve
from k3plan.step.weight_budget import runtime_bytes
from tests.k3_testing import bundled_raw

MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")


def _table_bytes(model: str) -> int:
    """One layer's table as SGLang holds it, from the bundled config.json: vocab_size x num_experts_per_tok int32."""
    c = bundled_raw(model)
    return c["vocab_size"] * c["num_experts_per_tok"] * 4


@pytest.mark.parametrize("stack", ["sglang", "dp-attention"])
@pytest.mark.parametrize("model", MODELS)
def test_tid2eid_is_int32_and_whole_on_every_gpu(stack, model):
    st = parse_stack(stack).with_defaults()
    inv = load_model(model).inventory
    tables = [t for t in inv.text if t.name.endswith("gate.tid2eid")]
    assert len(tables) == bundled_raw(model)["num_hash_layers"] == 3
    mesh, _ = make_mesh(devices=8, tp=8, ep=8)
    plan = resolve(inv, mesh=mesh, rules=st.sharding.rules, role_overrides=st.sharding.role_overrides, source="test")
    for t in tables:
        assert t.fmt == "i64"  # the checkpoint's
        assert runtime_bytes(t, st) == _table_bytes(model)  # SGLang's int32
        assert plan.specs[t.name].shards(plan.mesh) == 1  # whole on every GPU
    # the router's other tensors keep their rules: the gate bf16, replicated as before
    gate = next(t for t in inv.text if t.name.endswith("layers.0.ffn.gate.weight"))
    assert runtime_bytes(gate, st) == gate.nbytes


def test_fit_prices_the_router_role_with_the_whole_int32_tables(cli):
    """The router role a GPU at TP 4 and TP 8 is the same figure (every router tensor whole), and the three tables
    are 3 x vocab x top_k x 4 B of it."""
    cmd = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp {tp}"
    roles = {}
    for tp in (4, 8):
        r = cli(
            "fit", "-H", "nvidia-h200", "-t", tp, "--serve", cmd.format(tp=tp), "--engine-version", "0.5.15", "--json"
        )
        assert r.exit_code in (0, 1), r.output
        roles[tp] = json.loads(r.stdout)["weights_by_role"]["router"]
    assert roles[4] == roles[8]
    inv = load_model("deepseek-v4-flash").inventory
    others = sum(t.nbytes for t in inv.text if t.role == "router" and not t.name.endswith("tid2eid"))
    assert roles[8] == others + 3 * _table_bytes("deepseek-v4-flash")
