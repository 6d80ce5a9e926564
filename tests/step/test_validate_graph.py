"""step/graph.py's ops of validate's own step graph (issue 50): the experts' operand as XLA writes it, read off the
grid's profiles (reports/probes/grid-profile-20261204/), and the ragged-dot curve read on the bytes XLA's ragged_dot
read. No device: the committed records and the op list."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _graph(fmt: str, *, activation: str, form: str, experts: int = 16):
    from k3plan.probes.step.scaled import k3_width_config_path
    from k3plan.setup import make_setup
    from k3plan.step.graph import validate_graph

    s = make_setup(model=str(k3_width_config_path(layers=2, experts=experts)), hardware="tpu-v5e", topology="1x1", tp=1)
    return validate_graph(s.model.spec, expert_format=fmt, capacity_tokens=2048, activation=activation, form=form)


@pytest.mark.parametrize(
    ("fmt", "activation", "form", "per_element"),
    [
        # tile slice 1 + packed relayout 1 + repeat 1.5 + codes 2 + bf16 scale 2 + value 5 + zero-group pad 4.5
        ("mxfp4_f32scale", "bf16", "tiled", 17.0),
        # packed relayout 1 + repeat 1.5 + codes 2 + u8 scale 1 + value (1 + 1 + 4) in f32
        ("mxfp4", "f32", "ragged", 11.5),
        ("bf16", "f32", "ragged", 6.0),  # jax-native's bf16 experts converted to f32: 2 read, 4 written
        ("bf16", "bf16", "ragged", 0.0),  # nothing written: the relayout copy (its own op) is all
    ],
)
def test_operand_passes_per_element(fmt, activation, form, per_element):
    from k3plan.step.graph import operand_passes

    g = _graph(fmt, activation=activation, form=form)
    assert g.tiles == (4 if form == "tiled" else 0)
    assert sum(per for _, per, _ in operand_passes(g)) == pytest.approx(per_element)


def test_the_operand_ops_are_the_graphs_only():
    """The probe's op list of an MXFP4 step has the unpack passes and the activation-dtype read; an engine's has none."""
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup

    sp = StepParams(width="k3", layers=2, experts=16, stack="torchtpu-vllm", expert_format="runtime", batch=16)
    ops = step_op_costs(step_setup(sp, hardware="tpu-v5e"), sp, stage="decode")
    names = {o.name for o in ops}
    assert {"moe.block_sparse_moe.experts.w1.codes", "moe.block_sparse_moe.experts.w1.operand_read"} <= names
    from k3plan.speed.stage import decode_op_costs

    engine = decode_op_costs(step_setup(sp, hardware="tpu-v5e"), batch=16, context=8192)
    assert not any(o.name.endswith((".codes", ".operand_read", ".value")) for o in engine)


def test_the_ragged_dot_curve_counts_every_local_group():
    """The record's 1-token point (2 rows in 2 of 28 groups, 0.83 ms) read every local group's weight: on those bytes
    it is ~0.9 of the HBM peak, not the 0.065 it was on the 2 touched groups' bytes."""
    from k3plan.evidence.probe_records import load_with_paths
    from k3plan.hardware import load_hardware
    from k3plan.speed.curves import _point_values
    from k3plan.speed.peaks import Peaks

    peaks = Peaks.from_hardware(load_hardware("tpu-v5e"))
    rec = next(
        r
        for r, p in load_with_paths(REPO / "k3plan" / "evidence" / "probes")
        if p.name.startswith("ragged-dot-tpu-v5") and r.params.get("local_experts") == 28
    )
    eff = {x: e for _, x, e, _ in _point_values(rec, peaks)}
    assert 0.85 <= eff[1.0] <= 1.0


def test_the_tiled_form_multiplies_the_earlier_tiles_rows_too():
    """Tile j's ragged_dot takes the rows of tiles 0..j-1 as a zero group: over 4 tiles, 1.5x the routed FLOPs more."""
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup

    sp = StepParams(
        width="k3",
        layers=2,
        experts=16,
        stack="torchtpu-vllm",
        expert_format="runtime",
        prefill_tokens=1024,
        context=1024,
    )
    ops = {o.name: o for o in step_op_costs(step_setup(sp, hardware="tpu-v5e"), sp, stage="prefill")}
    extra, op = ops["moe.block_sparse_moe.experts.w1.zero_group_rows"], ops["moe.block_sparse_moe.experts.w1"]
    assert extra.kind == "grouped_matmul" and extra.bytes == 0
    assert extra.flops == pytest.approx(1.5 * 2 * 1024 * 16 * 3584 * 3072)  # rows x top_k x one expert's params
    assert op.flops == pytest.approx(2 * 1024 * 16 * 3584 * 3072)


