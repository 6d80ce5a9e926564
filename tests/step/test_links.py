"""Each collective runs on its own link: the scale-out link only where its group is wider than a scale-up
domain (step.ops.group_spans / crosses), and fit, plan and the expected path read that one split.
Golden figures by hand from Kimi K3's published shapes (docs/k3-facts.md): 92 MoE layers, 93 layers, one dense
layer, hidden 7,168, routed-expert latent 3,584, top-16 of 896, vocabulary 163,840, bf16 activations (2 B);
and the hardware specs' links (hardware_specs/*.yaml): H200 NVLink 450 GB/s a GPU one-way, 10 us a call,
InfiniBand 400 Gb/s = 50 GB/s a GPU, 20 us a call; TPU v7x 2 devices a chip, ICI 600 GB/s a chip one-way,
9.88 us a call, DCN 100 Gb/s = 12.5 GB/s a chip, 50 us a call."""

from __future__ import annotations

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.hardware import load_hardware
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.roofline.comm import collective_args, comm_cost
from k3plan.setup import make_setup
from k3plan.speed.expected import expected_time
from k3plan.speed.peaks import Peaks
from k3plan.step.ops import COLLECTIVE_NAMES, collective_ops, crosses, group_spans, to_op_costs

MOE, LAYERS, DENSE, HIDDEN, LATENT, TOP_K, VOCAB, BF16 = 92, 93, 1, 7168, 3584, 16, 163840, 2
NVLINK_BW, NVLINK_LAT, IB_BW, IB_LAT = 450e9, 10e-6, 50e9, 20e-6
ICI_BW, ICI_LAT, DCN_BW, DCN_LAT = 600e9, 9.88e-6, 12.5e9, 50e-6


def _ops(setup, tokens):
    a = collective_args(setup)
    return {o.name: o for o in collective_ops(a.pop("spec"), **a, tokens=tokens)}


def test_spans_tp_innermost_and_a_strided_group_crosses_by_its_span_not_its_size():
    assert group_spans(tp=8, dp=2, ep=16) == {"tp": 8, "ep": 16, "dp": 16}
    assert crosses(8, 8) is False and crosses(16, 8) is True and crosses(10**6, None) is False
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, ep=16, stack="vllm")
    ops = _ops(setup, tokens=32)
    assert list(ops) == list(COLLECTIVE_NAMES)  # plan's scale_out_ops bits name these
    # the DP group is 2 ranks (its size fits a node of 8) strided by tp 8: it spans both nodes
    ag = ops["moe.all_gather"]
    assert (ag.group, ag.scale_out) == (2, True)
    for name in ("attention.all_reduce", "embed.all_reduce", "dense_mlp.all_reduce", "logits.gather", "moe.all_reduce"):
        assert (ops[name].group, ops[name].scale_out) == (8, False), name
    # the same split on one 16-GPU domain (an NVL72's 16 GPUs): nothing crosses
    assert not any(o.scale_out for o in _ops(make_setup(hardware="nvidia-gb200-nvl72", topology="16", tp=8, ep=16,
                                                         stack="vllm"), 32).values())  # fmt: skip


def test_a_group_that_straddles_a_domain_edge_crosses():
    """tp 16 over two 72-GPU NVL72 racks (144 GPUs): TP groups are GPUs 0-15, 16-31, ..., and 64-79 holds
    rack 0's last 8 and rack 1's first 8, so that group's all-reduces run over InfiniBand and every step
    waits for it; a span that divides the domain (8 of 72) never straddles."""
    assert crosses(16, 72) is True and crosses(8, 72) is False and crosses(72, 72) is False
    assert crosses(144, 72) is True and crosses(24, 72) is False
    setup = make_setup(hardware="nvidia-gb200-nvl72", topology="144", tp=16, stack="vllm")
    ops = _ops(setup, tokens=32)
    assert (ops["attention.all_reduce"].group, ops["attention.all_reduce"].scale_out) == (16, True)
    one_rack = _ops(make_setup(hardware="nvidia-gb200-nvl72", topology="144", tp=8, stack="vllm"), 32)
    assert one_rack["attention.all_reduce"].scale_out is False


