"""Issue 17 item 7: the op list's collectives against the compiled HLO's, for every bundled stack, on the
scaled K3 (probes/step/scaled.py: layer 0 KDA + dense MLP, layer 1 MLA + MoE, 8 experts top-2) decoding
8 sequences on 4 fake CPU devices; and the all-to-all dispatch's arithmetic against the all-reduce one.

Each stack's expected counts are written out by hand from its yaml (the op list is not called to make
them), and every count difference is one of k3plan.validate.collective_check's named exceptions."""

from __future__ import annotations

import dataclasses

import pytest

from k3plan.structs import dump
from k3plan.validate.collective_check import Exception_, check, exceptions_for, op_list_collectives
from k3plan.validate.hlo_census import Census, OpStats

from .conftest import has_libtpu

# stack [+ " dpN"] -> (hardware, topology, tp): 4 devices each (tpu-v6e 2x2: 4 chips of one device)
SETUPS = {
    "torchtpu-vllm": ("tpu-v6e", "2x2", 4),
    "jax-native": ("tpu-v6e", "2x2", 4),
    "vllm": ("nvidia-h200", "4", 4),
    "vllm dp2": ("nvidia-h200", "4", 2),  # TP 2 x DP 2, EP 4: vLLM's all-gather / reduce-scatter backend
    "sglang": ("nvidia-h200", "4", 4),
    "dp-attention": ("nvidia-h200", "4", 1),
    "tpu-inference": ("tpu-v6e", "2x2", 1),
}

# One step of the scaled K3 (2 layers: 1 dense, 1 MoE), by hand from each stack's yaml:
#   TP > 1: an o_proj all-reduce in each of the 2 layers + the vocabulary-split embedding's + the dense
#   MLP's down_proj = 4 all-reduces; experts all_reduce: + 1 (the MoE sum); all_to_all: 1 dispatch +
#   1 combine; logits all_gather: 1 all-gather; partitioned_argmax: 2 (each shard's max and its index).
#   dp-attention (TP 1): no TP collective at all, only the MoE layer's dispatch and combine.
#   tpu-inference (TP 1, DP 4): the MoE layer's rows all-gathered over DP and the outputs reduce-scattered back;
#   its vocabulary over every device adds a named exception (vocab-split-over-every-device).
#   vllm dp2: the 4 TP all-reduces; the MoE layer all-gathers its rows (with their top-k) over the DP
#   group, reduce-scatters the outputs back over it, then all-reduces over TP (+ 1); logits: 1 all-gather.
OP_LIST = {
    # vLLM's LogitsProcessor: one logits all-gather; the MoE layer's latent and hidden outputs reduced apart
    "torchtpu-vllm": {"all-reduce": 4 + 2, "all-gather": 1},
    "jax-native": {"all-reduce": 4 + 1, "all-gather": 2},
    "vllm": {"all-reduce": 4 + 1, "all-gather": 1},
    "vllm dp2": {"all-reduce": 4 + 1, "all-gather": 1 + 1, "reduce-scatter": 1},
    "sglang": {"all-reduce": 4, "all-to-all": 2, "all-gather": 1},
    "dp-attention": {"all-to-all": 2},
    "tpu-inference": {"all-gather": 1, "reduce-scatter": 1},
}
# the named exceptions each stack's compiled step carries (one MoE layer: each +1)
NAMED = {
    "torchtpu-vllm": {("latent-reduced-apart-in-the-engine", "all-reduce")},  # the engine: two calls, validate's one
    "vllm": set(),
    "vllm dp2": set(),
    "dp-attention": set(),
    "tpu-inference": {
        ("vocab-split-over-every-device", "all-gather"),
        ("vocab-split-over-every-device", "all-reduce"),
        ("vocab-split-over-every-device", "all-to-all"),
    },
    "sglang": {("moe-output-gathered-over-tp", "all-gather")},
    "jax-native": {
        ("router-split-over-experts", "all-gather"),
        ("router-split-over-experts", "all-reduce"),
        ("latent-split-over-tp", "all-gather"),
        ("latent-split-over-tp", "all-reduce"),
    },
}


