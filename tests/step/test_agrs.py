"""vLLM's default all2all backend on GPUs, allgather_reducescatter (AgRsAll2AllManager): with DP > 1 a MoE
layer all-gathers the DP group's expert inputs (with their top-k weights and ids) and reduce-scatters the
expert outputs, then the attention-TP group all-reduces (KimiMoE.forward); DeepEP is an explicit option.
Golden figures by hand from Kimi K3's published shapes (docs/k3-facts.md): 92 MoE layers, 93 layers, hidden
7,168, routed-expert latent 3,584, top-16 of 896, vocabulary 163,840, bf16 activations (2 B)."""

from __future__ import annotations

import pytest

from k3plan.engines.stack import load_stack
from k3plan.hardware import load_hardware
from k3plan.roofline.bounds import Efficiency, decode_bound, prefill_bound
from k3plan.roofline.comm import comm_cost
from k3plan.setup import make_setup
from k3plan.step.collective import Collective
from k3plan.step.comm import comm_terms

MOE, LAYERS, HIDDEN, LATENT, TOP_K, VOCAB, BF16 = 92, 93, 7168, 3584, 16, 163840, 2


def _ops(setup, tokens):
    from k3plan.roofline.comm import collective_args
    from k3plan.step.ops import collective_ops

    a = collective_args(setup)
    return {o.name: o for o in collective_ops(a.pop("spec"), **a, tokens=tokens)}


def test_vllm_default_is_allgather_reducescatter_and_deepep_is_an_option():
    st = load_stack("vllm")
    assert (
        st.collectives.experts == "allgather_reducescatter"
        and st.chosen["all2all_backend"] == "allgather_reducescatter"
    )
    assert "AgRsAll2AllManager" in st.collectives.source
    src = st.options["all2all_backend"].source
    assert (src.file, src.commit) == ("vllm/config/parallel.py", "840e7972c6ab74061696e81e17d8a74db2aefd7e")
    for backend in ("deepep_high_throughput", "deepep_low_latency"):
        c = load_stack(f"vllm:all2all_backend={backend}").collectives
        assert (c.experts, c.dispatch_dtype) == ("all_to_all", "fp8")
    # the EP flag moves the experts, not the collective (vLLM falls back to all-gather + reduce-scatter)
    assert load_stack("vllm:enable_expert_parallel=true").collectives.experts == "allgather_reducescatter"
    assert Collective.of_pattern("allgather_reducescatter") is Collective.REDUCE_SCATTER
    assert Collective.REDUCE_SCATTER.probe_op is None  # no probe: the spec's latency, as the pipeline send


def test_golden_h200_2x8_tp8_ep16_dp2_decode_batch_32():
    """2 DP groups of 8: each rank's 16 rows all-gathered over the DP group of 2, reduce-scattered back,
    then the TP group of 8 all-reduces the 16 rows' hidden state and routed latent."""
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, ep=16, stack="vllm")
    assert (setup.parallel.tp, setup.parallel.dp, setup.parallel.ep) == (8, 2, 16)
    ops = _ops(setup, tokens=32)
    rows = 32 // 2
    gather_row = LATENT * BF16 + TOP_K * (4 + 4)  # bf16 latent + f32 top-k weights + int32 top-k ids
    assert gather_row == 7_296
    ag, rs, ar = ops["moe.all_gather"], ops["moe.reduce_scatter"], ops["moe.all_reduce"]
    assert (ag.count, ag.calls, ag.group, ag.collective) == (MOE, 1, 2, Collective.ALL_GATHER)
    assert (rs.count, rs.calls, rs.group, rs.collective) == (MOE, 1, 2, Collective.REDUCE_SCATTER)
    assert (ar.count, ar.calls, ar.group) == (MOE, 1, 8)
    assert ag.message_bytes == rows * gather_row == 116_736 and ag.wire_bytes == (2 - 1) * 116_736
    assert rs.message_bytes == rows * LATENT * BF16 == 114_688 and rs.wire_bytes == (2 - 1) * 114_688
    assert ar.message_bytes == rows * (HIDDEN + LATENT) * BF16 == 344_064
    assert ar.wire_bytes == pytest.approx(2 * 7 / 8 * 344_064) and 2 * 7 / 8 * 344_064 == 602_112
    assert ops["moe.dispatch"].calls == ops["moe.combine"].calls == 0
    # 92 MoE layers x (all-gather + reduce-scatter + TP all-reduce) = 276 expert calls a step
    t = comm_cost(setup, tokens=32)
    assert t.expert_calls_per_step == 3 * MOE == 276 and t.pattern == "allgather_reducescatter"
    assert t.bytes_per_token_per_layer == 2 * LATENT * BF16 + TOP_K * 8 == 14_464


