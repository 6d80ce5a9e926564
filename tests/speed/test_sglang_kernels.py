"""sglang-kernels: the kernel floor's count corrected to the kernels SGLang launches (engines/sglang/kernels.py, each
rule cited to its model or quantization code): merged linears and Kimi-K3's fused chains launch one kernel, and a
linear computing in 8 or 4 bits is preceded by a kernel that quantizes its input. The counts below are the models'
layer arithmetic, not the rule re-run."""

from __future__ import annotations

import re

import pytest

from k3plan.app.setup import setup_from
from k3plan.engines.sglang.kernels import GLUE, GLUE_MODEL, JOINED, glue_kernels, kernel_changes
from k3plan.speed.overheads import _op_executions
from k3plan.speed.serving import ModelAt
from k3plan.speed.terms import BY_NAME, TermKey, default_terms

JOINED_NAME = "ops SGLang runs inside another op's kernel"
QUANT_NAME = "SGLang's activation-quantization kernels"
GLUE_NAME = "kernels SGLang launches beside the step description's ops"


def _setup(model: str, hardware: str, stack: str):
    """One 8-GPU box at TP 8, the engine's EP default."""
    return setup_from(model=model, hardware=hardware, topology="8", tp=8, ep=None, dp=None, stack=stack)


def _step(model: str, hardware: str, stack: str, stage: str, batch: int = 1):
    """The term's own input (StepInput) for one decode step or prefill chunk, as the speed model hands it over."""
    setup = _setup(model, hardware, stack)
    seen = {}

    def spy(s):
        seen.setdefault(s.key.stage, s)
        return ()

    term = BY_NAME["sglang-kernels"]
    price = term.price
    try:
        object.__setattr__(term, "price", spy)
        terms = default_terms() | {"sglang-kernels"}
        ModelAt(setup, setup.hardware, evidence=None, terms=terms).speed(batch, 1024, 1024)
    finally:
        object.__setattr__(term, "price", price)
    return seen[stage]


def _ops(model: str, hardware: str, stack: str, stage: str):
    """The step description's ops of one decode step or prefill chunk, as the speed model prices them."""
    return list(_step(model, hardware, stack, stage).ops)


def _model(setup) -> tuple[str, int, int]:
    spec = setup.model.spec
    return (spec.architecture, spec.moe.num_experts, spec.moe.num_shared)


def _launched(model: str, hardware: str, stack: str, batch: int) -> int:
    """Kernels a decode step as the term counts them: the kernel floor's op executions, less the joined, plus the
    activation quantizations and the glue."""
    s = _step(model, hardware, stack, "decode", batch)
    joined, quant = kernel_changes(s.ops, "decode")
    glue = glue_kernels(
        s.ops,
        "decode",
        model=_model(s.setup),
        vendor="nvidia",
        hardware=hardware,
        rows=s.rows,
        dp_attention=s.setup.parallel.dp > 1,
    )
    return _op_executions(list(s.ops)) - joined + quant + glue


def test_deepseek_v3_fp8_merges_four_linears_and_quantizes_every_fp8_input():
    """61 MLA layers (q_a + kv_a one GEMM), 3 dense MLPs and 58 shared experts (gate + up one GEMM), 58 routed
    expert groups (w13): 180 executions joined; the fp8 inputs a step: 3 a MLA layer (q_a/kv_a, q_b, o), 2 a dense
    MLP and 4 a MoE layer (shared gate_up and down, experts w13 and w2) = 183 + 6 + 232 = 421."""
    ops = _ops("deepseek-v3", "nvidia-b200", "sglang:moe_a2a_backend=none", "decode")
    assert kernel_changes(ops, "decode") == (61 + 3 + 58 + 58, 3 * 61 + 2 * 3 + 4 * 58)