def _setup(stack: str):
    from k3plan.probes.step.scaled import scaled_config_path
    from k3plan.setup import make_setup

    hw, topo, tp = SETUPS[stack]
    name, _, dp = stack.partition(" dp")
    return make_setup(
        model=str(scaled_config_path()), hardware=hw, topology=topo, tp=tp, dp=int(dp) if dp else None, stack=name
    )


def test_every_bundled_stack_is_covered():
    from k3plan.engines.stack import list_stacks

    assert set(list_stacks()) == {k.split()[0] for k in SETUPS}


@pytest.mark.parametrize("stack", sorted(SETUPS))
def test_named_exceptions_follow_the_setup(stack):
    got = {(e.name, e.kind) for e in exceptions_for(_setup(stack))}
    assert got == NAMED[stack]
    for e in exceptions_for(_setup(stack)):
        assert e.why and e.source
        # a MoE layer's: 1; the vocabulary split over every device, a step's: ids, final hidden rows and the
        # argmax's max and index all-gathered, the lookup all-reduced, the argmax's index iota all-to-all
        want = {"all-gather": 4, "all-reduce": 1, "all-to-all": 1}[e.kind] if e.name.startswith("vocab-") else 1
        want = -1 if e.name == "latent-reduced-apart-in-the-engine" else want  # validate's graph: one call fewer
        assert e.calls == want, e


def test_a_count_difference_without_a_name_is_a_finding():
    class Op:
        kind, collective, count, calls, message_bytes = "collective", None, 3, 1, 10

    import enum

    class C(enum.Enum):
        AR = "all-reduce"

    op = Op()
    op.collective = C.AR
    hlo = Census(ops={"all-reduce": OpStats(count=2, bytes=80, executed=4, executed_bytes=160)})
    assert op_list_collectives([op]) == {"all-reduce": (3, 30)}
    bad = check(stack="s", stage="decode", ops=[op], hlo=hlo, exceptions=[])
    assert not bad.ok and bad.findings == ("all-reduce: op list 3 call(s), HLO 4, +1 unexplained",)
    (row,) = bad.rows
    assert (row.op_list_bytes, row.hlo_bytes, row.bytes_ratio) == (30, 160, 160 / 30)
    named = Exception_(name="x", kind="all-reduce", calls=1, why="because", source="here")
    good = check(stack="s", stage="decode", ops=[op], hlo=hlo, exceptions=[named])
    assert good.ok and dump(good)["rows"][0]["exceptions"] == ["x"]
    # a kind only the HLO has is a finding too
    extra = Census(ops={**hlo.ops, "collective-permute": OpStats(count=1, bytes=4, executed=1, executed_bytes=4)})
    assert check(stack="s", stage="decode", ops=[op], hlo=extra, exceptions=[named]).findings == (
        "collective-permute: op list 0 call(s), HLO 1, +1 unexplained",
    )


@pytest.fixture(scope="module", params=sorted(SETUPS))
def compiled(request):
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    setup = _setup(request.param)
    target = parse_target("cpu")
    prepare_target(target, setup)
    jobs = plan_jobs(setup=setup, stage="decode", tokens=[], batch=8, context=64)
    (r,) = dump(validate(setup=setup, target=target, jobs=jobs))["results"]
    return request.param, r


def test_census_equals_the_op_list_or_a_named_exception(compiled):
    stack, r = compiled
    c = r["collectives"]
    assert c["ok"], c["findings"]
    rows = {x["kind"]: x for x in c["rows"]}
    assert {k: x["op_list_calls"] for k, x in rows.items() if x["op_list_calls"]} == OP_LIST[stack]
    named = {(e["name"], e["kind"]) for e in c["exceptions"]}
    assert named == NAMED[stack]
    for kind, x in rows.items():
        extra = sum(e["calls"] for e in c["exceptions"] if e["kind"] == kind)
        assert x["hlo_calls"] == OP_LIST[stack].get(kind, 0) + extra
        assert r["census"]["ops"][kind]["executed"] == x["hlo_calls"]
    assert "collective-permute" not in rows  # the A_log slice is replicated: no partitioner reshuffle


