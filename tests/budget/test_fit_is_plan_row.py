"""fit is row 0 of plan (issue 51): over random configurations -- bundled models (Kimi K3, DeepSeek-V4 and V4.1, dense-MLA
DeepSeek-V3, whose vLLM block the GPU sets, multimodal Kimi-K2.6 and hybrid Kimi-Linear), TPU and GPU hardware, every stack with its KV dtype or fp8, every (tp, ep, dp, pp) split plan's space offers, context,
batch and chunk -- fit's per-device answer equals plan's row field by field: weights, replicated weights, KV, state,
temporaries, reserve, free, the bytes a token and a sequence, the sequences held and the most the room holds, the
verdict code, where the temporaries come from, and the decode time. Both read the one configuration value and the
one memory assembly (k3plan.budget.config); this holds that nothing beside it drifts."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3plan.budget.fit import ANALYTIC_TEMP, Workload, fit
from k3plan.budget.result import TEMP_EVIDENCE, PerDevice
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

MODELS = ("kimi-k3", "deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash", "deepseek-v3", "kimi-k2.6", "kimi-linear-48b-a3b")
HARDWARE = ("tpu-v7x", "nvidia-h200", "nvidia-b200")


@functools.cache
def space(model: str):
    m = load_model(model)
    moe = m.spec.moe
    # the stacks for the model, as plan.search builds them (Stack.for_model)
    return build_space(hardware=[load_hardware(h) for h in HARDWARE], stacks=[load_stack(s).for_model(m) for s in list_stacks()],
                       kv_dtypes=[None, "fp8"], chunks=[2048, 8192], max_chips=32, stacks_given=False,
                       experts=moe.num_experts, expert_width=moe.expert_intermediate)  # fmt: skip


@functools.cache
def columns(model: str, context: int, batch: int):
    cols = evaluate(space=space(model), model=load_model(model), context=context, batch=batch, eff=Efficiency()).cols
    return cols, reason_codes(cols=cols, concurrency=batch, target_tpot_s=None, need_price=False)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), context=st.sampled_from([8192, 100000, 131072]), batch=st.sampled_from([1, 16]),
       evidence=st.sampled_from(range(len(TEMP_EVIDENCE))), pick=st.floats(0, 1, exclude_max=True))  # fmt: skip
def test_fit_is_plans_row_field_by_field(model, context, batch, evidence, pick):
    sp = space(model)
    cols, codes = columns(model, context, batch)
    pool = np.flatnonzero(cols.temp_source == evidence)  # a row of each kind of temp evidence, where plan has one
    pool = pool if pool.size else np.arange(sp.size)
    i = int(pool[int(pick * pool.size)])
    r = row(space=sp, cols=cols, i=i, rank=1)
    setup = make_setup(model=model, hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp,
                       stack=r.stack, kv_dtype=r.kv_dtype_override)  # fmt: skip
    f = fit(setup, Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=r.chunk_tokens))
    assert r.temp_evidence == f.temp_evidence  # where the temporaries come from (budget.result.TEMP_EVIDENCE)
    if None in (f.temp.prefill_bytes, f.temp.decode_bytes):  # a calibration's graph ran out of memory here
        # the one place the two still write it differently: fit counts the stages that compiled and refuses
        # (reason "calibration"), plan stands the refused graph's temp in as all usable HBM (reason "budget")
        # (at least all of it: the other stage may be outside its range at max(analytic, largest measured), issue 50)
        assert not f.fits and int(codes[i]) != 0 and r.per_device.temp_bytes >= int(cols.usable[i])
        return
    for k in fields(PerDevice):  # one PerDevice: weights, kv, state, temp, reserve, free, ...
        assert getattr(r.per_device, k) == getattr(f.per_device, k), (k, r)
    assert r.max_sequences == f.capacity.max_sequences
    assert int(codes[i]) == f.reason and (codes[i] == 0) == f.fits  # the verdict, its reason code
    if f.fits:  # FITS IF (issue 50): fit's unverified temp is plan's marked row, on either side
        assert r.temp_unverified == (f.unverified is not None), (r.temp_evidence, f.unverified)
    source = {"analytic": ANALYTIC_TEMP, "temp model": "temp model ", "compiled": "compiled calibration ",
              "measured": "measured calibration "}[f.temp_evidence]  # fmt: skip
    assert any(s.startswith(source) or s.startswith("max(analytic, largest measured in " + source)
               for s in (f.provenance.temp_prefill, f.provenance.temp_decode)), f.provenance  # fmt: skip
    d = decode_bound(setup, batch=batch, context_tokens=context, eff=Efficiency())  # fit's speed line
    assert float(cols.tpot_s[i]) == pytest.approx(d.step_s, rel=1e-12), r


def test_a_calibrated_row_outside_its_measured_range_is_unverified_in_both():
    """K3 on 2x2x4 TP 32, torchtpu-vllm, 32,768 tokens: the compiled calibration has no 8,192-token chunk into a
    32,768-token context (k3plan/budget/measured_range.py), so fit says FITS IF and plan's row is marked."""
    cols, codes = columns("kimi-k3", 32768, 1)
    sp = space("kimi-k3")
    hits = [
        i
        for i in range(sp.size)
        if codes[i] == 0 and int(cols.chunk[i]) == 8192
        for r in [row(space=sp, cols=cols, i=i, rank=1)]
        if (r.hardware, r.topology, r.tp, r.stack, r.temp_evidence)
        == ("tpu-v7x", "2x2x4", 32, "torchtpu-vllm", "compiled")
        and r.kv_dtype_override is None
    ]
    assert hits
    r = row(space=sp, cols=cols, i=hits[0], rank=1)
    setup = make_setup(model="kimi-k3", hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp,
                       pp=r.pp, stack=r.stack)  # fmt: skip
    f = fit(setup, Workload(context_tokens=32768, batch=1, prefill_chunk_tokens=8192))
    assert f.fits and f.unverified is not None and r.temp_unverified


