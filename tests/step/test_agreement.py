"""The three disagreements of issue 10, pinned: fit, plan, report and roofline answer the same
question the same way because they evaluate the same functions (k3plan.step)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import load_stack
from k3plan.evidence.value import Evidence
from k3plan.hardware import load_hardware
from k3plan.models import load_model
from k3plan.plan import plan
from k3plan.plan.evaluate import evaluate
from k3plan.plan.reasons import reason_codes
from k3plan.plan.space import build_space
from k3plan.report.viable import smallest_viable
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.setup import make_setup

REPO = Path(__file__).resolve().parents[2]
SGLANG_AR = "sglang:moe_a2a_backend=none"


def test_fit_and_plan_agree_on_h200_sglang_2x8():
    """Was: fit said FITS (it only warned that the EP group spans slices), plan rejected it (its own
    verdict refused an EP group across slices). One verdict now (step.verdict): both accept it,
    both warn, and both cost its collectives over the scale-out link."""
    # SGLang with its own default all-reduce MoE (no DeepEP): shared experts split, so the point fits
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=16, ep=16, stack=SGLANG_AR)
    r = fit(setup, Workload(context_tokens=4500, batch=32, prefill_chunk_tokens=4500))
    assert r.fits and r.reason == 0
    assert any(
        w.startswith("cross-node EP: the EP group (16 devices) spans 2 NVLink domains of 8") and "InfiniBand" in w
        for w in r.warnings
    )
    p = plan(hardware=["nvidia-h200"], stacks=[SGLANG_AR], max_chips=16, context=4500, concurrency=32, top=100)
    rows = [x for x in p.ranked if (x.topology, x.tp, x.ep, x.dp) == ("2x8", 16, 16, 1)]
    assert len(rows) == 1
    assert rows[0].per_device.free_bytes == r.per_device.free_bytes
    # one wording of the cross-node warning (issue 10 item 6): plan's note is fit's warning, word for word;
    # this stack's MoE collective is an all-reduce (moe_a2a_backend=none)
    (cross,) = [w for w in r.warnings if w.startswith("cross-node EP")]
    assert cross in rows[0].layout_notes and "the experts' all-reduce runs over InfiniBand" in cross
    d = decode_bound(setup, batch=32, context_tokens=4500, eff=Efficiency())
    assert d.comm.link == "scale_out"
    assert rows[0].tpot_ms == pytest.approx(d.tpot_s * 1e3, rel=1e-9)


def test_every_h200_configuration_gets_fits_verdict_from_plan():
    """Each configuration of plan's space: fit's verdict code equals plan's, term for term."""
    m = load_model("kimi-k3")
    space = build_space(
        hardware=[load_hardware("nvidia-h200")],
        stacks=[load_stack("sglang")],
        kv_dtypes=[None],
        chunks=[4500],
        max_chips=16,
        stacks_given=True,
    )
    cols = evaluate(space=space, model=m, context=4500, batch=32, eff=Efficiency()).cols
    codes = reason_codes(cols=cols, concurrency=32, target_tpot_s=None, need_price=False)
    for i in range(space.size):
        s = make_setup(
            hardware="nvidia-h200",
            topology=space.topologies[cols.topo[i]].text,
            tp=int(cols.tp[i]),
            pp=int(cols.pp[i]),
            ep=int(cols.ep[i]),
            dp=int(cols.dp[i]),
            stack="sglang",
        )
        r = fit(s, Workload(context_tokens=4500, batch=32, prefill_chunk_tokens=4500))
        assert r.reason == int(codes[i]) and r.fits == (codes[i] == 0), (s.topology.text, s.parallel)


def test_report_pick_is_plans_first_row():
    """Was: plan picked 2x4x4 tp=4 dp=16 (fewest chips, then TPOT) and report 2x4x4 tp=8 dp=8 (its own
    search, most free HBM). Since issue 15 item 1 the temp of a configuration no calibration matches is the
    shipped temp model's upper end, not the analytic lower bound: 64 sequences of 131,072 tokens no longer fit
    any v7x topology with vllm-tpu (both say so), 16 do, on the same pick in both. Since issue 34 the stack is
    torchtpu-vllm (vllm-tpu its old name), whose temporaries run in the 1 - utilization share: 16 fit on 2x4x4."""
    p = plan(hardware=["tpu-v7x"], stacks=["vllm-tpu"], context=131072, concurrency=64, top=1)
    chosen, _ = smallest_viable(
        model="kimi-k3", hardware="tpu-v7x", stack="vllm-tpu", contexts=[131072], concurrency=64, max_chips=10**9
    )
    assert p.recommended is None and chosen[131072].setup is None
    p = plan(hardware=["tpu-v7x"], stacks=["vllm-tpu"], context=131072, concurrency=16, top=1)
    chosen, _ = smallest_viable(
        model="kimi-k3", hardware="tpu-v7x", stack="vllm-tpu", contexts=[131072], concurrency=16, max_chips=10**9
    )
    ch = chosen[131072]
    top = p.recommended
    assert (
        (ch.setup.topology.text, ch.setup.parallel.tp, ch.setup.parallel.ep, ch.setup.parallel.dp)
        == (top.topology, top.tp, top.ep, top.dp)
        == ("2x4x4", 16, 64, 4)
    )
    assert ch.result.fits and top.temp_evidence == "temp model"
    assert ch.result.per_device.free_bytes == top.per_device.free_bytes
    d = decode_bound(ch.setup, batch=16, context_tokens=131072, eff=Efficiency())
    assert d.tpot_s * 1e3 == pytest.approx(top.tpot_ms, rel=1e-9)


