"""The op-level live model (k3plan.step.live) on the tiny K3 of conftest, by hand; jax-free.

Tiny K3 on tpu-v7x 2x2x1, TP=8, vllm-tpu (bf16 activations and KV): 16 experts top-2 over EP=8 =
2 local, latent 128, expert inter 64; MLA 8 heads (1 a device), kv_lora 32 + rope 16; KDA 8 heads
(1 a device) of 32; dense inter 512 (64 a device); vocab 1024 (128 a device); hidden 256."""

from __future__ import annotations

import dataclasses

import pytest

from k3plan.budget.temp import stage_live_of_setup
from k3plan.step.live import AHEAD, RELAYOUT, LiveAt, live_features, peak_and_rest, peak_op
from k3plan.step.live import CACHE_SLICE as CACHE
from k3plan.step.ops import decode_ops, prefill_ops, weight_groups_of_setup


def _live(ops) -> dict:
    """live buffers' name -> bytes, over the ops that hold some."""
    return {o.live.name: o.live_bytes for o in ops if o.live is not None}


def test_decode_live_bytes_by_hand(tiny_setup):
    assert (tiny_setup.parallel.tp, tiny_setup.parallel.ep, tiny_setup.parallel.dp) == (8, 8, 1)
    ops, resident = stage_live_of_setup(tiny_setup, stage="decode", batch=4, tokens=1, context=256)
    got = _live(ops)
    assert len(got) == sum(o.live is not None for o in ops) == 5  # each block's buffers on one op
    # MoE, 4 tokens x top-2 = 8 rows: router 4 x (16 x 4 + 2 x 8) = 320; xs (the output in its place)
    # 8 x 128 x 2 = 2,048; gate and up 2 x 8 x 64 x 2 = 2,048; combine 4 x 128 x 2 = 1,024; vllm-tpu's tiled
    # form: a tile of gcd(2 local, 4) = 2 experts + the zero expert in front = 3 a weight, x 3 weights x 128 x 64
    # x 2 B = 147,456 -> 152,896
    assert got["moe.experts"] == 152_896
    # MLA: scores then probabilities in their place 4 x 1 head x 1 query x 256 x 4 = 4,096; mask 4 x 1 x 256 x 1
    # = 1,024; one local head decoding one query: a matrix-vector dot on the cache as stored, no copy -> 5,120
    assert got["mla.attention"] == 5_120
    assert got["kda.recurrence"] == 4 * 1 * 32 * 32 * 4  # 16,384
    assert got["dense.mlp"] == 2 * 4 * 64 * 2  # 1,024
    assert got["lm_head"] == 4 * 128 * 4  # 2,048
    # residual 2 x 4 x 256 x 2; cache slice: 4 sequences x max(256 tokens x (32 latent + 16 rope) x 2 B of
    # bf16 KV = 24,576, KDA state 1 head x 32 x 32 x 4 B + conv 3 x 3 x 32 x 2 B = 4,672) = 4 x 24,576
    assert resident["residual stream (2 copies)"] == 2 * 4 * 256 * 2 and resident[CACHE] == 4 * 24_576
    # three MoE layers: one more layer's experts dequantized ahead of use, the same 147,456
    assert resident[AHEAD] == 147_456
    peak, rest = peak_and_rest(ops)
    assert (peak, rest) == (152_896, 5_120 + 16_384 + 1_024 + 2_048)


def test_mla_copies_the_cache_into_the_dots_layout_where_a_dot_has_rows(tiny_setup):
    # prefill 4 tokens, 1 sequence, context 256, 1 local head: 4 rows a sequence -> the cache copied in bf16
    # with the 48-wide entry padded to 128 lanes, 1 x 256 x 128 x 2 = 65,536; scores 1 x 1 x 4 x 256 x 4 = 4,096;
    # mask 4 x 256 = 1,024 -> 70,656
    ops, _ = stage_live_of_setup(tiny_setup, stage="prefill", batch=1, tokens=4, context=256)
    assert _live(ops)["mla.attention"] == 70_656


