"""gpu-gemm: a GPU's matmuls run below the spec's peak, at the published throughput of the kernel the engine runs
for their dtype (k3plan/evidence/gpu_gemm.yaml): each table's rows hold their own arithmetic, a row's efficiency is
its TFLOPS over the measured GPU's spec peak (derived), only compute-bound rows speak, a table stands for the engines
its cited code names on the GPUs of the measured one's architecture (transferred, labelled), and the term is what
re-pricing the step's ceiling matmuls at those curves adds. Admitted by the held-out score (admitted.json)."""

from __future__ import annotations

import pytest

from k3plan.app.setup import setup_from
from k3plan.errors import K3PlanError
from k3plan.evidence.gpu_gemm import FILE, gpu_gemm_tables
from k3plan.hardware.loader import load_hardware
from k3plan.speed.expected import op_time
from k3plan.speed.gpu_gemm import gemm_curves
from k3plan.speed.peaks import Peaks
from k3plan.speed.serving import ModelAt
from k3plan.speed.terms import BY_NAME, default_terms

NAME = "GPU matmuls at their kernel's published throughput"


def _table(id_: str):
    return next(t for t in gpu_gemm_tables() if t.id == id_)


def test_every_row_holds_its_arithmetic_and_a_wrong_one_is_refused(tmp_path):
    tables = gpu_gemm_tables()
    assert {t.id for t in tables} >= {"deepgemm-fp8-block-dense-h100", "torch-bf16-dense-h100"}
    assert all(t.source.startswith("https://") and t.engines and t.engines_source for t in tables)
    p = tmp_path / "gemm.yaml"
    p.write_text(FILE.read_text().replace("[4096, 4096, 7168, 335.4, 717.0]", "[4096, 4096, 7168, 335.4, 917.0]"))
    with pytest.raises(K3PlanError, match="2 M N K / time is not 917.0 TFLOPS"):
        gpu_gemm_tables(p)


def test_efficiency_is_the_row_over_the_spec_peak_and_memory_bound_rows_are_left_out():
    c = gemm_curves("nvidia-h100-sxm", device_kind="NVIDIA H100 80GB HBM3", engine="sglang")
    assert c is not None
    fp8, bf16 = c.curves["matmul:fp8"], c.curves["matmul:bf16"]
    peaks = Peaks.from_hardware(load_hardware("nvidia-h100-sxm"))
    # DeepGEMM at M 4,096 x N 4,096 x K 7,168: 717.0 TFLOPS over the H100's fp8 peak
    top = next(p for p in fp8.points if p.x == pytest.approx((4096 * 4096 * 7168) ** (1 / 3)))
    assert top.efficiency == pytest.approx(717.0e12 / peaks.flops_per_s("fp8"))
    assert top.transferred_from is None and "717 TFLOPS" in top.detail
    # the decode-sized rows (M 8 to 128) are memory-bound on the H100: their time is the launch and the weights
    kept = {round(p.x) for p in fp8.points}
    assert len(_table("deepgemm-fp8-block-dense-h100").rows) == 16 and len(kept) == 4
    assert all(p.x >= (1024 * 4096 * 7168) ** (1 / 3) - 1 for p in fp8.points)
    assert bf16.points[-1].efficiency == pytest.approx(666.385367e12 / peaks.flops_per_s("bf16"))


def test_a_table_speaks_for_the_engines_its_code_names_on_its_architecture():
    h200 = gemm_curves("nvidia-h200", device_kind="NVIDIA H200", engine="sglang")
    assert h200 is not None and set(h200.curves) == {"matmul:fp8", "matmul:bf16"}
    assert all(p.transferred_from == "NVIDIA H100 80GB HBM3" for c in h200.curves.values() for p in c.points)
    vllm = gemm_curves("nvidia-h200", device_kind="NVIDIA H200", engine="vllm")
    assert vllm is not None and set(vllm.curves) == {"matmul:bf16"}  # vLLM's block-FP8 kernel: no table
    assert gemm_curves("nvidia-h20", device_kind="NVIDIA H20", engine="sglang") is None  # another tensor-core rate
    assert gemm_curves("amd-mi355x", device_kind="AMD Instinct MI355X", engine="vllm") is None
    b300 = gemm_curves("nvidia-b300", device_kind="NVIDIA B300", engine="sglang")
    assert b300 is not None and set(b300.curves) == {"matmul:bf16"}


def _prefill(hardware: str, topology: str, terms: frozenset[str], **kw):
    setup = setup_from(model="deepseek-v3", hardware=hardware, topology=topology, tp=8, ep=None, dp=None, **kw)
    return setup, ModelAt(setup, setup.hardware, evidence=None, terms=terms).speed(1, 4096, 4096).prefill


def test_the_term_is_what_the_curves_add_to_the_ceiling_matmuls():
    on = default_terms() | {"gpu-gemm"}
    setup, with_ = _prefill("nvidia-h200", "8", on, stack="sglang:moe_a2a_backend=none")
    _, without = _prefill("nvidia-h200", "8", on - {"gpu-gemm"}, stack="sglang:moe_a2a_backend=none")
    term = next(o for o in with_.ops if o.name == NAME)
    assert not any(o.name == NAME for o in without.ops)
    peaks = Peaks.from_hardware(setup.hardware)
    curves = gemm_curves("nvidia-h200", device_kind=peaks.device_kind, engine="sglang")
    from k3plan.speed.stage import prefill_op_costs

    ops = prefill_op_costs(setup, chunk=4096, context=4096)
    extra = sum(
        max(0.0, op_time(op, peaks=peaks, curves=curves).expected_s - op_time(op, peaks=peaks, curves=None).expected_s)
        for op in ops
        if op.kind == "matmul"
    )
    assert extra > 0 and term.expected_s == pytest.approx(extra, rel=1e-9)
    assert with_.expected_s == pytest.approx(without.expected_s + extra, rel=1e-9)
    assert "evidence/gpu_gemm.yaml#deepgemm-fp8-block-dense-h100" in term.label


def test_the_term_is_a_gpu_s_and_admitted():
    t = BY_NAME["gpu-gemm"]
    assert t.when.hardware == ("gpu",) and t.evidence == ("evidence/gpu_gemm.yaml",)
    assert "gpu-gemm" in default_terms()
    _, tpu = _prefill("tpu-v7x", "2x2x2", default_terms(), stack="torchtpu-vllm")
    assert not any(o.name == NAME for o in tpu.ops)


def test_roofline_says_which_table_prices_the_term(cli):
    r = cli("roofline", "-m", "deepseek-v4-flash", "-H", "nvidia-h200", "-t", "4", "--tp", "4", "--ep", "4",
            "--stack", "sglang:moe_a2a_backend=none", "--batch", "1", "--context", "8192", "--chunk", "8192",
            "--verbose")  # fmt: skip
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())  # --verbose lists every term of each stage, wrapped to the terminal
    terms = [t.split(" prefill term ")[0] for t in text.split(" prefill term ")[1:]]
    (line,) = [t for t in terms if "GPU matmuls" in t]
    assert "evidence/gpu_gemm.yaml#torch-bf16-dense-h100" in line