def test_validates_kda_prefill_reads_its_own_chunked_forms_curve():
    """validate's graph's chunked KDA op names the curve of `probe kda --impl validate`; an engine's op list does not."""
    from k3plan.probes.kda.probe import KdaParams
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup
    from k3plan.speed.curves import VALIDATE_KDA
    from k3plan.speed.stage import prefill_op_costs

    KdaParams(impl="validate").check()
    sp = StepParams(width="k3", layers=2, experts=16, stack="torchtpu-vllm", prefill_tokens=1024, context=1024)
    setup = step_setup(sp, hardware="tpu-v5e")
    kda = [o for o in step_op_costs(setup, sp, stage="prefill") if o.kind == "kda_chunked"]
    assert kda and all(o.curve == VALIDATE_KDA.format(chunk=o.chunk) for o in kda)
    from k3plan.step.kda import kda_flops_per_token

    # the FLOPs the curve's efficiency is measured against (probe kda's ceiling), so its seconds a token transfer
    fpt = kda_flops_per_token(path="chunked", heads=96, dk=128, dv=128, chunk=64)
    assert all(o.flops == pytest.approx(fpt * 1024) for o in kda)
    assert all(o.curve is None for o in prefill_op_costs(setup, chunk=1024, context=1024) if o.kind == "kda_chunked")


def test_the_moe_glue_passes_are_the_routed_rows_bytes():
    """validate's gather, silu x up, routing-weight product and scatter-add: bytes from the routed rows' shapes."""
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup

    sp = StepParams(width="k3", layers=2, experts=16, stack="torchtpu-vllm", prefill_tokens=1024, context=1024)
    ops = {o.name: o for o in step_op_costs(step_setup(sp, hardware="tpu-v5e"), sp, stage="prefill")}
    tk, latent, inter = 1024 * 16, 3584, 3072  # rows x top_k; bf16 activations
    assert ops["moe.silu_mul"].bytes == 3 * tk * inter * 2
    assert ops["moe.route_weight"].bytes == 2 * tk * latent * 2
    assert ops["moe.gather_rows"].bytes == ops["moe.combine_scatter"].bytes == (1024 + tk) * latent * 2


def test_jax_natives_f32_ragged_dots_read_the_f32_record():
    """Under f32 activations validate's experts run on f32 operands: the f32 ragged-dot record's curve, against the
    bf16 peak; a bf16 graph's experts keep the dtype's curve."""
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup
    from k3plan.speed.curves import F32_PASSES

    for stack, curve in (("jax-native", F32_PASSES), ("torchtpu-vllm", None)):
        sp = StepParams(width="k3", layers=2, experts=16, stack=stack, prefill_tokens=1024, context=1024)
        ops = step_op_costs(step_setup(sp, hardware="tpu-v5e"), sp, stage="prefill")
        assert {o.curve for o in ops if o.kind == "grouped_matmul"} == {curve}


def test_intermediates_in_alternate_memory_leave_hbm():
    """A tiled pass whose buffer the compiler placed in S(1) (probes/step/alternate.py) is written and read back
    without HBM traffic: the packed repeat's N (write) and the codes' read of it, the scale broadcast's 2N and the
    value's read of it, the zero-group pad's 2.5N (its write, 4 experts a tile and the zero group) and the ragged_dots'
    read of it (operand_read_share); half placed, half saved."""
    import dataclasses

    from k3plan.step.graph import operand_passes, operand_read_share

    g = _graph("mxfp4_f32scale", activation="bf16", form="tiled")
    every = dict(packed_repeat=1.0, scale_broadcast=1.0, zero_group_pad=1.0)
    full = sum(per for _, per, _ in operand_passes(g))
    placed = dataclasses.replace(g, alternate=tuple(every.items()))
    half = dataclasses.replace(g, alternate=tuple((k, 0.5) for k in every))
    saved = 2 * 1.0 + 2 * 2.0 + 2.0 * (1 + 1 / 4)
    assert sum(per for _, per, _ in operand_passes(placed)) == pytest.approx(full - saved)
    assert sum(per for _, per, _ in operand_passes(half)) == pytest.approx(full - saved / 2)
    assert dict((n, per) for n, per, _ in operand_passes(placed))["scale_broadcast"] == pytest.approx(0.0)
    assert operand_read_share(placed) == 0.0 and operand_read_share(half) == 0.5 and operand_read_share(g) == 1.0
    # the ragged form holds no tile intermediates: a placement there changes nothing
    r = _graph("mxfp4", activation="f32", form="ragged")
    assert operand_passes(dataclasses.replace(r, alternate=tuple(every.items()))) == operand_passes(r)