def test_ragged_form_and_prefill_scale_with_tokens_times_top_k(tiny_setup):
    from k3plan.step.live import moe_live

    spec = tiny_setup.model.spec
    a = moe_live(spec, tokens=100, ep=8, act=4, form="ragged").buffers
    b = moe_live(spec, tokens=200, ep=8, act=4, form="ragged").buffers
    rows = "ragged_dot rows: gate, up [tokens x top_k, inter]"
    assert a[rows] == 2 * 100 * 2 * 64 * 4 and b[rows] == 2 * a[rows]
    assert a["dequantized experts (ragged)"] == b["dequantized experts (ragged)"]  # weights: not the tokens
    tiled = moe_live(spec, tokens=100, ep=1, act=2, form="tiled").buffers["dequantized experts (tiled)"]
    assert tiled == (4 + 1) * 3 * 128 * 64 * 2  # one tile of 4 experts (+ the zero one), not the 16 local ones
    eight = moe_live(spec, tokens=100, ep=2, act=2, form="tiled").buffers["dequantized experts (tiled)"]
    assert eight == (4 + 1) * 3 * 128 * 64 * 2  # 8 local: two tiles of 4
    two = moe_live(spec, tokens=100, ep=8, act=2, form="tiled").buffers["dequantized experts (tiled)"]
    assert two == (2 + 1) * 3 * 128 * 64 * 2  # 2 local: the tile is the 2 (gcd), as the compiled graph's scan


def test_each_block_s_buffers_sit_on_the_op_they_peak_in(tiny_setup):
    """The step's one list: the MoE block's buffers on the routed experts' down projection (w2: the ragged_dot
    whose operands are gate and up), the dense MLP's on its down_proj, the logits on the LM head, attention's
    and the recurrence's on their ops; no other op (w1, w3, the shared experts, projections, norms) holds any."""
    ops, _ = stage_live_of_setup(tiny_setup, stage="decode", batch=4, tokens=1, context=256)
    holders = {o.name: o.live.name for o in ops if o.live is not None}
    assert holders == {
        "moe.block_sparse_moe.experts.w2": "moe.experts",
        "dense.mlp.down_proj": "dense.mlp",
        "global.lm_head": "lm_head",
        "mla.absorbed_attention": "mla.attention",
        "kda.recurrence": "kda.recurrence",
    }
    assert peak_op(ops).name == "moe.experts"
    assert all(o.live_bytes == 0 for o in ops if o.name not in holders)
    pre, _ = stage_live_of_setup(tiny_setup, stage="prefill", batch=1, tokens=4, context=256)
    assert {o.name: o.live.name for o in pre if o.live is not None} == {
        **{k: v for k, v in holders.items() if k not in ("mla.absorbed_attention", "kda.recurrence")},
        "mla.attention": "mla.attention",
        "kda.chunked_scan": "kda.chunked_scan",
    }
    # the logits are the sampled rows': one prompt's chunk samples one, 1 x 128 (vocab a device) x 4 B
    assert _live(pre)["lm_head"] == 1 * 128 * 4


def test_the_live_buffers_are_the_step_s_op_list_with_its_time_terms_unchanged(tiny_setup):
    """The temp model reads the same op list the time terms sum: built with ``live``, every op's bytes, FLOPs
    and calls are those of the list built without it (what fit's and plan's speed read), and the features are
    the peak and the rest over its ops' live bytes."""
    from k3plan.step.cache import cache_layout

    s = tiny_setup
    spec = s.model.spec
    lay = cache_layout(spec=spec, stack=s.stack, parallel=s.parallel)
    args = dict(
        weights=weight_groups_of_setup(s), kv_bytes_per_token=spec.n_mla * lay.kv_bytes_per_token_layer,
        state_bytes_per_sequence=spec.n_kda * lay.state_bytes_per_layer_unpadded, tp=8, ep_tokens=4, touched=2,
        context=256,
    )  # fmt: skip
    at = LiveAt(form="tiled", act=2, ep=8)
    for build, rows in ((decode_ops, dict(seqs=4)), (prefill_ops, dict(chunk=4))):
        bare = build(spec, **args, **rows)
        live = build(spec, **args, **rows, live=at)
        assert all(o.live is None for o in bare)
        assert [dataclasses.replace(o, live=None) for o in live] == bare
    ops, resident = stage_live_of_setup(s, stage="decode", batch=4, tokens=1, context=256)
    assert [o.name for o in ops] == [o.name for o in decode_ops(spec, **args, seqs=4)]
    f = live_features(ops, resident)
    assert (f["peak"], f["rest"]) == peak_and_rest(ops) == (152_896, 5_120 + 16_384 + 1_024 + 2_048)
    assert f["resident"] == resident["residual stream (2 copies)"] + resident[RELAYOUT] + resident[AHEAD]