def test_golden_h200_2x8_tp8_ep16_vllm_decode_batch_32_by_link():
    """2 DP groups of TP 8, one a node. NVLink: the TP all-reduces (93 attention, the embedding, the dense MLP,
    92 MoE) and the logits all-gather; InfiniBand: the DP group's all-gather + reduce-scatter, 92 each."""
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, ep=16, stack="vllm")
    hw = load_hardware("nvidia-h200")
    assert (hw.scale_up.bw_bytes_per_s, hw.scale_out.bw_bytes_per_s) == (NVLINK_BW, IB_BW)
    assert (hw.scale_up.latency_s, hw.scale_out.latency_s) == (pytest.approx(NVLINK_LAT), pytest.approx(IB_LAT))
    rows = 32 // 2  # a DP group's rows
    tp_ring = 2 * 7 / 8  # a device sends 2 (n-1)/n of the message, n = 8, one GPU a chip
    nvlink_calls = LAYERS + 1 + DENSE + 1 + MOE  # attention, embedding, dense MLP, logits gather, MoE all-reduce
    nvlink_bytes = (
        (LAYERS + 1 + DENSE) * tp_ring * rows * HIDDEN * BF16  # 95 all-reduces of [16, 7168]
        + (8 - 1) * rows * (VOCAB // 8) * BF16  # ring all-gather of [16, vocab / 8]
        + MOE * tp_ring * rows * (HIDDEN + LATENT) * BF16  # the TP all-reduce of hidden state + routed latent
    )
    ib_calls = 2 * MOE
    ib_bytes = MOE * (
        (2 - 1) * rows * (LATENT * BF16 + TOP_K * (4 + 4))  # all-gather: a device sends its shard to 1 peer
        + (2 - 1) * rows * LATENT * BF16  # reduce-scatter
    )
    assert (nvlink_calls, ib_calls) == (188, 184)
    assert nvlink_bytes == 38_133_760 + 4_587_520 + 55_394_304 == 98_115_584 and ib_bytes == 21_291_008
    c = comm_cost(setup, tokens=32)
    up, out = c.links
    assert (up.link, up.link_name, up.calls_per_step, up.bytes_per_chip_per_step) == (
        "scale_up", "NVLink", 188, 98_115_584)  # fmt: skip
    assert up.collectives == ("attention.all_reduce", "embed.all_reduce", "dense_mlp.all_reduce", "logits.gather",
                              "moe.all_reduce")  # fmt: skip
    assert (out.link, out.link_name, out.calls_per_step, out.bytes_per_chip_per_step) == (
        "scale_out", "InfiniBand", 184, 21_291_008)  # fmt: skip
    assert out.collectives == ("moe.all_gather", "moe.reduce_scatter") and c.scale_out is out
    assert up.latency_time_s == pytest.approx(188 * NVLINK_LAT, rel=1e-12)
    assert up.bandwidth_time_s == pytest.approx(98_115_584 / NVLINK_BW, rel=1e-12)
    assert out.latency_time_s == pytest.approx(184 * IB_LAT, rel=1e-12)
    assert out.bandwidth_time_s == pytest.approx(21_291_008 / IB_BW, rel=1e-12)
    # the totals keep their meaning: every call and byte, both links; ``link`` is the experts' collectives'
    assert (c.calls_per_step, c.bytes_per_chip_per_step) == (372, 98_115_584 + 21_291_008)
    assert (c.link, c.link_name, c.latency_source) == (
        "scale_out",
        "InfiniBand",
        "nvidia-h200 spec: InfiniBand latency a call",
    )
    step = 188 * NVLINK_LAT + 98_115_584 / NVLINK_BW + 184 * IB_LAT + 21_291_008 / IB_BW
    assert c.time_s == pytest.approx(step, rel=1e-12)
    # before the split every call was charged InfiniBand: 372 x 20 us = 7.44 ms of latency, now 5.56 ms
    assert c.latency_time_s == pytest.approx(5.56e-3, rel=1e-12)
    # the decode bound takes that time; the expected path (each OpCost on its own link) has it as its ceiling
    d = decode_bound(setup, batch=32, context_tokens=8192, eff=Efficiency())
    assert d.comm.time_s == pytest.approx(step, rel=1e-12)
    links = {x.name: x.link for x in to_op_costs(list(_ops(setup, 32).values()))}
    assert links["moe.all_gather"] == links["moe.reduce_scatter"] == "scale_out"
    assert links["attention.all_reduce"] == links["moe.all_reduce"] == "scale_up"
    t = expected_time(to_op_costs(list(_ops(setup, 32).values())), peaks=Peaks.from_hardware(hw), curves=None)
    assert t.by_kind.collectives.ceiling_s == pytest.approx(step, rel=1e-9)


def test_tpu_single_slice_is_all_ici_as_before():
    """2x2x4 (one slice, 32 devices), tp 32: everything on ICI; the latency term is 280 calls x 9.88 us (the
    logits one all-gather: torchtpu-vllm runs vLLM's LogitsProcessor; two all-reduces a MoE layer: its MoERunner
    reduces the routed latent and the shared expert's output apart)."""
    setup = make_setup(hardware="tpu-v7x", topology="2x2x4", tp=32)
    c = comm_cost(setup, tokens=1)
    assert [x.link for x in c.links] == ["scale_up"] and c.scale_out is None
    assert (c.link, c.calls_per_step) == ("scale_up", LAYERS + 1 + DENSE + 1 + 2 * MOE)
    assert c.latency_time_s == 280 * ICI_LAT  # the same float as one link's calls x latency
    assert c.bandwidth_time_s == c.bytes_per_chip_per_step / ICI_BW
    assert not any(o.scale_out for o in _ops(setup, 1).values())


def test_golden_tpu_two_slices_tp_inside_a_slice():
    """2*2x2x4: two slices of 16 chips (32 devices), tp 32 inside a slice, EP over all 64 devices, torchtpu-vllm
    (two MoE all-reduces over EP, latent then hidden, vLLM's logits all-gather). Decode batch 32: 16 rows a DP
    group. ICI: the TP collectives; DCN: the 2 x 92 MoE all-reduces of the whole batch over EP 64."""
    setup = make_setup(hardware="tpu-v7x", topology="2*2x2x4", tp=32)
    hw = load_hardware("tpu-v7x")
    assert (setup.parallel.tp, setup.parallel.dp, setup.parallel.ep, setup.topology.devices_per_slice) == (
        32,
        2,
        64,
        32,
    )
    assert (hw.scale_out.bw_bytes_per_s, hw.scale_out.latency_s) == (DCN_BW, pytest.approx(DCN_LAT))
    dpc, rows = 2, 16
    ici_calls = LAYERS + 1 + DENSE + 1  # attention, embedding, dense MLP, the logits all-gather
    # the logits: [16 rows, vocab / 32] bf16 ring all-gathered, each device sends 31 shards
    ici_bytes = (LAYERS + 1 + DENSE) * dpc * 2 * 31 / 32 * rows * HIDDEN * BF16 + dpc * 31 * rows * (VOCAB // 32) * BF16
    dcn_bytes = MOE * dpc * 2 * 63 / 64 * 32 * (HIDDEN + LATENT) * BF16
    assert (ici_calls, ici_bytes, dcn_bytes) == (96, 84_439_040 + 10_158_080, 249_274_368)
    c = comm_cost(setup, tokens=32)
    up, out = c.links
    assert (up.link_name, up.calls_per_step, up.bytes_per_chip_per_step) == ("ICI", 96, 94_597_120)
    assert (out.link_name, out.calls_per_step, out.bytes_per_chip_per_step) == ("DCN", 2 * MOE, 249_274_368)
    assert out.collectives == ("moe.all_reduce",) and c.link == "scale_out"
    step = 96 * ICI_LAT + 94_597_120 / ICI_BW + 2 * MOE * DCN_LAT + 249_274_368 / DCN_BW
    assert c.time_s == pytest.approx(step, rel=1e-12)
    # fit names the collective that crosses
    f = fit(setup, Workload(context_tokens=32768, batch=32))
    assert any("collectives over DCN" in w and "moe.all_reduce" in w and "attention" not in w for w in f.warnings)
