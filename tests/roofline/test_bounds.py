"""roofline/ as pure functions: experts touched, router histograms, FLOP conservation across
devices, the step's arithmetic, efficiencies, probe latency, prefill chunking."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roofline_helpers import PROBE_RECORD, US, eff, setup

from k3plan.errors import K3PlanError
from k3plan.evidence.value import Evidence
from k3plan.roofline.bounds import check_efficiency, decode_bound, prefill_bound
from k3plan.roofline.comm import comm_cost
from k3plan.roofline.latency import collective_latency
from k3plan.step.work import experts_touched, load_histogram

E, K = 896, 16


# --- experts touched --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(e=st.integers(1, 1024), k=st.integers(1, 64), b=st.integers(1, 4096))
def test_experts_touched_bounds_and_monotone(e, k, b):
    k = min(k, e)
    t = experts_touched(num_experts=e, top_k=k, batch=b)
    assert k - 1e-9 <= t <= min(e, k * b) + 1e-9
    assert experts_touched(num_experts=e, top_k=k, batch=b + 1) >= t - 1e-9


@settings(max_examples=50, deadline=None)
@given(b=st.integers(1, 2048))
def test_uniform_histogram_equals_the_closed_form(b):
    uniform = [K / E] * E
    assert experts_touched(num_experts=E, top_k=K, batch=b, histogram=uniform) == pytest.approx(
        experts_touched(num_experts=E, top_k=K, batch=b), rel=1e-9
    )


def test_batch_1_touches_top_k():
    assert experts_touched(num_experts=E, top_k=K, batch=1) == pytest.approx(16)


def _write(tmp_path, name, payload) -> object:
    p = tmp_path / name
    p.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return p


@pytest.mark.parametrize("batch", [1, 2, 16, 256, 4096])
def test_histogram_concentrated_on_16_experts_touches_16_at_any_batch(tmp_path, batch):
    """Every token picks the same 16 experts: one layer reads 16 experts whatever the batch."""
    counts = [0] * E
    for i in range(0, 16 * 7, 7):
        counts[i] = 1000
    hist = load_histogram(_write(tmp_path, "h.json", counts), num_experts=E, top_k=K)
    assert sum(hist) == pytest.approx(K)
    assert experts_touched(num_experts=E, top_k=K, batch=batch, histogram=hist) == pytest.approx(16)
    s = setup()
    d = decode_bound(s, batch=batch, context_tokens=1024, eff=eff(), histogram=hist)
    assert d.experts_touched_per_layer == pytest.approx(16)
    assert d.ideal_bytes_per_step.experts == pytest.approx(16 * 17_547_264 * 92)
    # and {"counts": [...]} is read the same way
    hist2 = load_histogram(_write(tmp_path, "h2.json", {"counts": counts}), num_experts=E, top_k=K)
    assert hist2 == hist


def test_skewed_histogram_touches_fewer_experts_than_uniform(tmp_path):
    counts = [100] * 64 + [1] * (E - 64)
    hist = load_histogram(_write(tmp_path, "h.json", counts), num_experts=E, top_k=K)
    for b in (4, 64, 256):
        assert experts_touched(num_experts=E, top_k=K, batch=b, histogram=hist) < experts_touched(
            num_experts=E, top_k=K, batch=b
        )


@pytest.mark.parametrize(
    "payload",
    [
        "[1, 2",  # malformed JSON
        [1, 2],  # wrong length
        {"counts": 5},
        {"weights": [1] * E},
        '"x"',
        [-1] + [1] * (E - 1),
        ["a"] * E,
        [0] * E,  # all zero
        [True] * E,  # booleans are not counts
        "[NaN" + ", 1" * (E - 1) + "]",  # JSON NaN: was accepted and turned the bound into NaN
        "[Infinity" + ", 1" * (E - 1) + "]",
    ],
)
def test_bad_histogram_is_a_one_line_error(tmp_path, payload):
    with pytest.raises(K3PlanError, match="--router-histogram"):
        load_histogram(_write(tmp_path, "bad.json", payload), num_experts=E, top_k=K)


def test_binary_or_missing_histogram_is_a_k3plan_error(tmp_path):
    """A binary file raised UnicodeDecodeError (a traceback through the CLI) before the fix."""
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xd0\xff\x00garbage")
    for p in (binary, tmp_path / "missing.json", tmp_path):
        with pytest.raises(K3PlanError, match="--router-histogram"):
            load_histogram(p, num_experts=E, top_k=K)


# --- decode: FLOPs and bytes across devices -----------------------------------------------------


def test_dp_attention_flops_are_conserved_across_devices():
    """DP-attention on v7x x16 (tp=1, dp=32, EP over all 32 devices), B=256: 8 sequences a device.
    Summed over the devices, the linear FLOPs are exactly 2 x active params x 256.

    Before the fix the expert FLOPs were multiplied by dp once more (the whole batch's expert work
    on every device): 25.8 TFLOP a device instead of 1.67, which made B=256 decode look compute
    bound (75 ms vs 44 ms of HBM time) against the study's "decode is bandwidth bound"."""
    s = setup()
    assert (s.parallel.tp, s.parallel.ep, s.parallel.dp) == (1, 32, 32)
    d = decode_bound(s, batch=256, context_tokens=4096, eff=eff())
    active = s.model.inventory.active_params
    assert d.flops_per_device.linear * s.topology.devices == pytest.approx(2 * active * 256, rel=1e-12)
    assert d.binding == "memory"