def test_golden_nvl72_tp8_ep72_dp9_roofline_collectives_from_the_spec():
    """One NVLink domain of 72: 9 DP groups of TP 8; decode batch 72 = 8 rows a DP group. Every byte by hand;
    the time from the spec's NVLink latency (10 us a call) and bandwidth (900 GB/s one-way a GPU)."""
    setup = make_setup(hardware="nvidia-gb200-nvl72", topology="72", tp=8, ep=72, stack="vllm")
    hw = load_hardware("nvidia-gb200-nvl72")
    assert (setup.parallel.tp, setup.parallel.dp) == (8, 9)
    assert (hw.scale_up.latency_s, hw.scale_up.bw_bytes_per_s) == (pytest.approx(10e-6), 900e9)
    rows = 72 // 9
    tp_ring = 2 * 7 / 8  # ring all-reduce over TP 8: a device sends 2 (n-1)/n of the message
    attention = (LAYERS + 1 + 1) * tp_ring * rows * HIDDEN * BF16  # o_proj x 93, embedding, dense MLP
    logits = (8 - 1) * rows * (VOCAB // 8) * BF16  # ring all-gather of [8 rows, vocab / 8]
    moe = MOE * (
        (9 - 1) * rows * (LATENT * BF16 + TOP_K * 8)  # all-gather over the DP group of 9
        + (9 - 1) * rows * LATENT * BF16  # reduce-scatter over it
        + tp_ring * rows * (HIDDEN + LATENT) * BF16  # the TP all-reduce
    )
    assert attention == 19_066_880 and logits == 2_293_760 and moe == 112_861_184
    calls = LAYERS + 1 + 1 + 1 + 3 * MOE
    assert calls == 372
    c = decode_bound(setup, batch=72, context_tokens=4096, eff=Efficiency()).comm
    assert (c.calls_per_step, c.link, c.op) == (372, "scale_up", Collective.REDUCE_SCATTER)
    assert c.bytes_per_chip_per_step == 134_221_824 == attention + logits + moe
    assert c.latency_source == "nvidia-gb200-nvl72 spec: NVLink latency a call"
    assert c.latency_time_s == pytest.approx(372 * 10e-6, rel=1e-12)
    assert c.bandwidth_time_s == pytest.approx(134_221_824 / 900e9, rel=1e-12)
    # prefill: one 8,192-token chunk of one prompt = 911 rows a DP group (cdiv(8192, 9)), the same calls
    p = prefill_bound(setup, prompt_tokens=8192, chunk_tokens=8192, eff=Efficiency())
    assert p.comm.calls_per_step == 372


def test_dp1_is_the_tp_all_reduce_only():
    """vLLM runs the all2all kernels only with DP > 1 (use_all2all_kernels): at DP 1 a MoE layer is the TP
    all-reduce, the bytes the all_reduce pattern counts over the same group."""
    setup = make_setup(hardware="nvidia-h200", topology="8", tp=8, ep=8, stack="vllm")
    assert setup.parallel.dp == 1
    ops = _ops(setup, tokens=4)
    assert ops["moe.all_gather"].calls == ops["moe.reduce_scatter"].calls == 0
    assert ops["moe.all_gather"].wire_bytes == ops["moe.reduce_scatter"].wire_bytes == 0
    assert ops["moe.all_reduce"].calls == 1 and ops["moe.all_reduce"].message_bytes == 4 * (HIDDEN + LATENT) * BF16
    kw = dict(act=2, dispatch=2, tp=8, dp=1, ep=8, devices_per_chip=1, chips=8, tokens=4, logits_all_gather=True)
    spec = setup.model.spec
    agrs, ar = comm_terms(spec, all_to_all=False, ag_rs=True, **kw), comm_terms(spec, all_to_all=False, **kw)
    assert (agrs.calls, agrs.bytes_per_chip) == (ar.calls, ar.bytes_per_chip)