@pytest.fixture()
def a2a_only(tmp_path):
    """A probe folder holding only an all-to-all latency record of the TPU7x (none for all-reduce)."""
    src = REPO / "k3plan/evidence/probes/tpu7x-a2a-chained-porting-study.json"
    shutil.copy(src, tmp_path / src.name)
    return tmp_path


def test_an_all_to_all_record_is_not_the_latency_of_an_all_reduce_stack(a2a_only):
    """Was: plan --probes substituted the a2a record as the ICI latency of every stack, fit used
    the spec for vllm-tpu (experts by all-reduce)."""
    p = plan(
        hardware=["tpu-v7x"], stacks=["vllm-tpu"], context=131072, concurrency=1, evidence=Evidence.build(a2a_only)
    )
    setup = make_setup(
        hardware="tpu-v7x", topology=p.recommended.topology, tp=p.recommended.tp, ep=p.recommended.ep, stack="vllm-tpu"
    )
    d = decode_bound(setup, batch=1, context_tokens=131072, eff=Efficiency(), evidence=Evidence.build(a2a_only))
    assert d.comm.op == "all-reduce" and d.comm.latency_source.startswith("tpu-v7x spec")
    said = [a for a in p.assumptions if "latency of torchtpu-vllm" in a]
    assert said and said[0].endswith(d.comm.latency_source)
    # the row's TPOT is the decode bound's, unless a serving benchmark stands behind it (issue 38: the nightly
    # of 2x2x4 TP 32 transfers to 131,072 tokens), which the row then names
    if p.recommended.tpot_source is None:
        assert p.recommended.tpot_ms == pytest.approx(d.tpot_s * 1e3, rel=1e-9)
    else:
        assert "nightly" in p.recommended.tpot_source and p.recommended.tpot_ms > d.tpot_s * 1e3


def test_an_all_to_all_stack_uses_the_all_to_all_record(a2a_only):
    st = next(s for s in ("jax-native", "dp-attention", "sglang") if load_stack(s).collectives.experts == "all_to_all")
    setup = make_setup(hardware="tpu-v7x", topology="2x4x4", tp=8, stack=st)
    d = decode_bound(setup, batch=1, context_tokens=131072, eff=Efficiency(), evidence=Evidence.build(a2a_only))
    assert d.comm.op == "all-to-all" and "a2a" in d.comm.latency_source
    p = plan(hardware=["tpu-v7x"], stacks=[st], context=131072, concurrency=1, evidence=Evidence.build(a2a_only))
    assert any(a.endswith(d.comm.latency_source) for a in p.assumptions)
    assert np.isfinite(p.recommended.tpot_ms)


def test_the_cross_node_ep_warning_has_one_wording_in_fit_and_plan(cli):
    """issue 10 item 6: for `-H nvidia-h200 -t 2x8 --tp 16 --ep 16 --stack sglang` fit warned "the experts'
    collectives run over InfiniBand" and plan "the experts' all-to-all runs over InfiniBand". One
    function (step.collective.cross_node_ep_warning) words it from the stack's Collective now."""
    import json

    r = cli("fit", "-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "--ep", "16", "--stack", "sglang", "--json")
    (w,) = [x for x in json.loads(r.stdout)["warnings"] if x.startswith("cross-node EP")]
    # H200 spec: InfiniBand 50 GB/s a GPU, 20 us a call; sglang's default MoE backend is DeepEP's all-to-all
    assert w == (
        "cross-node EP: the EP group (16 devices) spans 2 NVLink domains of 8; the experts' all-to-all runs over "
        "InfiniBand (50 GB/s a GPU, 20 us a call, nvidia-h200 spec)"
    )
    p = plan(hardware=["nvidia-h200"], stacks=["sglang"], max_chips=16, context=4500, concurrency=1, top=1000)
    notes = [n for x in p.ranked if (x.topology, x.tp, x.ep) == ("2x8", 16, 16) for n in x.layout_notes]
    assert w in notes