@pytest.mark.parametrize("hardware", ["nvidia-h200", "nvidia-b200"])
def test_v41_on_vllm_is_the_engine_s_charge_in_fit_and_plan_alike(hardware):
    """DeepSeek-V4.1 on vLLM's CUDA backends: the KV and state a sequence are vLLM's planner's charge (its records of
    the GPU's family, its window pages holding the batches in flight: step/dsv4_cache.engine_charge), per (stack,
    machine, chunk) in plan's columns; fit's row equals plan's at both chunks, and the charge is what vLLM's start
    check charges a request (Dsv41Pages: blocks a request x a block's bytes)."""
    from k3plan.engines.vllm.attention_config import SM100_FAMILY
    from k3plan.engines.vllm.dsv4_pages import dsv41_pages
    from k3plan.engines.vllm.releases import NEWEST_RELEASE, default_in_flight

    model, context = "deepseek-v4.1-flash", 131072
    cols, _ = columns(model, context, 1)
    sp = space(model)
    hw = [h.name for h in sp.hardware].index(hardware)
    vllm = [i for i, v in enumerate(sp.variants) if v.name == "vllm"]
    d = load_model(model).spec.dsv4
    for chunk in (2048, 8192):
        rows = np.flatnonzero((cols.hw == hw) & np.isin(cols.variant, vllm) & (cols.chunk == chunk) & (cols.pp == 1))
        r = row(space=sp, cols=cols, i=int(rows[0]), rank=1)
        setup = make_setup(model=model, hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp,
                           stack=r.stack, kv_dtype=r.kv_dtype_override)  # fmt: skip
        f = fit(setup, Workload(context_tokens=context, batch=1, prefill_chunk_tokens=chunk))
        for k in fields(PerDevice):
            assert getattr(r.per_device, k) == getattr(f.per_device, k), (k, chunk)
        # the block vLLM resolves on the GPU: 128 on SM100, 64 on Hopper (engines/vllm/dsv4_pages.py v41_default_block)
        # the groups of the newest release, which a question without one reads (engines/vllm/releases.py): packed
        # (engines/vllm/dsv4_pages.py V41_PACKED_SOURCE), a block 212,256 B on SM100 (whole rows of 528 B), 116,928 on
        # Hopper -- neither a whole number of bytes a token and layer, charged by the budget in whole blocks
        pages = dsv41_pages(
            d,
            block_tokens=128 if hardware in SM100_FAMILY else 64,
            sm100=hardware in SM100_FAMILY,
            release=NEWEST_RELEASE,
        )
        # its window pages hold the newest release's batches in flight (engines/vllm/releases.py: 2 at PP 1)
        in_flight = chunk * default_in_flight()
        engine = pages.blocks_per_request(max_model_len=context, max_num_batched_tokens=in_flight) * pages.block_bytes
        assert f.per_device.kv_bytes + f.per_device.state_bytes == engine


@pytest.mark.parametrize(("hardware", "kv_dtype", "block"), [("nvidia-h200", None, 16), ("nvidia-h200", "fp8", 64),
                                                             ("nvidia-b200", None, 32)])  # fmt: skip
