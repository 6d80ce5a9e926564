"""fit is row 0 of plan (issue 51): over random configurations -- bundled models (Kimi K3 and DeepSeek-V4), TPU and
GPU hardware, every stack with its KV dtype or fp8, every (tp, ep, dp, pp) split plan's space offers, context,
batch and chunk -- fit's per-device answer equals plan's row field by field: weights, replicated weights, KV, state,
temporaries, reserve, free, the bytes a token and a sequence, the sequences held and the most the room holds, the
verdict code, where the temporaries come from, and the decode time. Both read the one configuration value and the
one memory assembly (k3plan.budget.config); this holds that nothing beside it drifts."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3plan.budget.fit import ANALYTIC_TEMP, Workload, fit
from k3plan.budget.result import PerDevice
from k3plan.engines.stack import list_stacks, load_stack
from k3plan.hardware import load_hardware
from k3plan.models import load_model
from k3plan.plan.evaluate import evaluate
from k3plan.plan.reasons import reason_codes
from k3plan.plan.rows import row
from k3plan.plan.space import build_space
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.setup import make_setup
from k3plan.structs import fields

MODELS = ("kimi-k3", "deepseek-v4-flash", "deepseek-v4-pro")
HARDWARE = ("tpu-v7x", "nvidia-h200", "nvidia-b200")


@functools.cache
def space(model: str):
    spec = load_model(model).spec
    moe = spec.moe
    return build_space(hardware=[load_hardware(h) for h in HARDWARE], stacks=[load_stack(s) for s in list_stacks()],
                       kv_dtypes=[None, "fp8"], chunks=[2048, 8192], max_chips=32, stacks_given=False,
                       experts=moe.num_experts, expert_width=moe.expert_intermediate)  # fmt: skip


@functools.cache
def columns(model: str, context: int, batch: int):
    cols = evaluate(space=space(model), model=load_model(model), context=context, batch=batch, eff=Efficiency()).cols
    return cols, reason_codes(cols=cols, concurrency=batch, target_tpot_s=None, need_price=False)


def evidence_kind(source: str) -> str:
    """fit's temp provenance in plan's words (plan.rows.TEMP_EVIDENCE)."""
    if source == ANALYTIC_TEMP:
        return "analytic"
    if source.startswith("temp model") or "temp model" in source.split(":")[0]:
        return "temp model"
    return "measured" if source.startswith("measured") else "compiled"


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), context=st.sampled_from([8192, 131072]), batch=st.sampled_from([1, 16]),
       pick=st.floats(0, 1, exclude_max=True))  # fmt: skip
def test_fit_is_plans_row_field_by_field(model, context, batch, pick):
    sp = space(model)
    cols, codes = columns(model, context, batch)
    i = int(pick * sp.size)
    r = row(space=sp, cols=cols, i=i, rank=1)
    setup = make_setup(model=model, hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp,
                       stack=r.stack, kv_dtype=r.kv_dtype_override)  # fmt: skip
    f = fit(setup, Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=r.chunk_tokens))
    for k in fields(PerDevice):  # one PerDevice: weights, kv, state, temp, reserve, free, ...
        assert getattr(r.per_device, k) == getattr(f.per_device, k), (k, r)
    assert r.max_sequences == f.capacity.max_sequences
    assert int(codes[i]) == f.reason and (codes[i] == 0) == f.fits  # the verdict, its reason code
    binding = f.temp.prefill_bytes if f.temp.binding == "prefill" else f.temp.decode_bytes
    src = f.provenance.temp_prefill if f.temp.binding == "prefill" else f.provenance.temp_decode
    assert binding == f.per_device.temp_bytes
    if r.temp_evidence != "analytic":  # plan names the evidence a row's calibration or model gave
        assert (
            r.temp_evidence == evidence_kind(src)
            or evidence_kind(f.provenance.temp_prefill if src == f.provenance.temp_decode else f.provenance.temp_decode)
            == r.temp_evidence
        ), (r.temp_evidence, f.provenance)
    else:
        assert src == ANALYTIC_TEMP or "max(analytic" in src, (src, r)
    d = decode_bound(setup, batch=batch, context_tokens=context, eff=Efficiency())  # fit's speed line
    assert float(cols.tpot_s[i]) == pytest.approx(d.step_s, rel=1e-12), r