def test_vllm_tpu_flops_cover_the_work_at_least_once():
    """TP=32 (dp=1): replicated tensors (router, q_a/kv_a) are computed on every device, so the sum
    over devices is at least the work, and not by more than those replicated tensors."""
    s = setup("2x2x4", "vllm-tpu", tp=32)
    d = decode_bound(s, batch=256, context_tokens=4096, eff=eff())
    work = 2 * s.model.inventory.active_params * 256
    total = d.flops_per_device.linear * s.topology.devices
    replicated = sum(
        t.params * t.active for t in s.model.inventory.text if t.role != "embed" and s.plan.shard_fraction(t) == 1.0
    )
    assert work <= total <= work + 2 * replicated * 256 * s.topology.devices * 1.000001


def test_ep_within_the_tp_group_routes_only_its_dp_groups_tokens():
    """vllm-tpu tp=16, dp=2, ep=16: each EP group serves its own DP group's 128 of 256 sequences,
    so a device touches the experts of 128 tokens; with ep=32 (all devices) those of all 256."""
    s_local = setup("2x2x4", "vllm-tpu", tp=16, dp=2, ep=16)
    s_all = setup("2x2x4", "vllm-tpu", tp=16, dp=2)
    d_local = decode_bound(s_local, batch=256, context_tokens=4096, eff=eff())
    d_all = decode_bound(s_all, batch=256, context_tokens=4096, eff=eff())
    assert d_local.experts_touched_per_layer == pytest.approx(experts_touched(num_experts=E, top_k=K, batch=128))
    assert d_all.experts_touched_per_layer == pytest.approx(experts_touched(num_experts=E, top_k=K, batch=256))
    # the one-copy view still counts the whole batch
    assert d_local.ideal_bytes_per_step.experts == pytest.approx(d_all.ideal_bytes_per_step.experts)
    # expert FLOPs a device: 128 tokens over 16 devices = 256 tokens over 32
    exp_local = d_local.flops_per_device.linear
    exp_all = d_all.flops_per_device.linear
    assert exp_local == pytest.approx(exp_all)


CONFIGS = [
    ("2x2x4", "dp-attention", None),
    ("2x2x4", "vllm-tpu", 32),
    ("2x4x4", "vllm-tpu", 64),
    ("2x4x4", "dp-attention", None),
    ("2*2x2x4", "dp-attention", None),
]