def test_all_to_all_stacks_dispatch_by_all_to_all(compiled):
    stack, r = compiled
    ops = r["census"]["ops"]
    if stack == "tpu-inference":  # the split argmax's one all-to-all (a named exception), no dispatch
        assert ops["all-to-all"]["executed"] == 1 and "ragged-all-to-all" not in ops
        return
    if stack not in ("sglang", "dp-attention"):
        assert "all-to-all" not in ops
        return
    a2a = ops["all-to-all"]
    assert a2a["executed"] == 2  # the one MoE layer's dispatch and combine
    # bytes a device: fixed capacity, dropless: each of the 4 destinations' buffers holds all of a
    # device's 8/4 tokens x top-2 = 4 rows: dispatch 4 x 4 rows x (128 latent + 4 id bytes / 1) of fp8,
    # combine 4 x 4 x 128; XLA:CPU carries the fp8 payload as f16 (x 2)
    assert a2a["executed_bytes"] == 2 * (4 * 4 * (128 + 4) + 4 * 4 * 128)
    # the op list: 8 tokens x 2 x 128 latent x 1 B (fp8) / 4 devices a call, 2 calls
    row = next(x for x in r["collectives"]["rows"] if x["kind"] == "all-to-all")
    assert row["op_list_bytes"] == 2 * 8 * 2 * 128 // 4


def test_all_to_all_dispatch_computes_what_the_all_reduce_does():
    """The same MoE layer, same weights and tokens: dispatched by all-to-all (tokens split over the 4
    devices) and by the vllm-tpu pattern (every device's experts over all tokens, one psum)."""
    _moe_against_all_reduce("dp-attention", ragged=False)


def test_allgather_reducescatter_computes_what_the_all_reduce_does():
    """vLLM's default EP backend (TP 2 x DP 2): each DP rank's rows routed there, all-gathered with their
    top-k weights and ids over DP as one byte buffer, the local experts over all rows, the partial sums
    reduce-scattered back and all-reduced over TP -- the same output as every device's experts over all
    tokens summed by one psum. 6 rows: 2 padded, which must route nowhere."""
    _moe_against_all_reduce("vllm dp2", ragged=False, dispatch="allgather_reducescatter")


def _moe_against_all_reduce(stack: str, *, ragged: bool, dispatch: str = "all_to_all") -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from k3plan.step.cache import cache_layout
    from k3plan.step.structure import layer_plan
    from k3plan.validate import abstract_model as am
    from k3plan.validate.layers import moe
    from k3plan.validate.local import concrete
    from k3plan.validate.steps import make_ctx

    setup = _setup(stack)
    spec = setup.model.spec
    lplan = layer_plan(mixers=spec.mixers, mlps=spec.mlps, unroll=True)
    layout = cache_layout(spec=spec, stack=setup.stack, parallel=setup.parallel)
    ab, _ = am.build(setup, jax.devices()[:4], lplan, stage="decode", batch=8, tokens=1, capacity=layout.block_tokens)
    layers = [p for p in (*ab.params["prefix"], *ab.params["suffix"]) if "block_sparse_moe.gate.weight" in p]
    # the shared experts zeroed: the routed experts' output (~1e-6 here, next to ~5e-2 from the shared ones)
    # is what the two dispatches must agree on, so the tolerance is relative to it
    params = {
        k: jax.tree.map(jnp.zeros_like, v) if "shared_experts" in k else v
        for k, v in concrete(layers[0], seed=1).items()
    }
    ctx = dataclasses.replace(make_ctx(setup, ab.mesh), dispatch_dtype=None, act=jnp.float32, ragged_dispatch=ragged)
    assert ctx.expert_dispatch == dispatch and len(ctx.expert_axes) >= 2 - (dispatch == "all_to_all")
    rows = 6 if dispatch == "all_to_all" else 7  # all-to-all: 2 rows padded to 8 (EP 4); all-gather: 1 (DP 2)
    x = jax.random.normal(jax.random.key(0), (rows, 1, spec.hidden_size), jnp.float32)
    got = jax.jit(lambda p, v: moe(p, v, ctx))(params, x)
    ar = jax.jit(lambda p, v: moe(p, v, dataclasses.replace(ctx, expert_dispatch="all_reduce")))(params, x)
    scale = float(jnp.abs(ar).max())
    assert scale > 0
    np.testing.assert_allclose(np.asarray(got), np.asarray(ar), rtol=1e-3, atol=1e-3 * scale)


