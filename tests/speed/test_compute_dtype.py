"""The weight matmuls compute in the dtype the stack's engine kernel runs for their weight format
(Stack.compute_dtype, cited in each stack YAML), so their FLOP time reads that dtype's peak: DeepSeek-V3's
block-fp8 experts under vLLM on H200 are W8A8 (the fp8 peak), K3's MXFP4 experts stay bf16 under vLLM
(its default BF16-activation MXFP4 kernels) and under tpu-inference's flax_nnx model; tpu-inference's
model_impl=vllm path runs them W4A8 (fp8 on v7x), and its fp8 block weights W8A8. A dtype the hardware has
no figure for falls back to the bf16 peak and says so."""

from __future__ import annotations

import dataclasses

import pytest

from k3plan.engines.stack import ComputeDtype, FormatCompute, Source, load_stack, updated
from k3plan.setup import make_setup
from k3plan.speed.expected import op_time
from k3plan.speed.peaks import Peaks
from k3plan.speed.stage import prefill_op_costs

H200_BF16 = 989e12  # NVIDIA datasheet, dense (hardware_specs/nvidia-h200.yaml)
H200_FP8 = 1979e12
H200_HBM = 4.8e12


def _experts(costs):
    return [c for c in costs if c.kind == "grouped_matmul"]


def test_deepseek_v3_experts_on_h200_vllm_run_at_the_fp8_peak():
    s = make_setup(model="deepseek-v3", hardware="nvidia-h200", topology="8", tp=8, stack="vllm")
    costs = prefill_op_costs(s, chunk=8192, context=8192)
    experts = _experts(costs)
    assert [c.name for c in experts] == [
        "moe.mlp.experts.gate_proj",
        "moe.mlp.experts.up_proj",
        "moe.mlp.experts.down_proj",
    ]
    assert {c.dtype for c in experts} == {"fp8"} and all(c.dtype_note is None for c in experts)
    peaks = Peaks.from_hardware(s.hardware)
    assert peaks.hbm_bw_bytes_per_s == H200_HBM
    for c in experts:
        assert c.flops / H200_FP8 > c.bytes / H200_HBM  # an 8,192-token chunk: compute-bound
        t = op_time(c, peaks=peaks, curves=None)
        assert t.ceiling_s == pytest.approx(c.count * c.flops / H200_FP8, rel=1e-12)  # was / H200_BF16: twice
        assert "fp8 grouped matmul" in t.label
    # the block-fp8 dense projections are W8A8 too; the bf16 router and LM head stay bf16
    by_name = {c.name: c.dtype for c in costs if c.kind == "matmul"}
    assert by_name["mla.self_attn.q_a_proj"] == "fp8" and by_name["moe.mlp.shared_experts.down_proj"] == "fp8"
    assert by_name["global.lm_head"] == "bf16" and by_name["moe.mlp.gate"] == "bf16"


def test_k3_mxfp4_experts_stay_bf16_on_b200_vllm():
    st = load_stack("vllm")
    s = make_setup(hardware="nvidia-b200", topology="2x8", tp=16, stack="vllm")
    dtype, why = st.compute_dtype.of("mxfp4", s.hardware)
    assert dtype == "bf16" and why.startswith("mxfp4: bf16 (")
    assert "select_mxfp4_moe_backend" in " ".join(src.symbol for src in st.compute_dtype.formats["mxfp4"].sources)
    costs = prefill_op_costs(s, chunk=4096, context=4096)
    assert {c.dtype for c in costs if c.kind in ("matmul", "grouped_matmul")} == {"bf16"}
    assert all(c.dtype_note is None for c in costs)


V7X_BF16 = 1153.5e12  # hardware_specs/tpu-v7x.yaml: a chip's 2307 / 4614 TFLOP/s over its 2 devices
V7X_FP8 = 2307e12
V7X_HBM = 3.69e12