@settings(max_examples=40, deadline=None)
@given(
    cfg=st.sampled_from(CONFIGS),
    b=st.integers(1, 512),
    ctx=st.integers(1, 1 << 20),
    mfu=st.floats(0.05, 1.0),
    bw=st.floats(0.05, 1.0),
)
def test_decode_step_arithmetic(cfg, b, ctx, mfu, bw):
    topo, stack, tp = cfg
    s = setup(topo, stack, tp=tp)
    hw = s.hardware
    d = decode_bound(s, batch=b, context_tokens=ctx, eff=eff(mfu, bw))
    assert d.memory_s == pytest.approx(d.bytes_per_device.total() / (hw.hbm_bw_bytes_per_s_per_device * bw))
    assert d.compute_s == pytest.approx(d.flops_per_device.total() / (hw.flops_per_s_per_device("bf16") * mfu))
    assert d.step_s == pytest.approx(max(d.memory_s, d.compute_s) + d.comm.time_s)
    assert d.tpot_s == d.step_s
    assert d.tokens_per_s == pytest.approx(b / d.step_s)
    assert d.tokens_per_s_per_chip == pytest.approx(d.tokens_per_s / s.topology.chips)
    assert d.comm_share == pytest.approx(d.comm.time_s / d.step_s)
    assert d.comm.time_s == pytest.approx(
        d.comm.calls_per_step * d.comm.latency_s_per_call + d.comm.bytes_per_chip_per_step / d.comm.link_bw_bytes_per_s
    )
    roofs = {"memory": d.memory_s, "compute": d.compute_s, "communication": d.comm.time_s}
    assert roofs[d.binding] == max(roofs.values())
    # more batch or context never makes a step faster
    d2 = decode_bound(s, batch=b + 1, context_tokens=ctx + 1, eff=eff(mfu, bw))
    assert d2.step_s >= d.step_s
    assert all(getattr(d2.bytes_per_device, k) >= v for k, v in d.bytes_per_device.items())


def test_efficiencies_scale_their_roof():
    s = setup()
    full = decode_bound(s, batch=64, context_tokens=8192, eff=eff(0.5, 1.0))
    half = decode_bound(s, batch=64, context_tokens=8192, eff=eff(0.25, 0.5))
    assert half.memory_s == pytest.approx(2 * full.memory_s)
    assert half.compute_s == pytest.approx(2 * full.compute_s)
    assert half.ideal_step_s == pytest.approx(2 * full.ideal_step_s)
    fp8 = decode_bound(s, batch=64, context_tokens=8192, eff=eff(0.5, 1.0, "fp8"))
    assert fp8.compute_s == pytest.approx(full.compute_s / 2)


@pytest.mark.parametrize(
    "mfu,bw",
    [(0, 1), (-0.1, 1), (1.5, 1), (0.3, 0), (0.3, 1.01), (math.nan, 1), (0.3, math.inf), (0.3, 1e-320), (0.0009, 1)],
)
def test_check_efficiency_rejects_outside_0_1(mfu, bw):
    with pytest.raises(K3PlanError, match=r"expected a fraction from 0.001 to 1"):
        check_efficiency(mfu=mfu, bw_efficiency=bw)


def test_check_efficiency_accepts_one():
    assert check_efficiency(mfu=1.0, bw_efficiency=1.0).mfu == 1.0


# --- probe latency ----------------------------------------------------------------------------


def _record_copy(tmp_path, name: str, **changes):
    rec = json.loads(PROBE_RECORD.read_text())
    value = changes.pop("value", None)
    rec.update(changes)
    if value is not None:
        for pt in rec["points"]:
            pt["value"] = value
    (tmp_path / name).write_text(json.dumps(rec))


def test_the_newest_chained_record_sets_the_latency(tmp_path):
    """The spec default is also 9.88 us, so a record with another value shows it is really used."""
    shutil.copy(PROBE_RECORD, tmp_path / PROBE_RECORD.name)
    _record_copy(tmp_path, "newer.json", value=4.0e-6, date="2027-01-01T00:00:00Z")
    _record_copy(tmp_path, "independent.json", value=2.35e-6, date="2028-01-01T00:00:00Z", mode="independent")
    _record_copy(tmp_path, "other-chip.json", value=1.0e-6, date="2028-01-01T00:00:00Z", device_kind="TPU v6 lite")
    _record_copy(tmp_path, "failed.json", value=1.0e-6, date="2028-01-01T00:00:00Z", ok=False)
    s = setup("2x4x4")
    d = decode_bound(s, batch=1, context_tokens=4096, eff=eff(), evidence=Evidence.build(tmp_path))
    assert d.comm.latency_s_per_call == pytest.approx(4.0 * US)
    assert "newer.json" in d.comm.latency_source
    assert d.comm.latency_time_s == pytest.approx(184 * 4.0 * US)


def test_no_matching_record_falls_back_to_the_spec(tmp_path, no_shipped_records):
    s = setup("2x4x4")
    d = decode_bound(s, batch=1, context_tokens=4096, eff=eff(), evidence=Evidence.build(tmp_path))
    assert d.comm.latency_source.startswith("tpu-v7x spec")
    # an all-reduce stack finds no all-reduce record among the a2a ones
    v = setup("2x4x4", "vllm-tpu", tp=64)
    assert (
        collective_latency(v.hardware, op="all-reduce", link="scale_up", evidence=Evidence.build(PROBE_RECORD.parent))
        is None
    )


