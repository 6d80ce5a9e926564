"""Property: for random configurations, plan's row (its columns, as `row()` prints them) equals
fit's JSON term by term, to the byte, and the verdict code is the same; report's pick equals plan's
first row under the same objective."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import list_stacks, load_stack
from k3plan.hardware import load_hardware
from k3plan.models import load_model
from k3plan.plan import plan
from k3plan.plan.evaluate import evaluate
from k3plan.plan.reasons import reason_codes
from k3plan.plan.rows import PER_DEVICE, row
from k3plan.plan.space import build_space
from k3plan.report.viable import smallest_viable
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.setup import make_setup
from k3plan.structs import dump

HARDWARE = ("tpu-v7x", "nvidia-h200", "nvidia-b200")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@functools.cache
def space():
    moe = load_model("kimi-k3").spec.moe  # as plan() builds it: a stack's splits rule reads the experts' width
    return build_space(
        hardware=[load_hardware(h) for h in HARDWARE],
        stacks=[load_stack(s) for s in list_stacks()],
        kv_dtypes=[None, "fp8"],
        chunks=[4096, 8192],
        max_chips=64,
        stacks_given=False,
        experts=moe.num_experts,
        expert_width=moe.expert_intermediate,
    )


@functools.cache
def columns(context: int, batch: int):
    cols = evaluate(space=space(), model=load_model("kimi-k3"), context=context, batch=batch, eff=Efficiency()).cols
    return cols, reason_codes(cols=cols, concurrency=batch, target_tpot_s=None, need_price=False)


@SETTINGS
@given(
    context=st.sampled_from([4096, 32768, 131072, 1048576]),
    batch=st.sampled_from([1, 3, 8, 64]),
    pick=st.floats(0, 1, exclude_max=True),
)
def test_plan_row_equals_fit_json(context, batch, pick):
    sp = space()
    cols, codes = columns(context, batch)
    i = int(pick * sp.size)
    r = row(space=sp, cols=cols, i=i, rank=1)
    setup = make_setup(
        hardware=r.hardware,
        topology=r.topology,
        tp=r.tp,
        ep=r.ep,
        dp=r.dp,
        pp=r.pp,
        stack=r.stack,
        kv_dtype=r.kv_dtype_override,
    )
    f = fit(setup, Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=r.chunk_tokens))
    j = dump(f)
    for k in PER_DEVICE:  # one PerDevice: the row's is fit's, field for field
        assert getattr(r.per_device, k) == j["per_device"][k], (k, r)
    assert r.max_sequences == j["capacity"]["max_sequences"]
    assert int(codes[i]) == f.reason and (codes[i] == 0) == j["fits"]
    if j["fits"]:  # the speed figure: plan's TPOT column is fit's decode bound (k3plan fit's "speed")
        d = decode_bound(setup, batch=batch, context_tokens=context, eff=Efficiency())
        assert r.tpot_ms == pytest.approx(d.step_s * 1e3, rel=1e-12), r
        assert r.binding == d.binding


@pytest.mark.parametrize("stack", ["vllm", "dp-attention"])
def test_plan_row_is_fit_by_link_on_two_h200_nodes(stack):
    """2x8 H200, tp 8, ep 16: plan's columns carry fit's split by link (the scale-out calls and time, the
    TPOT) and its layout note is fit's warning naming the collectives that cross InfiniBand. (SGLang's
    all-to-all over EP 16 at dp 2 is its DP-attention deployment, the dp-attention stack: plain sglang's
    DP groups are replicas holding the experts over their own TP ranks, Stack.dp_experts.)"""
    import numpy as np

    sp = space()
    cols, _ = columns(32768, 64)
    topo = np.array([t.text for t in sp.topologies])[cols.topo]
    hw = np.array([h.name for h in sp.hardware])[cols.hw]
    st_ = np.array([s.name for s in sp.stacks])[cols.stack]
    hit = np.flatnonzero((hw == "nvidia-h200") & (topo == "2x8") & (cols.tp == 8) & (cols.ep == 16) & (st_ == stack))
    assert hit.size
    i = int(hit[0])
    r = row(space=sp, cols=cols, i=i, rank=1)
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, ep=16, stack=stack, kv_dtype=r.kv_dtype_override)
    d = decode_bound(setup, batch=64, context_tokens=32768, eff=Efficiency())
    out = d.comm.scale_out
    assert out is not None and 0 < out.calls_per_step < d.comm.calls_per_step  # some cross, the TP ones stay
    assert int(cols.scale_out_calls[i]) == out.calls_per_step
    assert float(cols.scale_out_s[i]) == pytest.approx(out.latency_time_s + out.bandwidth_time_s, rel=1e-12)
    assert float(cols.tpot_s[i]) == pytest.approx(d.step_s, rel=1e-12)
    f = fit(setup, Workload(context_tokens=32768, batch=64, prefill_chunk_tokens=r.chunk_tokens))
    said = [w for w in f.warnings if w.startswith("collectives over InfiniBand")]
    assert len(said) == 1 and said[0] in r.layout_notes and ", ".join(out.collectives) in said[0]
    # vLLM: the DP group's all-gather + reduce-scatter (2 ranks strided by 8); DP attention: the all-to-all over EP 16
    assert (
        out.collectives
        == {"vllm": ("moe.all_gather", "moe.reduce_scatter"), "dp-attention": ("moe.dispatch", "moe.combine")}[stack]
    )


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    hw=st.sampled_from(["tpu-v7x", "nvidia-h200", "nvidia-b200"]),
    context=st.sampled_from([32768, 131072]),
    concurrency=st.sampled_from([1, 16, 64]),
)
def test_report_pick_equals_plans_first_row(hw, context, concurrency):
    stack = "vllm-tpu" if hw.startswith("tpu") else "sglang"
    p = plan(
        hardware=[hw], stacks=[stack], context=context, concurrency=concurrency, objective="chips", top=1, max_chips=64
    )
    chosen, _ = smallest_viable(
        model="kimi-k3", hardware=hw, stack=stack, contexts=[context], concurrency=concurrency, max_chips=64
    )
    ch = chosen[context]
    if p.recommended is None:
        assert ch.setup is None and ch.reason
        return
    top = p.recommended
    assert (ch.setup.topology.text, ch.setup.parallel.tp, ch.setup.parallel.ep, ch.setup.parallel.dp) == (
        top.topology,
        top.tp,
        top.ep,
        top.dp,
    )
    assert ch.result.fits and ch.result.per_device.free_bytes == top.per_device.free_bytes


@functools.cache
def nvl72_columns(context: int, batch: int):
    sp = build_space(
        hardware=[load_hardware("nvidia-gb200-nvl72")],
        stacks=[load_stack("vllm")],
        kv_dtypes=[None],
        chunks=[8192],
        max_chips=72,
        stacks_given=True,
    )
    cols = evaluate(space=sp, model=load_model("kimi-k3"), context=context, batch=batch, eff=Efficiency()).cols
    return sp, cols, reason_codes(cols=cols, concurrency=batch, target_tpot_s=None, need_price=False)


@pytest.mark.parametrize("context, batch", [(131072, 1), (32768, 64)])
def test_plan_offers_uneven_ep_rows_on_nvl72_and_they_equal_fit(context, batch):
    """vLLM places 896 experts over ep 72 (13 on 32 devices, 12 on 40): plan's vectorised rows at an
    EP that does not divide the experts now fit, and each equals fit's JSON to the byte."""
    sp, cols, codes = nvl72_columns(context, batch)
    uneven = [i for i in range(sp.size) if 896 % int(cols.ep[i]) and int(cols.pp[i]) == 1]
    assert {int(cols.ep[i]) for i in uneven} >= {72}
    assert any(int(codes[i]) == 0 and int(cols.ep[i]) == 72 for i in uneven)  # offered: fits, no fallback
    for i in uneven:
        r = row(space=sp, cols=cols, i=i, rank=1)
        setup = make_setup(hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp, stack=r.stack)
        assert setup.plan.uneven  # (tp 3 rows also have vocab fallbacks: refused for those, as fit)
        f = fit(setup, Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=r.chunk_tokens))
        j = dump(f)
        for k in PER_DEVICE:
            assert getattr(r.per_device, k) == j["per_device"][k], (k, r)
        assert int(codes[i]) == f.reason and (codes[i] == 0) == j["fits"]
        if j["fits"]:
            d = decode_bound(setup, batch=batch, context_tokens=context, eff=Efficiency())
            assert r.tpot_ms == pytest.approx(d.step_s * 1e3, rel=1e-12), r