def test_k3_mxfp4_experts_on_tpu_v7x_torchtpu_vllm_run_bf16_on_fp4_with_fp32_scales():
    """torchtpu-vllm (the TPU default since issue 34) holds K3's MXFP4 experts as fp4 codes with fp32 scales
    (VllmCompressedTensorsW4ANMxfp4MoEMethod.process_weights_after_loading: e8m0_to_fp32, load_kmajor_fp4) and runs
    fused_moe_gmm with rhs_quant_dtype=None on the bf16 activations: no activation quantization, priced at bf16.
    (The W4A8 / W8A8 rules of tpu-inference's model_impl=vllm path left with the vllm-tpu stack.)"""
    s = make_setup(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32, stack="torchtpu-vllm")
    rule = s.stack.compute_dtype.formats["mxfp4"]
    assert "VllmCompressedTensorsW4ANMxfp4MoEMethod" in " ".join(src.symbol for src in rule.sources)
    assert s.stack.compute_dtype.of("mxfp4", s.hardware)[0] == "bf16"
    costs = prefill_op_costs(s, chunk=16384, context=16384)
    experts = _experts(costs)
    assert [c.name for c in experts] == [f"moe.block_sparse_moe.experts.w{i}" for i in (1, 2, 3)]
    assert {c.dtype for c in experts} == {"bf16"} and all(c.dtype_note is None for c in experts)
    assert {c.dtype for c in costs if c.kind == "matmul"} == {"bf16"}
    w1 = experts[0]
    # routed: 16,384 tokens x 16 experts a token over 32 devices = 28 touched experts a device of 292.6 rows each;
    # gmm_v2 (step/gmm.py) runs each as a 256-row tile and a 64-row bucket: 320 MXU rows x 2 x 3,584 x 3,072
    routed = 16384 * 16 * 2 * 3584 * 3072 / 32
    assert w1.flops == pytest.approx(28 * 320 * 2 * 3584 * 3072, rel=1e-9) and w1.flops > routed
    # 896 / 32 = 28 experts a device of 3,584 x 3,072: half a byte + one fp32 scale (4 B) a 32
    assert w1.bytes == 28 * 3584 * 3072 * (0.5 + 4 / 32)
    t = op_time(w1, peaks=Peaks.from_hardware(s.hardware), curves=None)
    assert t.ceiling_s == pytest.approx(92 * w1.flops / V7X_BF16, rel=1e-12)
    assert "bf16 grouped matmul" in t.label


def test_a_stack_option_choice_sets_compute_rules_and_every_choice_sets_the_same_formats():
    from k3plan.engines.stack import Effect, Option

    src = Source(repo="example/engine", file="moe.py", symbol="M")
    fmt = FormatCompute(dtype="fp8", holds="h", sources=(src,))
    with pytest.raises(ValueError, match="unknown storage format"):
        Effect(compute_formats={"mxfp5": fmt})
    with pytest.raises(ValueError, match="every choice sets the same compute_formats"):
        Option(
            flag="--x", default="a", source=src, choices={"a": Effect(compute_formats={"mxfp4": fmt}), "b": Effect()}
        )


def _with_mxfp4(stack, **rule):
    src = Source(repo="example/engine", file="moe.py", symbol="Fp4Method")
    fmt = FormatCompute(holds="a hand-made rule", sources=(src,), **rule)
    return updated(stack, compute_dtype=ComputeDtype(formats={"mxfp4": fmt}))


def test_a_dtype_the_hardware_lacks_falls_back_to_bf16_visibly_and_platforms_pick():
    base = make_setup(hardware="nvidia-h200", topology="2x8", tp=16, stack="vllm")
    st = _with_mxfp4(base.stack, dtype="fp4", platforms={"nvidia-b200": "fp8"})
    s = dataclasses.replace(base, stack=st)
    experts = _experts(prefill_op_costs(s, chunk=8192, context=8192))
    assert {c.dtype for c in experts} == {"bf16"}
    note = experts[0].dtype_note
    assert note is not None and "mxfp4: fp4" in note and "nvidia-h200 has no fp4 FLOP/s figure (unsupported" in note
    assert note.endswith("the bf16 peak used")
    t = op_time(experts[0], peaks=Peaks.from_hardware(s.hardware), curves=None)
    assert note in t.label
    c = experts[0]
    assert t.ceiling_s == pytest.approx(c.count * max(c.flops / H200_BF16, c.bytes / H200_HBM), rel=1e-12)
    b200 = make_setup(hardware="nvidia-b200", topology="2x8", tp=16, stack="vllm")
    on_b200 = _experts(prefill_op_costs(dataclasses.replace(b200, stack=st), chunk=8192, context=8192))
    assert {c.dtype for c in on_b200} == {"fp8"}  # the platform's own rule
    assert st.compute_dtype.of("mxfp4", b200.hardware) == ("fp8", "mxfp4 on nvidia-b200: fp8 (a hand-made rule)")


