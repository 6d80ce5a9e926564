"""kernel-floor: on a GPU every op of the step is at least one kernel, and a kernel pays a fixed duration whatever its
work: the step description's op executions x the shortest kernel a public decode trace of the GPU shows
(k3plan/evidence/gpu_kernel_floor.yaml), measured on a B200, transferred to the vendor's other GPUs and labelled so,
none on a GPU of another vendor or a TPU."""

from __future__ import annotations

import re

import pytest

from k3plan.app.setup import setup_from
from k3plan.errors import K3PlanError
from k3plan.evidence.hosts import KERNEL_FLOOR_FILE, gpu_kernel_floors
from k3plan.speed.overheads import kernel_floor_terms
from k3plan.speed.serving import ModelAt
from k3plan.speed.terms import BY_NAME, TermKey, default_terms

NAME = "fixed cost of the step's kernels"


def _decode(hardware: str, topology: str, **kw):
    setup = setup_from(model="deepseek-v3", hardware=hardware, topology=topology, tp=8, ep=None, dp=None, **kw)
    return ModelAt(setup, setup.hardware, evidence=None, terms=default_terms() | {"kernel-floor"}).speed(4, 1024, 1024)


def test_the_b200_s_floor_is_the_trace_s_row():
    (f,) = gpu_kernel_floors()
    assert (f.hardware, f.kernel, f.calls) == ("nvidia-b200", "cvt_fp16_to_fp4", 183)
    assert f.total_ms / f.calls * 1e-3 == pytest.approx(f.seconds, rel=0.05)  # 0.39 ms / 183 = 2.13 us
    assert f.source == "https://github.com/SemiAnalysisAI/InferenceX/issues/863" and f"| {f.calls} |" in f.quote


def test_a_floor_its_row_does_not_hold_is_refused(tmp_path):
    p = tmp_path / "floors.yaml"
    text = KERNEL_FLOOR_FILE.read_text().replace("total_ms: 0.39", "total_ms: 3.9")
    p.write_text(text)
    with pytest.raises(K3PlanError, match="is not 2.1e-06 s a call"):
        gpu_kernel_floors(p)


def test_measured_on_the_b200_transferred_to_the_h200_and_across_vendors_to_amd():
    b200 = _decode("nvidia-b200", "8", stack="sglang:moe_a2a_backend=none").decode
    term = next(o for o in b200.ops if o.name == NAME)
    n = int(re.search(r"([\d,]+) op executions a step", term.label).group(1).replace(",", ""))
    assert term.expected_s == pytest.approx(n * 2.1e-6) and n > 61 * 10  # a dozen and more ops a layer, 61 layers
    assert "InferenceX/issues/863" in term.label and "transferred" not in term.label
    h200 = _decode("nvidia-h200", "8", stack="sglang:moe_a2a_backend=none").decode
    assert "transferred from nvidia-b200's" in next(o for o in h200.ops if o.name == NAME).label
    # no public AMD trace gives a kernel this small (their tables list GEMMs and attention, whose tiny GEMMs take
    # what the B200's do): the B200's, transferred across vendors and said so (the score's decision: held out,
    # the MI355X TPOTs 0.71-0.93x -> 0.91-1.10x)
    amd = _decode("amd-mi355x", "8", stack="vllm").decode
    label = next(o for o in amd.ops if o.name == NAME).label
    assert "transferred from nvidia-b200's (AMD decode traces are public but" in label and "InferenceX#871" in label
    (term,) = kernel_floor_terms([], hardware="amd-mi355x", vendor="amd")
    assert term.seconds == 0 and term.records  # a decode step's record: the model, not the bound, is its figure
    (pre,) = kernel_floor_terms([], hardware="amd-mi355x", vendor="amd", stage="prefill")
    assert not pre.records  # a prefill's compute at the spec's peak stays a bound (speed.overheads)


def test_the_term_is_a_gpu_s():
    t = BY_NAME["kernel-floor"]
    assert t.applies(TermKey(stage="decode", stack="sglang", hardware="gpu", kv_dtype=None))
    assert t.applies(TermKey(stage="prefill", stack="vllm", hardware="gpu", kv_dtype=None))
    assert not t.applies(TermKey(stage="decode", stack="torchtpu-vllm", hardware="tpu", kv_dtype=None))