def test_a_dense_mla_model_on_vllm_pages_at_the_gpus_block_in_fit_and_plan_alike(hardware, kv_dtype, block):
    """DeepSeek-V3 on vLLM at its default release: the block is the one that release's default MLA backend takes on the
    GPU (engines/vllm/mla_block.py dense_mla_block: FLASH_ATTN_MLA's 16 on Hopper, FLASHMLA's 64 for an fp8 cache,
    FLASHINFER_MLA's 32 on Blackwell), read once (Stack.dense_mla_block) by fit and by plan's columns (which until
    session 50 read the stack's 64 for every GPU). 100,000 tokens are not a whole number of 64-token blocks, so the
    KV a sequence shows the block."""
    context = 100000
    sp = space("deepseek-v3")
    cols, _ = columns("deepseek-v3", context, 1)
    hits = [
        r
        for i in range(sp.size)
        for r in [row(space=sp, cols=cols, i=i, rank=1)]
        if (r.hardware, r.stack, r.kv_dtype_override, r.pp) == (hardware, "vllm", kv_dtype, 1)
    ]
    assert hits
    r = hits[0]
    setup = make_setup(model="deepseek-v3", hardware=hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp,
                       pp=r.pp, stack="vllm", kv_dtype=kv_dtype)  # fmt: skip
    assert setup.stack.dense_mla_block(hardware)[0] == block
    f = fit(setup, Workload(context_tokens=context, batch=1, prefill_chunk_tokens=r.chunk_tokens))
    per_token = f.per_device.kv_bytes_per_token
    assert f.per_device.kv_bytes == r.per_device.kv_bytes == -(-context // block) * block * per_token


def test_a_multimodal_model_s_reserve_is_sglang_s_vision_cut_in_fit_and_plan_alike():
    """Kimi-K2.6 (a MoonViT tower) under the dp-attention stack on an H200: SGLang's derived fraction cuts for the vision
    encoder (AutoFraction.vlm), a rule of the options the stack takes when bound to a GPU. plan binds its stacks after
    Stack.for_model reads the model, so until session 50 its rows held no vision encoder and reserved less than fit
    (248 of 1,404 rows at 8,192 tokens)."""
    sp = space("kimi-k2.6")
    cols, _ = columns("kimi-k2.6", 8192, 1)
    rows = [
        r
        for i in range(sp.size)
        for r in [row(space=sp, cols=cols, i=i, rank=1)]
        if (r.hardware, r.stack, r.tp, r.dp, r.chunk_tokens) == ("nvidia-h200", "dp-attention", 2, 1, 2048)
    ]
    assert rows
    r = rows[0]
    setup = make_setup(model="kimi-k2.6", hardware=r.hardware, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp,
                       pp=r.pp, stack=r.stack, kv_dtype=r.kv_dtype_override)  # fmt: skip
    assert setup.stack.vision_encoder is not None
    f = fit(setup, Workload(context_tokens=8192, batch=1, prefill_chunk_tokens=r.chunk_tokens))
    assert f.per_device.reserve_bytes == r.per_device.reserve_bytes


def test_deepseek_v4_s_fp4_experts_under_sglang_are_held_as_the_gpu_holds_them_in_fit_and_plan_alike():
    """DeepSeek-V4-Flash under SGLang's stack (its DeepEP all-to-all) on an H200 and a B200 at one split: the FP4
    experts' scales stay fp32 on the SM90 GPU and are packed to UE8M0 int32 (1 B a 32-block) on the SM100 one
    (engines/sglang/fp4_scales.py, read through Stack.on_hardware), in plan's weight columns per GPU as in fit's
    setup -- until session 51 plan and a plain fit priced fp32 on every GPU, where fit --serve packed them on B200."""
    model = "deepseek-v4-flash"
    sp = space(model)
    cols, _ = columns(model, 8192, 1)
    rows: dict[str, object] = {}
    for i in range(sp.size):
        r = row(space=sp, cols=cols, i=i, rank=1)
        if (r.stack, r.tp, r.dp, r.pp, r.kv_dtype_override) == ("sglang", 8, 1, 1, None):
            rows.setdefault(r.hardware, r)
    assert {"nvidia-h200", "nvidia-b200"} <= set(rows)
    got = {}
    for hw in ("nvidia-h200", "nvidia-b200"):
        r = rows[hw]
        setup = make_setup(model=model, hardware=hw, topology=r.topology, tp=r.tp, ep=r.ep, dp=r.dp, pp=r.pp,
                           stack=r.stack, kv_dtype=r.kv_dtype_override)  # fmt: skip
        f = fit(setup, Workload(context_tokens=8192, batch=1, prefill_chunk_tokens=r.chunk_tokens))
        assert f.per_device.weights_bytes == r.per_device.weights_bytes
        got[hw] = (setup.stack.runtime_format("expert", "ds_fp4"), r.per_device.weights_bytes, setup)
    assert got["nvidia-h200"][0] == "mxfp4_f32scale" and got["nvidia-b200"][0] == "mxfp4_ue8m0_packed"
    setup = got["nvidia-b200"][2]
    experts = [t for t in setup.model.inventory.text if t.role == "expert" and t.fmt == "ds_fp4"]
    blocks = sum(t.params for t in experts) // 32 // setup.parallel.ep  # a GPU's share of the 32-blocks
    # fp32's 4 B a block against the packed 1 B (V4's shapes pad nothing: test_sglang_fp4_scales)
    assert got["nvidia-h200"][1] - got["nvidia-b200"][1] == pytest.approx(3 * blocks, rel=1e-6)