def test_an_unknown_weight_format_in_a_stack_is_refused():
    src = Source(repo="example/engine", file="moe.py", symbol="M")
    with pytest.raises(ValueError, match="unknown storage format"):
        ComputeDtype(formats={"mxfp5": FormatCompute(dtype="fp4", holds="h", sources=(src,))})


def test_deepseek_v3_absorbed_mla_decode_runs_kv_b_in_bf16_on_vllm_and_prefill_keeps_fp8(cli):
    """vLLM dequantizes the block-fp8 kv_b_proj to bf16 at load and decode runs it as the absorbed W_UK_T / W_UV
    bf16 bmm (mla_attention.py process_weights_after_loading, _v_up_proj); prefill's MHA path calls the fp8
    kv_b_proj itself. The decode op was timed at the fp8 peak. At batch 160 it is compute-bound in bf16
    (2 x 160 = 320 FLOP a stored fp8 byte over 989/4.8 = 206) but memory-bound in fp8 (over 1979/4.8 = 412),
    so its label said HBM traffic; then bf16 matmul. Decode reads the bf16 copies vLLM holds beside kv_b_proj
    (2 B an element, Stack.absorbed_copies, tests/budget/test_absorbed_mla_copies.py): 2 x 160 / 2 = 160 FLOP a
    byte, under 206, so at batch 160 it is HBM traffic of the copies again; at 512 (512 FLOP a byte) bf16 matmul."""
    from k3plan.speed.stage import decode_op_costs

    s = make_setup(model="deepseek-v3", hardware="nvidia-h200", topology="8", tp=8, stack="vllm")
    kv_b = next(c for c in decode_op_costs(s, batch=160, context=4096) if c.name == "mla.self_attn.kv_b_proj")
    assert kv_b.dtype == "bf16" and kv_b.dtype_note is None
    pre = next(c for c in prefill_op_costs(s, chunk=8192, context=8192) if c.name == "mla.self_attn.kv_b_proj")
    assert pre.dtype == "fp8"
    r = cli(
        "roofline",
        "-m",
        "deepseek-v3",
        "-H",
        "nvidia-h200",
        "-t",
        "8",
        "--tp",
        "8",
        "--stack",
        "vllm",
        "--batch",
        "160",
        "--context",
        "4096",
        "--json",
    )
    assert r.exit_code == 0, r.output
    import json

    op = next(o for o in json.loads(r.stdout)["expected"]["decode"]["ops"] if o["name"] == "mla.self_attn.kv_b_proj")
    assert "HBM traffic" in op["label"], op["label"]
    # 61 MLA layers x the bf16 copies a device (kv_lora 512 x 128 heads / TP 8 x (128 nope + 128 v) x 2 B)
    assert op["ceiling_s"] == pytest.approx(61 * (512 * 16 * 256) * 2 / H200_HBM, rel=1e-9)
    r = cli(
        "roofline",
        "-m",
        "deepseek-v3",
        "-H",
        "nvidia-h200",
        "-t",
        "8",
        "--tp",
        "8",
        "--stack",
        "vllm",
        "--batch",
        "512",
        "--context",
        "512",
        "--json",
    )  # 512 x 512 tokens of KV fit (x 4,096 do not)
    assert r.exit_code == 0, r.output
    op = next(o for o in json.loads(r.stdout)["expected"]["decode"]["ops"] if o["name"] == "mla.self_attn.kv_b_proj")
    assert "bf16 matmul" in op["label"], op["label"]
    # 61 MLA layers x 2 FLOPs x kv_b_proj's params a device x 512 rows, at the bf16 peak
    assert op["ceiling_s"] == pytest.approx(61 * 2 * (512 * 16 * 256) * 512 / H200_BF16, rel=1e-9)
    # SGLang on CUDA: w_kc / w_vc dequantized to bf16 (deepseek_v2.py post_load_weights); on HIP per-tensor fp8
    for stack in ("sglang", "dp-attention"):
        st = load_stack(stack)
        assert st.compute_dtype.of("fp8_block", s.hardware, "mla_absorbed")[0] == "bf16"
        assert st.compute_dtype.of("fp8_block", s.hardware)[0] == "fp8"