def test_the_placed_step_prices_fewer_hbm_bytes():
    """probe step's op list at 1 row a group with the compiler's placement (all in S(1), as the grid's placement
    file says) moves fewer bytes than with none; the wholly placed scale broadcast is no op at all."""
    import dataclasses

    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup

    sp = StepParams(width="k3", layers=2, experts=16, stack="torchtpu-vllm", expert_format="runtime", batch=1)
    setup = step_setup(sp, hardware="tpu-v5e")
    every = (("packed_repeat", 1.0), ("scale_broadcast", 1.0), ("zero_group_pad", 1.0))
    hbm = lambda ops: sum(o.bytes * o.count for o in ops if o.kind == "hbm")  # noqa: E731
    plain = step_op_costs(setup, sp, stage="decode")
    placed = step_op_costs(setup, dataclasses.replace(sp, alternate=every), stage="decode")
    assert hbm(placed) < hbm(plain)
    assert not any(o.name.endswith(".scale_broadcast") for o in placed)
    assert any(o.name.endswith(".scale_broadcast") for o in plain)


def test_the_short_conv_is_six_passes_of_the_stacked_projections():
    """validate's KDA short conv: 6 passes of [3, tokens, width] in the activation dtype a KDA layer (the stack and
    concatenation fusion and the conv's two outputs, module doc ``short conv``); f32 activations twice bf16's."""
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup

    got = {}
    for stack in ("jax-native", "torchtpu-vllm"):
        sp = StepParams(width="k3", layers=2, experts=16, stack=stack, prefill_tokens=1024, context=1024)
        setup = step_setup(sp, hardware="tpu-v5e")
        ops = {o.name: o for o in step_op_costs(setup, sp, stage="prefill")}
        conv = ops["kda.short_conv"]
        assert conv.count == setup.model.spec.n_kda == 2
        got[stack] = conv.bytes
    assert got["torchtpu-vllm"] == 6 * 3 * 1024 * 96 * 128 * 2
    assert got["jax-native"] == 2 * got["torchtpu-vllm"]
    # an engine's op list has no such op
    from k3plan.speed.stage import prefill_op_costs

    assert not any(o.name == "kda.short_conv" for o in prefill_op_costs(setup, chunk=1024, context=1024))


def test_the_kda_preparation_is_priced_in_prefill_only():
    """validate's KDA preparation (q, k's l2norm, the gate, v as the chunked scan takes them; module doc ``KDA
    preparation``): 64 bytes an element of [tokens, width] a KDA layer plus the activation's bytes (v read in it),
    read off the 1,024-token prefill HLO; decode runs none of it; no engine's op list has it."""
    from k3plan.probes.step.probe import StepParams, step_op_costs, step_setup
    from k3plan.step.graph import KDA_PREP_BYTES

    assert KDA_PREP_BYTES == 64 - 8 + 4 + 4  # l2norm passes - the probe's q x scale + g written + v's relayout
    got = {}
    for stack in ("jax-native", "torchtpu-vllm"):
        sp = StepParams(width="k3", layers=2, experts=16, stack=stack, prefill_tokens=1024, context=1024)
        setup = step_setup(sp, hardware="tpu-v5e")
        prep = {o.name: o for o in step_op_costs(setup, sp, stage="prefill")}["kda.preparation"]
        assert prep.count == setup.model.spec.n_kda == 2
        assert prep.kind == "hbm" and prep.hbm_curve == "hbm_copy"
        got[stack] = prep.bytes
        assert not any(o.name == "kda.preparation" for o in step_op_costs(setup, sp, stage="decode"))
    assert got["jax-native"] == 68 * 1024 * 96 * 128  # f32 activations
    assert got["torchtpu-vllm"] == 66 * 1024 * 96 * 128  # bf16
    from k3plan.speed.stage import prefill_op_costs

    assert not any(o.name == "kda.preparation" for o in prefill_op_costs(setup, chunk=1024, context=1024))
