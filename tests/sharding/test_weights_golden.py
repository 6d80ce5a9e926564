"""Per-device weight bytes of a seven-tensor model, worked out by hand below, against both readers of
the one rule replay and byte sum: fit's (``spec_from_rules`` / ``weight_budget``, one Mesh, ints) and
plan's (``class_shards`` / ``mesh_weights``, numpy columns of meshes). Neither side is checked
against the other: each against the arithmetic written here.

The model (hidden 64, 12 heads x head_dim 16, vocabulary 1,024, 16 routed experts of width 32; all
bf16, 2 bytes an element; the stack keeps checkpoint formats):

    tensor        role    shape          logical axes             whole bytes
    embed         embed   (1024, 64)     vocab, hidden            1024*64*2    = 131,072
    q_b_proj      attn    (192, 32)      heads x head_dim, q_lora  192*32*2    =  12,288
    o_proj        attn    (64, 192)      hidden, heads x head_dim   64*192*2   =  24,576
    kv_a_proj     attn    (40, 64)       kv_lora, hidden            40*64*2    =   5,120
    experts x 2   expert  (16, 32, 64)   expert, mlp, hidden   2 x 16*32*64*2  = 131,072
    router        router  (16, 64)       expert, hidden             16*64*2    =   2,048
    norm          norm    (64,)          hidden                     64*2       =     128
                                                                    total        306,304

Rules (vLLM's, cut down): vocab, heads, mlp -> tp; expert -> ep; q_lora, kv_lora -> none; the
router's expert axis -> none (replicated).
"""

from __future__ import annotations

import numpy as np
import pytest

from k3plan.engines.stack import load_stack, updated
from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.sharding import make_mesh, resolve
from k3plan.sharding.resolve import rules_for, spec_from_rules
from k3plan.step.weight_budget import weight_budget
from k3plan.step.weights import class_shards, mesh_weights, tensor_classes

RULES = {"vocab": "tp", "heads": "tp", "mlp": "tp", "expert": "ep", "q_lora": None, "kv_lora": None}
OVERRIDES = {"router": {"expert": None}}


def tensor(name, shape, logical, axes, role, kind="mla"):
    return Tensor.checked(name=name, shape=shape, logical_shape=logical, axes=axes, fmt="bf16", kind=kind, role=role)


INV = TensorInventory.of(
    (
        tensor("embed", (1024, 64), (1024, 64), ("vocab", "hidden"), "embed", "global"),
        tensor("q_b_proj", (192, 32), (12, 16, 32), ("heads", "head_dim", "q_lora"), "attn"),
        tensor("o_proj", (64, 192), (64, 12, 16), ("hidden", "heads", "head_dim"), "attn"),
        tensor("kv_a_proj", (40, 64), (40, 64), ("kv_lora", "hidden"), "attn"),
        tensor("l0.experts", (16, 32, 64), (16, 32, 64), ("expert", "mlp", "hidden"), "expert", "moe"),
        tensor("l1.experts", (16, 32, 64), (16, 32, 64), ("expert", "mlp", "hidden"), "expert", "moe"),
        tensor("router", (16, 64), (16, 64), ("expert", "hidden"), "router", "moe"),
        tensor("norm", (64,), (64,), ("hidden",), "norm", "global"),
    )
)
WHOLE = 131_072 + 12_288 + 24_576 + 5_120 + 131_072 + 2_048 + 128  # 306,304


def stack():
    base = load_stack("vllm-tpu")  # runtime formats: checkpoint (bf16 stays 2 bytes)
    sharding = updated(base.sharding, rules=RULES, role_overrides=OVERRIDES, cite={})
    return updated(base, sharding=sharding)


NAMES = ("embed", "q_b_proj", "o_proj", "kv_a_proj", "l0.experts", "l1.experts", "router", "norm")


def case(per_tensor, replicated, fallbacks=()):
    """Bytes a device of each tensor, in NAMES' order."""
    return dict(per_tensor=dict(zip(NAMES, per_tensor, strict=True)), replicated=replicated, fallbacks=list(fallbacks))