@functools.cache
def vllm_columns(hw: str, context: int, batch: int):
    sp = build_space(
        hardware=[load_hardware(hw)],
        stacks=[load_stack("vllm")],
        kv_dtypes=[None],
        chunks=[8192],
        max_chips=72,
        stacks_given=True,
    )
    cols = evaluate(space=sp, model=load_model("kimi-k3"), context=context, batch=batch, eff=Efficiency()).cols
    return sp, cols, reason_codes(cols=cols, concurrency=batch, target_tpot_s=None, need_price=False)


@pytest.mark.parametrize("hw, topology, tp, ep", [("nvidia-h200", "2x8", 8, 16), ("nvidia-gb200-nvl72", "72", 8, 72)])
def test_plan_row_counts_vllm_ep_collectives_as_fit(hw, topology, tp, ep):
    """vLLM EP on GPUs (all-gather + reduce-scatter over DP, then the TP all-reduce: tests/step/test_agrs.py):
    plan's columns count the calls and bytes a chip that fit's roofline counts, and the same TPOT."""
    context, batch = 32768, 64
    sp, cols, codes = vllm_columns(hw, context, batch)
    hit = [
        i
        for i in range(sp.size)
        if sp.topologies[int(sp.cols.topo[i])].text == topology
        and (int(sp.cols.tp[i]), int(sp.cols.ep[i]), int(sp.cols.pp[i])) == (tp, ep, 1)
    ]
    assert hit
    for i in hit:
        r = row(space=sp, cols=cols, i=i, rank=1)
        setup = make_setup(hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp, stack=r.stack)
        d = decode_bound(setup, batch=batch, context_tokens=context, eff=Efficiency())
        assert int(cols.comm_calls[i]) == d.comm.calls_per_step and d.comm.expert_calls_per_step == 3 * 92
        assert float(cols.comm_bytes_per_chip[i]) == pytest.approx(d.comm.bytes_per_chip_per_step, abs=0.5)
        f = fit(setup, Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=r.chunk_tokens))
        assert int(codes[i]) == f.reason
        if f.fits:
            assert r.tpot_ms == pytest.approx(d.step_s * 1e3, rel=1e-12), r