def test_a_prefill_chunk_is_one_sequence_s(tiny_setup):
    with pytest.raises(ValueError, match="one sequence"):
        stage_live_of_setup(tiny_setup, stage="prefill", batch=2, tokens=4, context=256)


def test_the_scan_s_bf16_weight_matrices_are_copied_whole_fp32_ones_not(tiny_setup, tiny_config):
    """The relayout copy (step.live.RELAYOUT): vllm-tpu's bf16 matrices of the scanned layers, a device; none for
    jax-native, whose weights are fp32 (an f32 (8,128) tile is what the dots read)."""
    from k3plan.budget.temp import scan_bf16_weight_bytes
    from k3plan.setup import make_setup
    from k3plan.step.structure import layer_plan

    spec = tiny_setup.model.spec
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    assert {i for pos in range(len(lp.block)) for i in lp.block_layers(pos)} == {4, 5, 6, 7}  # KDA x3, MLA
    # by hand, TP=8, 2 B an element, hidden 256; a scanned KDA layer: the two res_proj [1, 256] whole 1,024; q, k,
    # v, g, o [256, 256] / 8: 5 x 16,384 = 81,920; f_a [32, 256] whole 16,384; f_b [256, 32] / 8 2,048; b_proj
    # [8, 256] / 8 512; router [16, 256] whole 8,192; latent down + up [128, 256] whole 2 x 65,536 = 131,072;
    # shared gate, up, down [128, 256] / 8: 3 x 8,192 = 24,576 -> 265,728 (not the f32 conv1d, not the experts)
    kda = 1_024 + 81_920 + 16_384 + 2_048 + 512 + 8_192 + 131_072 + 24_576
    # the MLA layer: res_proj 1,024; q_a [64, 256] whole 32,768; q_b [384, 64] / 8 6,144; kv_a [48, 256] whole
    # 24,576; kv_b [512, 32] / 8 4,096; g, o 2 x 16,384; router 8,192; latent 131,072; shared 24,576 -> 265,216
    mla = 1_024 + 32_768 + 6_144 + 24_576 + 4_096 + 32_768 + 8_192 + 131_072 + 24_576
    assert scan_bf16_weight_bytes(tiny_setup) == 3 * kda + mla == 1_062_400
    _, res = stage_live_of_setup(tiny_setup, stage="decode", batch=4, tokens=1, context=256)
    assert res[RELAYOUT] == 1_062_400
    native = make_setup(model=tiny_config, hardware="tpu-v7x", topology="2x2x1", tp=8, stack="jax-native")
    assert scan_bf16_weight_bytes(native) == 0


def test_the_tiled_scan_holds_an_accumulator_and_h_only_over_more_than_one_tile(tiny_setup):
    """tpu7x dump, k3lanes vllm-tpu TP16 prefill 8,192 (2 tiles): xs and the scan's carry [tk, latent], gate,
    up and h [tk, inter] at the peak; one tile (the grid's TP32) is no loop."""
    from k3plan.step.live import moe_live

    spec = tiny_setup.model.spec  # 16 experts, top-2, latent 128, inter 64 (test_ragged_form... above)
    key = "tiled scan: the tiles' accumulator [tk, latent] and h [tk, inter]"
    four_tiles = moe_live(spec, tokens=100, ep=1, act=2, form="tiled").buffers[key]  # 16 local = 4 tiles of 4
    assert four_tiles == 100 * 2 * (128 + 64) * 2
    assert moe_live(spec, tokens=100, ep=2, act=2, form="tiled").buffers[key] == four_tiles  # 8 local: 2 tiles
    assert moe_live(spec, tokens=100, ep=4, act=2, form="tiled").buffers[key] == 0  # 4 local: one tile
    assert moe_live(spec, tokens=100, ep=1, act=2, form="ragged").buffers[key] == 0  # no scan over tiles


def test_a_step_whose_ops_miss_a_block_s_buffers_says_which(tiny_setup):
    """Weights without the routed experts' down projection (as an inventory fusing them would give): the MoE
    block's buffers have no op to sit on, an error naming them, not a smaller peak."""
    from k3plan.step.live import stage_live

    s = tiny_setup
    weights = [g for g in weight_groups_of_setup(s) if not g.name.endswith("experts.w2")]
    with pytest.raises(ValueError, match="no op of the decode step holds moe.experts"):
        stage_live(s.model.spec, stage="decode", form="tiled", act=2, weights=weights, tp=8, ep=8, dp=1, batch=4,
                   tokens=1, context=256)  # fmt: skip
