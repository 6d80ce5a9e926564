"""Layer folding, truncation and the HLO census on hand-written HLO text (no compile)."""

from __future__ import annotations

from k3plan.setup import make_setup
from k3plan.step.structure import layer_plan
from k3plan.validate.compile import parse_oom
from k3plan.validate.hlo_census import census
from k3plan.validate.layouts import array_bytes
from k3plan.validate.structure import truncate_setup


def test_k3_folds_into_22_blocks_of_kda_kda_kda_mla():
    spec = make_setup(topology="2x2x4", tp=32).model.spec
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    assert lp.block == (("kda", "moe"),) * 3 + (("mla", "moe"),)
    assert (lp.prefix, lp.n_blocks, lp.suffix) == ((0, 1, 2, 3), 22, (92,))
    assert layer_plan(mixers=spec.mixers, mlps=spec.mlps, unroll=True).prefix == tuple(range(93))


def test_kimi_linear_48b_folds_too():
    spec = make_setup(model="kimi-linear-48b-a3b", topology="2x2x1").model.spec
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    assert lp.n_blocks * len(lp.block) + len(lp.prefix) + len(lp.suffix) == spec.num_layers
    assert lp.n_blocks >= 5


def test_truncate_keeps_globals_and_first_layers():
    s = make_setup(topology="2x2x4", tp=32)
    t = truncate_setup(s, 8)
    assert t.model.spec.num_layers == 8 and t.model.spec.n_mla == 2
    assert all(x.layer is None or x.layer < 8 for x in t.model.inventory.text)
    assert set(t.plan.specs) == {x.name for x in t.model.inventory.text}


HLO = """HloModule m, entry_computation_layout={(bf16[16,256]{1,0:T(8,128)(2,1)})->bf16[16,256]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

%body (p: (s32[], f32[8,128])) -> (s32[], f32[8,128]) {
  %p = (s32[], f32[8,128]{1,0}) parameter(0)
  %g = f32[8,128]{1,0} get-tuple-element(%p), index=1
  %ar = (f32[8,128]{1,0}, bf16[4]{0}) all-reduce(%g, %g), replica_groups={{0,1}}, to_apply=%add
  %ags = (f32[8,64]{1,0}, f32[8,128]{1,0}) all-gather-start(%g), dimensions={1}
  %agd = f32[8,128]{1,0} all-gather-done(%ags)
  ROOT %t = (s32[], f32[8,128]{1,0}) tuple(%i, %agd)
}

%cond (p: (s32[], f32[8,128])) -> pred[] {
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f32[8,128]) -> f32[8,128] {
  %a = f32[8,128]{1,0} parameter(0)
  %w = (s32[], f32[8,128]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"22"}}
  %cp = f32[8,128]{1,0} collective-permute(%a), source_target_pairs={{0,1}}
  %a2a = f32[8,128]{1,0} all-to-all(%a), dimensions={0}
  ROOT %r = f32[8,128]{1,0} reduce-scatter(%a), dimensions={0}, to_apply=%add
}
"""


def test_census_counts_tuple_and_async_forms_and_loops():
    c = census(HLO)
    ar, ag = c.ops["all-reduce"], c.ops["all-gather"]
    assert (ar.count, ar.bytes, ar.in_loop, ar.executed) == (1, 8 * 128 * 4 + 8, 1, 22)
    assert (ag.count, ag.bytes, ag.in_loop) == (1, 8 * 128 * 4, 1)  # -start counted once, -done's bytes
    for op in ("collective-permute", "all-to-all", "reduce-scatter"):
        assert c.ops[op].count == 1 and c.ops[op].in_loop == 0
    assert c.loops == 1


def test_tpu_tiles_pad_the_minor_dims():
    assert array_bytes("bf16", "3,200", "1,0", "T(8,128)(2,1)") == (1200, 8 * 256 * 2)
    assert array_bytes("f32", "5", "0", "") == (20, 20)
    assert array_bytes("s32", "", "", "T(128)") == (4, 512)  # a scalar takes a whole tile


def test_oom_message_is_parsed():
    msg = (
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
        "(256.00G) exceeds available HBM (94.75G)."
    )
    o = parse_oom(msg)
    assert o.required_bytes == 256 * 2**30 and o.available_bytes == int(94.75 * 2**30)
    assert parse_oom("INVALID_ARGUMENT: something else") is None