def test_deepseek_v3_decode_launches_the_kernels_read_in_sglang_s_released_code():
    """Counted launch by launch in the released wheels (the CUDA graph of one decode step on a TP rank, DeepSeek-R1 at
    TP 8): sglang 0.5.12 on B200 with InferenceX's flags (trtllm MLA, flashinfer's trtllm fp8 MoE with the shared
    expert apart, all-reduce fused into RMSNorm): an MLA block 14 kernels, a MoE block 18 (19 above 16 rows: the
    router's cuBLAS GEMM and its fp32 cast), a dense MLP 6, 10 once a step, so 3 x 20 + 57 x 32 + 33 + 10 = 1,927
    (+58 above 16 rows = 1,985); sglang 0.5.7 on H200 with its defaults (Triton fused MoE with the shared expert as
    expert 257): a MoE block 11 (12), so 3 x 20 + 57 x 25 + 26 + 10 = 1,521 (1,579). The step description holds
    1,209 op executions; the term's rules take it to these totals."""
    stack = "sglang:moe_a2a_backend=none"
    assert _launched("deepseek-v3", "nvidia-b200", stack, 8) == 3 * 20 + 57 * 32 + 33 + 10 == 1927
    assert _launched("deepseek-v3", "nvidia-b200", stack, 32) == 1927 + 58
    assert _launched("deepseek-v3", "nvidia-h200", stack, 8) == 3 * 20 + 57 * 25 + 26 + 10 == 1521
    assert _launched("deepseek-v3", "nvidia-h200", stack, 32) == 1521 + 58


def test_glue_is_read_for_deepseek_v3_at_decode_with_tp_only():
    """No glue where it was not read: Kimi-K3 (kimi_k3.py), Kimi-K2 (384 experts: no shared-expert fusion, another
    top-k), a prefill chunk (the MHA path), DeepEP's all-to-all, an AMD GPU."""
    for name, hw in (("kimi-k3", "nvidia-b300"), ("kimi-k2", "nvidia-h200")):
        s = _step(name, hw, "sglang:moe_a2a_backend=none", "decode")
        assert _model(s.setup) != GLUE_MODEL
        kw = dict(model=_model(s.setup), vendor="nvidia", hardware=hw, rows=1, dp_attention=False)
        assert glue_kernels(s.ops, "decode", **kw) == 0
    v3 = _ops("deepseek-v3", "nvidia-b200", "sglang:moe_a2a_backend=none", "decode")
    kw = dict(model=GLUE_MODEL, vendor="nvidia", hardware="nvidia-b200", rows=1)
    assert glue_kernels(v3, "prefill", dp_attention=False, **kw) == 0
    a2a = _ops("deepseek-v3", "nvidia-b200", "sglang", "decode")
    assert glue_kernels(a2a, "decode", dp_attention=False, **kw) == 0
    # with DP attention the all-reduces run on their own: 61 + 58 + 3 fused less the last layer's = 121 kernels back
    fused = glue_kernels(v3, "decode", dp_attention=False, **kw)
    assert glue_kernels(v3, "decode", dp_attention=True, **kw) == fused + 121
    # and with the TP group over two nodes (the fusion is auto-enabled on one node only)
    assert glue_kernels(v3, "decode", dp_attention=False, one_node=False, **kw) == fused + 121
    # an AMD GPU runs SGLang's aiter path: not read
    assert glue_kernels(v3, "decode", **{**kw, "vendor": "amd", "dp_attention": False}) == 0
    assert all("sglang 0.5." in g.source for g in GLUE)


def test_kimi_k3_s_fused_chains_at_decode_and_its_bf16_linears_quantize_nothing():
    """Kimi-K3 (bf16 linears): a KDA layer's k, v, g into the q/k/v/g GEMM, b into [f_a | b], the three convolutions,
    A_log, dt_bias and the output norm into the fused decode kernel (10 x 69); a MoE layer's shared up, w3, shared
    gate, router gate and latent norm into the fused front and the all-reduce (5 x 92); the dense MLP's up (1); the
    MLA layers' kv_a (24). At a prefill chunk the decode kernel's six are SGLang's own kernels again; with the MoE's
    all-to-all the three plain-TP fusions are off."""
    decode = _ops("kimi-k3", "nvidia-b300", "sglang:moe_a2a_backend=none", "decode")
    assert kernel_changes(decode, "decode") == (10 * 69 + 5 * 92 + 1 + 24, 0)
    prefill = _ops("kimi-k3", "nvidia-b300", "sglang:moe_a2a_backend=none", "prefill")
    assert kernel_changes(prefill, "prefill") == (4 * 69 + 5 * 92 + 1 + 24, 0)
    a2a = _ops("kimi-k3", "nvidia-b300", "sglang", "decode")  # the sglang stack: DeepEP's all-to-all
    assert any(o.kind == "collective" and o.collective == "all-to-all" for o in a2a)
    assert kernel_changes(a2a, "decode") == (10 * 69 + 2 * 92 + 1 + 24, 0)