def test_probe_records_describe_ici_only():
    """Over DCN the spec's scale-out latency stays, even with --probes."""
    s = setup("2*2x2x4")
    d = decode_bound(s, batch=1, context_tokens=4096, eff=eff(), evidence=Evidence.build(PROBE_RECORD.parent))
    assert d.comm.link_name == "DCN"
    assert d.comm.latency_source == "tpu-v7x spec: DCN latency a call"
    assert d.comm.latency_s_per_call == pytest.approx(s.hardware.scale_out.latency_s)


def test_probes_must_be_a_folder(tmp_path):
    s = setup()
    for bad in (tmp_path / "missing", PROBE_RECORD):
        with pytest.raises(K3PlanError, match="not a folder of probe records"):
            decode_bound(s, batch=1, context_tokens=4096, eff=eff(), evidence=Evidence.build(bad))  # built: refused


# --- prefill ----------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt,chunk,chunks", [(4096, 8192, 1), (131072, 8192, 16), (10000, 4096, 3), (1, 1, 1)])
def test_prefill_chunking_and_ttft(prompt, chunk, chunks):
    s = setup()
    p = prefill_bound(s, prompt_tokens=prompt, chunk_tokens=chunk, eff=eff())
    assert p.chunks == chunks and p.chunk_tokens == min(prompt, chunk)
    assert p.compute_s == pytest.approx(prompt / p.prompt_tokens_per_s)  # one prompt, on its DP group
    assert p.ttft_s == pytest.approx(
        max(p.compute_s, chunks * p.comm.bandwidth_time_s) + chunks * p.comm.latency_time_s
    )
    assert p.comm == comm_cost(s, tokens=p.chunk_tokens)


def test_a_prompt_runs_on_its_dp_group():
    """dp-attention on 2x2x4 (32 devices, tp 1, dp 32, ep 32): a prompt's attention and non-expert matmuls
    run on its one device, its routed experts over the 32 of the EP group -- not the whole model over all
    32 (the deployment's rate, tokens_per_s, which the porting study tabulates). By hand: a token's time is
    (linear - experts + attention) / (F x 1 x MFU) + experts / (F x 32 x MFU), the experts' FLOPs
    2 x top-k x 3 matrices x latent x intermediate x MoE layers (K3: 2 x 16 x 3 x 3,584 x 3,072 x 92)."""
    s = setup()
    e = eff()
    p = prefill_bound(s, prompt_tokens=8192, chunk_tokens=8192, eff=e)
    moe = s.model.spec.moe
    assert (moe.top_k, moe.expert_in, moe.expert_intermediate, s.model.spec.n_moe) == (16, 3584, 3072, 92)
    assert p.expert_flops_per_token == 2 * 16 * 3 * 3584 * 3072 * 92
    assert (p.devices, p.expert_devices) == (1, 32)
    f = s.hardware.flops_per_s_per_device(e.compute_dtype) * e.mfu
    lin, att, x = p.linear_flops_per_token, p.attention_flops_per_token, p.expert_flops_per_token
    assert 1 / p.prompt_tokens_per_s == pytest.approx((lin - x + att) / f + x / (32 * f), rel=1e-12)
    assert p.tokens_per_s == pytest.approx(32 * f / (lin + att), rel=1e-12)  # the deployment's: all 32 busy
    assert p.ttft_s >= 8192 / p.prompt_tokens_per_s > 15 * 8192 / p.tokens_per_s  # ~18x: K3 is ~47% experts


def test_at_dp_1_a_prompt_has_every_device():
    s = setup(stack="vllm-tpu", tp=32)
    p = prefill_bound(s, prompt_tokens=8192, chunk_tokens=8192, eff=eff())
    assert (p.devices, p.expert_devices) == (32, 32)
    assert p.prompt_tokens_per_s == p.tokens_per_s  # the same float: nothing moved for a DP-1 deployment


def test_prefill_attention_grows_with_the_prompt():
    s = setup()
    short = prefill_bound(s, prompt_tokens=1024, chunk_tokens=1024, eff=eff())
    long = prefill_bound(s, prompt_tokens=262144, chunk_tokens=8192, eff=eff())
    assert long.attention_flops_per_token > short.attention_flops_per_token
    assert long.tokens_per_s < short.tokens_per_s
    assert long.linear_flops_per_token == short.linear_flops_per_token