# Per device, by hand. (tp, dp, ep) -> {tensor: bytes a device}, replicated bytes, fallbacks
CASES = {
    # A: tp 4 x dp 2, experts over all 8 devices (ep_all). vocab 1024/4, 12 heads/4 = 3 a device,
    # kv_lora no rule (whole), 16 experts/8 (mlp wants tp, which the expert dim took: whole, no
    # fallback), router override (whole), norm no rule (whole).
    (4, 2, 8): case(
        (131_072 // 4, 12_288 // 4, 24_576 // 4, 5_120, 65_536 // 8, 65_536 // 8, 2_048, 128),
        replicated=5_120 + 2_048 + 128,  # 7,296
    ),
    # B: tp 8 x dp 1, experts over the 8 devices. 12 heads do not divide over 8: q_b_proj and o_proj
    # fall back to whole copies; their extra bytes = whole - whole / 8.
    (8, 1, 8): case(
        (131_072 // 8, 12_288, 24_576, 5_120, 65_536 // 8, 65_536 // 8, 2_048, 128),
        replicated=12_288 + 24_576 + 5_120 + 2_048 + 128,  # 44,160
        fallbacks=[("q_b_proj", 0, 12_288 - 12_288 // 8), ("o_proj", 1, 24_576 - 24_576 // 8)],  # 10,752, 21,504
    ),
    # C: tp 4 x dp 2, experts over the TP group only (ep = 4): 16 experts / 4; the rest as A.
    (4, 2, 4): case((32_768, 3_072, 6_144, 5_120, 65_536 // 4, 65_536 // 4, 2_048, 128), replicated=7_296),
    # D: one device holds the whole model: nothing is cut, and nothing counts as replicated (there is
    # no second device to hold a copy)
    (1, 1, 1): case((131_072, 12_288, 24_576, 5_120, 65_536, 65_536, 2_048, 128), replicated=0),
}
TOTALS = {(4, 2, 8): 65_664, (8, 1, 8): 76_928, (4, 2, 4): 82_048, (1, 1, 1): WHOLE}  # per_tensor's sums, by hand


@pytest.mark.parametrize("split", list(CASES))
def test_weight_budget_at_one_mesh_is_the_hand_arithmetic(split):
    tp, dp, ep = split
    want = CASES[split]
    assert sum(want["per_tensor"].values()) == TOTALS[split]
    mesh, _ = make_mesh(devices=tp * dp, tp=tp, dp=dp, ep=ep)
    plan = resolve(INV, mesh=mesh, rules=RULES, role_overrides=OVERRIDES, source="test")
    wb = weight_budget(inventory=INV, plan=plan, stack=stack())
    assert wb.runtime_weight_bytes == WHOLE
    assert wb.weights_bytes == TOTALS[split]
    assert wb.replicated_weights_bytes == want["replicated"]
    pt = want["per_tensor"]
    assert [(r.role, r.bytes) for r in wb.by_role] == [
        ("embed", pt["embed"]),
        ("attn", pt["q_b_proj"] + pt["o_proj"] + pt["kv_a_proj"]),
        ("expert", pt["l0.experts"] + pt["l1.experts"]),
        ("router", pt["router"]),
        ("norm", pt["norm"]),
    ]
    got = [(f.tensor, f.dim, f.bytes_replicated) for f in wb.fallbacks]
    assert got == want["fallbacks"]
    for f in wb.fallbacks:
        assert (f.axis, f.size, f.mesh_axis, f.mesh_size) == ("heads", 12, "tp", 8)


def test_mesh_weights_over_columns_is_the_hand_arithmetic():
    splits = list(CASES)
    tp = np.array([s[0] for s in splits])
    dp = np.array([s[1] for s in splits])
    ep_all = np.array([s[2] == s[0] * s[1] for s in splits])  # A and B: experts over every device
    assert ep_all.tolist() == [True, True, False, True]
    classes = tensor_classes(INV)
    assert sum(c.count for c in classes) == 8 and len(classes) == 7  # the two expert tensors: one class
    mw = mesh_weights(classes=classes, stack=stack(), tp=tp, dp=dp, ep_all=ep_all)
    assert mw.weights_bytes.tolist() == [TOTALS[s] for s in splits]
    assert mw.replicated_bytes.tolist() == [CASES[s]["replicated"] for s in splits]
    assert mw.fallbacks.tolist() == [0, 2, 0, 0]
    assert {k: v.tolist() for k, v in mw.fallback_kinds.items()} == {"heads=12 over tp": [False, True, False, False]}
    # what a decode step streams: everything but the embedding table, split dense / routed experts
    dense = [
        sum(b for n, b in CASES[s]["per_tensor"].items() if n not in ("embed", "l0.experts", "l1.experts"))
        for s in splits
    ]
    assert dense == [16_512, 12_288 + 24_576 + 5_120 + 2_048 + 128, 16_512, 44_160]  # A: 3,072 + 6,144 + 7,296
    assert mw.dense_bytes.tolist() == dense
    assert mw.expert_bytes.tolist() == [16_384, 16_384, 32_768, 131_072]
    # params = bytes / 2 (bf16)
    assert mw.dense_params.tolist() == [d / 2 for d in dense]
    assert mw.expert_params.tolist() == [8_192, 8_192, 16_384, 65_536]


def test_the_first_logical_axis_with_a_rule_decides_and_a_mesh_axis_cuts_one_dim():
    """Rules expert -> ep, mlp -> tp, hidden -> dp on the expert tensor (16, 32, 64). ep over the TP
    group: expert takes tp (16/4), mlp finds tp taken (whole, no fallback), hidden takes dp (64/2):
    8 shards. ep over every device: expert takes dp and tp (16/8), hidden finds dp taken: 8 shards."""
    t = INV.text[4]
    rules = {"expert": "ep", "mlp": "tp", "hidden": "dp"}
    m_tp, _ = make_mesh(devices=8, tp=4, dp=2, ep=4)
    m_all, _ = make_mesh(devices=8, tp=4, dp=2, ep=8)
    spec, fb = spec_from_rules(t, rules, m_tp)
    assert (spec.partition, fb, spec.shards(m_tp)) == ((("tp",), None, ("dp",)), [], 8)
    spec, fb = spec_from_rules(t, rules, m_all)
    assert (spec.partition, fb, spec.shards(m_all)) == ((("dp", "tp"), None, None), [], 8)
    shards, fallbacks, _ = class_shards(
        tensor=t, rules=rules, tp=np.array([4, 4]), dp=np.array([2, 2]), ep_all=np.array([False, True])
    )
    assert shards.tolist() == [8, 8] and fallbacks.tolist() == [0, 0]


def test_a_fallback_stops_its_dim_and_a_size_one_axis_shards_nothing():
    """q_b_proj dim 0 is heads (12) x head_dim (16). Rules heads -> tp, head_dim -> dp: at tp 8 the
    heads do not divide, so the dim stays whole (head_dim is not tried: the first logical axis with a
    rule decides), one fallback. At tp 1 the heads' target has size 1: nothing is split and nothing
    falls back, head_dim is not tried either."""
    t = INV.text[1]
    rules = {"heads": "tp", "head_dim": "dp"}
    m8, _ = make_mesh(devices=16, tp=8, dp=2, ep=8)
    spec, fb = spec_from_rules(t, rules, m8)
    assert spec.partition == (None, None)
    assert [(f.dim, f.axis, f.size, f.mesh_axis, f.mesh_size) for f in fb] == [(0, "heads", 12, "tp", 8)]
    m1, _ = make_mesh(devices=2, tp=1, dp=2, ep=1)
    spec, fb = spec_from_rules(t, rules, m1)
    assert (spec.partition, fb) == ((None, None), [])
    shards, fallbacks, _ = class_shards(
        tensor=t, rules=rules, tp=np.array([8, 1]), dp=np.array([2, 2]), ep_all=np.array([False, False])
    )
    assert shards.tolist() == [1, 1] and fallbacks.tolist() == [1, 0]


def test_resolve_merges_the_role_override():
    """The router's expert axis has an override to none: with the global rule expert -> ep it would be
    cut 8 ways."""
    router = INV.text[6]
    mesh, _ = make_mesh(devices=8, tp=4, dp=2, ep=8)
    assert rules_for(router, RULES, OVERRIDES)["expert"] is None
    assert spec_from_rules(router, rules_for(router, RULES, OVERRIDES), mesh)[0].partition == (None, None)
    assert spec_from_rules(router, RULES, mesh)[0].partition == (("dp", "tp"), None)


def test_a_share_that_does_not_divide_the_bytes_is_rounded_up():
    """fp8_block: 1 B a parameter + a 4-byte scale per [128, 128] block. (96, 100) with 8 heads x 12
    on dim 0: 96*100 + 4 * ceil(96/128) * ceil(100/128) = 9,600 + 4 = 9,604 B; over tp 8 the heads
    divide (1 each) but the bytes do not: 9,604 / 8 = 1,200.5, and a device holds 1,201."""
    t = Tensor.checked(
        name="q",
        shape=(96, 100),
        logical_shape=(8, 12, 100),
        axes=("heads", "head_dim", "q_lora"),
        fmt="fp8_block",
        kind="mla",
        role="attn",
    )
    inv = TensorInventory.of((t,))
    mesh, _ = make_mesh(devices=8, tp=8, dp=1, ep=8)
    plan = resolve(inv, mesh=mesh, rules=RULES, role_overrides=OVERRIDES, source="test")
    wb = weight_budget(inventory=inv, plan=plan, stack=stack())
    assert (wb.runtime_weight_bytes, wb.weights_bytes, wb.fallbacks) == (9_604, 1_201, ())
    mw = mesh_weights(
        classes=tensor_classes(inv), stack=stack(), tp=np.array([8]), dp=np.array([1]), ep_all=np.array([True])
    )
    assert mw.weights_bytes.tolist() == [1_201] and mw.dense_bytes.tolist() == [9_604 / 8]