def test_every_rule_cites_sglang_code():
    assert all(re.search(r"sglang|SGLang|KimiK3|FusedMoE", j.source) for j in JOINED)
    assert all(j.suffix and j.into for j in JOINED)


def test_the_term_prices_the_changes_at_the_kernel_floor_on_sglang_gpus_only():
    setup = _setup("deepseek-v3", "nvidia-b200", "sglang:moe_a2a_backend=none")
    decode = ModelAt(setup, setup.hardware, evidence=None, terms=default_terms()).speed(1, 1024, 1024).decode
    joined = next(o for o in decode.ops if o.name == JOINED_NAME)
    quant = next(o for o in decode.ops if o.name == QUANT_NAME)
    glue = next(o for o in decode.ops if o.name == GLUE_NAME)
    assert joined.expected_s == pytest.approx(-180 * 2.1e-6) and quant.expected_s == pytest.approx(421 * 2.1e-6)
    assert glue.expected_s == pytest.approx(477 * 2.1e-6)
    assert "fp8_utils.py" in quant.label and "InferenceX#863" in quant.label
    assert "GLUE" in glue.label and "+477" in glue.label
    term = BY_NAME["sglang-kernels"]
    gpu = TermKey(stage="decode", stack="sglang", hardware="gpu", kv_dtype=None)
    assert term.applies(gpu)
    assert not term.applies(TermKey(stage="decode", stack="vllm", hardware="gpu", kv_dtype=None))
    assert not term.applies(TermKey(stage="decode", stack="sglang", hardware="tpu", kv_dtype=None))
    # dp-attention runs SGLang's code on a GPU (its launcher there) and vLLM's on a TPU
    assert term.applies(TermKey(stage="decode", stack="dp-attention", hardware="gpu", kv_dtype=None))
    assert not term.applies(TermKey(stage="decode", stack="dp-attention", hardware="tpu", kv_dtype=None))


def test_roofline_s_default_view_shows_the_time_the_merges_take_off():
    """The terms table ranks a term by its size either way and its rows sum to the model: the fused kernels' -2.47 ms
    on Kimi-K3's decode step is a row, priced by the engine's code (it was dropped, leaving rows 2.47 ms over)."""
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    args = ["roofline", "-H", "nvidia-b300", "-t", "8", "--tp", "8", "-s", "sglang:moe_a2a_backend=none"]
    r = CliRunner().invoke(app, [*args, "--batch", "1", "--context", "9216", "--chunk", "8192"])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.stdout.splitlines() if JOINED_NAME in ln)
    assert re.search(r"-\d+\.\d\d\s+engine code \(cited\)", line)
    decode = r.stdout.split(" decode ", 1)[1].split(" prefill ", 1)[0]
    total = float(re.search(r"([\d.]+) ms", decode).group(1))
    rows = [float(x) for x in re.findall(r"\s(-?\d+\.\d\d)\s{2,}", decode)]
    assert sum(rows) == pytest.approx(total, abs=0.02)


def test_without_the_kernel_floor_there_is_no_count_to_correct():
    setup = _setup("deepseek-v3", "nvidia-b200", "sglang")
    terms = default_terms() - {"kernel-floor"}
    assert "sglang-kernels" in terms
    decode = ModelAt(setup, setup.hardware, evidence=None, terms=terms).speed(1, 1024, 1024).decode
    assert not [o for o in decode.ops if o.name in (JOINED_NAME, QUANT_NAME, GLUE_NAME)]