def _emulated_ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axis_name):
    """jax.lax.ragged_all_to_all's documented semantics from all_gather + scatter (XLA:CPU cannot compile the
    real one): source i's rows input_offsets_i[me] .. + send_sizes_i[me] land at output_offsets_i[me] here."""
    import jax
    import jax.numpy as jnp

    me = jax.lax.axis_index(axis_name)
    ops, ins, sends, outs = (
        jax.lax.all_gather(a, axis_name) for a in (operand, input_offsets, send_sizes, output_offsets)
    )
    rows = jnp.arange(operand.shape[0])
    for i in range(ops.shape[0]):
        ok = rows < sends[i][me]
        src = jnp.minimum(ins[i][me] + rows, operand.shape[0] - 1)
        dst = jnp.where(ok, outs[i][me] + rows, output.shape[0])  # past the end: dropped
        output = output.at[dst].set(ops[i][src], mode="drop")
    return output


@pytest.mark.parametrize("stack", ["dp-attention", "sglang"])
def test_ragged_dispatch_computes_what_the_all_reduce_does(stack, monkeypatch):
    """The TPU path (ragged_all_to_all after a counts exchange) on CPU, with the ragged collective emulated
    from its documented semantics: the offsets, sizes and regions k3plan.validate.dispatch computes route
    every pair to its expert and back."""
    import jax

    monkeypatch.setattr(jax.lax, "ragged_all_to_all", _emulated_ragged_all_to_all)
    _moe_against_all_reduce(stack, ragged=True)


def test_a_ragged_dispatch_names_its_counts_exchange():
    names = {(e.name, e.kind) for e in exceptions_for(_setup("dp-attention"), ragged=True)}
    assert names == {("dispatch-counts-exchange", "all-to-all")}
    # no all-to-all dispatch, nothing to exchange (its one exception is the latent reduced apart)
    assert [e.name for e in exceptions_for(_setup("torchtpu-vllm"), ragged=True)] == [
        "latent-reduced-apart-in-the-engine"
    ]


@pytest.mark.skipif(not has_libtpu(), reason='libtpu not installed: pip install -e ".[tpu]"')
def test_tpu_target_dispatches_with_ragged_all_to_all():
    """Deviceless compile for tpu7x:2x2x1 (8 devices): the dp-attention step's MoE layer is one counts
    all_to_all + two ragged_all_to_all (dispatch, combine), the op list's two plus the named exchange."""
    from k3plan.probes.step.scaled import scaled_config_path
    from k3plan.setup import make_setup
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    setup = make_setup(
        model=str(scaled_config_path()), hardware="tpu-v7x", topology="2x2x1", tp=1, stack="dp-attention"
    )
    target = parse_target("tpu7x:2x2x1")
    prepare_target(target, setup)
    (r,) = dump(
        validate(
            setup=setup, target=target, jobs=plan_jobs(setup=setup, stage="decode", tokens=[], batch=8, context=64)
        )
    )["results"]
    ops = r["census"]["ops"]
    assert ops["ragged-all-to-all"]["executed"] == 2 and ops["all-to-all"]["executed"] == 1
    c = r["collectives"]
    assert c["ok"] and [e["name"] for e in c["exceptions"]] == ["dispatch-counts-exchange"]
    (row,) = c["rows"]
    assert (row["kind"], row["op_list_calls"], row["hlo_calls"]) == ("all-to-all", 2, 3)
