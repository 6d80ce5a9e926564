"""VLLM_ATTENTION_BACKEND and VLLM_FLASHINFER_MOE_BACKEND read per release (engines/vllm/backend_env.py), from the
vllm 0.11.0-0.25.0, 0.26.0, 0.28.0, 0.33.0 and 0.34.0 wheels (PyPI), on public commands that set them."""

from __future__ import annotations

import pytest

from k3plan.engines.release import parse_release
from k3plan.engines.serve import parse_serve
from k3plan.engines.vllm import backend_env
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.units import GiB

# vllm-project/vllm#26042 (8 x B200, a build before 0.11.0: tests/engines/cases/vllm-26042-r1-0528-b200-tp8-8k.yaml)
ISSUE_26042 = (
    "VLLM_ATTENTION_BACKEND=FLASHINFER_MLA VLLM_FLASHINFER_MOE_BACKEND=latency VLLM_USE_FLASHINFER_MOE_FP8=1 "
    "vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8 --max-model-len 8192 --no-enable-prefix-caching --port 8049 "
    "--max-num-batched-tokens 512"
)
# vllm-project/recipes@229f1999 DeepSeek/DeepSeek-V3.md ('For blackwell, first enable flashinfer env vars', kept to
# 1907ab52, dropped by a77fe44e of 2026-01-24)
RECIPE_TP = (
    "VLLM_ATTENTION_BACKEND=CUTLASS_MLA VLLM_USE_FLASHINFER_MOE_FP8=1 vllm serve deepseek-ai/DeepSeek-R1-0528 "
    "--trust-remote-code --tensor-parallel-size 8 --enable-expert-parallel"
)


def _read(cmd: str, release: str | None = None, hardware: str = "nvidia-b200"):
    hw = load_hardware(hardware)
    return parse_serve(
        cmd,
        platform=hw.kind,
        device_gib=hw.usable_bytes_per_device / GiB,
        device_name=hw.name,
        release=parse_release(release) if release else None,
    )


def _env(q) -> list[str]:
    return sorted(x for x in q.ignored if x.startswith("VLLM_"))


@pytest.mark.parametrize(
    "release", [None, "0.11.0", "0.11.2", "0.13.0", "0.14.1", "0.15.0", "0.20.0", "0.23.0", "0.24.0"]
)
def test_the_issue_26042_command_reads_at_every_release_read(release):
    # FLASHINFER_MLA on SM100 (block 64, its 128 MiB workspace as CUTLASS MLA's) to 0.14.x, named nowhere from 0.15.0;
    # latency under the FP8 switch (TRT-LLM block-scale MoE, the experts' bytes unchanged) to 0.23.x, named nowhere
    # from 0.24.0
    q = _read(ISSUE_26042, release)
    assert _env(q) == [
        "VLLM_ATTENTION_BACKEND=FLASHINFER_MLA",
        "VLLM_FLASHINFER_MOE_BACKEND=latency",
        "VLLM_USE_FLASHINFER_MOE_FP8=1",
    ]


def test_the_variables_change_nothing_k3plan_prices():
    # the same reading, block and batch as the command without them
    bare = "vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8 --max-model-len 8192 --no-enable-prefix-caching --port 8049 --max-num-batched-tokens 512"
    for release in ("0.11.0", "0.14.1"):
        a, b = _read(ISSUE_26042, release), _read(bare, release)
        assert (a.block_size, a.chunk, a.batch, a.tp, a.context) == (b.block_size, b.chunk, b.batch, b.tp, b.context)


def test_releases_before_the_wheels_read_are_refused():
    with pytest.raises(K3PlanError, match="VLLM_ATTENTION_BACKEND=FLASHINFER_MLA: what it selects at vLLM 0.10.2"):
        _read(ISSUE_26042, "0.10.2")
    with pytest.raises(K3PlanError, match="VLLM_FLASHINFER_MOE_BACKEND=latency: what it selects at vLLM 0.10.2"):
        _read(ISSUE_26042.replace("VLLM_ATTENTION_BACKEND=FLASHINFER_MLA ", ""), "0.10.2")


def test_attention_backends_not_read_are_refused():
    # TRITON_MLA keeps the configured block (16), FlashMLA is not SM100's; on H200 FLASHMLA (the default) is listed
    with pytest.raises(K3PlanError, match="TRITON_MLA"):
        _read(ISSUE_26042.replace("FLASHINFER_MLA", "TRITON_MLA"), "0.11.0")
    with pytest.raises(K3PlanError, match="FLASHMLA"):
        _read(ISSUE_26042.replace("FLASHINFER_MLA", "FLASHMLA"), "0.11.0")
    bare = "VLLM_ATTENTION_BACKEND=FLASHMLA vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8"
    assert "VLLM_ATTENTION_BACKEND=FLASHMLA" in _read(bare, "0.13.0", hardware="nvidia-h200").ignored
    # from 0.15.0 nothing reads it, whatever it names
    assert (
        "VLLM_ATTENTION_BACKEND=TRITON_MLA"
        in _read(ISSUE_26042.replace("FLASHINFER_MLA", "TRITON_MLA"), "0.15.0").ignored
    )


def test_throughput_on_block_fp8_is_the_engines_refusal():
    cmd = ISSUE_26042.replace("=latency", "=throughput")
    with pytest.raises(K3PlanError, match="does not support block quantization"):
        _read(cmd, "0.13.0")
    with pytest.raises(K3PlanError, match=r"assert self.block_quant is None"):
        _read(cmd, "0.11.0")
    with pytest.raises(K3PlanError, match="was not read"):  # 0.15.0 on: the oracle's _return_or_raise, not read
        _read(cmd, "0.18.0")
    with pytest.raises(K3PlanError, match="not one of vLLM 0.11.2's choices"):
        _read(ISSUE_26042.replace("=latency", "=masked_gemm"), "0.11.2")


def test_the_recipe_command_reads_where_its_default_is_latency():
    # 0.11.0's default is throughput (FlashInfer CUTLASS, which asserts on block scales); 0.11.1 on, latency
    assert _env(_read(RECIPE_TP, "0.13.0")) == ["VLLM_ATTENTION_BACKEND=CUTLASS_MLA", "VLLM_USE_FLASHINFER_MOE_FP8=1"]
    assert _env(_read(RECIPE_TP)) == ["VLLM_ATTENTION_BACKEND=CUTLASS_MLA", "VLLM_USE_FLASHINFER_MOE_FP8=1"]
    with pytest.raises(K3PlanError, match="its default, throughput"):
        _read(RECIPE_TP, "0.11.0")


def test_the_moe_backend_without_the_fp8_switch_is_not_read_for_fp8_experts():
    cmd = "VLLM_FLASHINFER_MOE_BACKEND=throughput vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8"
    assert "VLLM_FLASHINFER_MOE_BACKEND=throughput" in _read(cmd, "0.18.0").ignored
    # NVFP4 experts: the FP4 oracle reads it (their layout not read)
    with pytest.raises(K3PlanError, match="was not read"):
        _read(cmd.replace("deepseek-ai/DeepSeek-R1-0528", "nvidia/DeepSeek-R1-0528-FP4-v2"), "0.18.0")


def test_the_release_bounds():
    assert backend_env.ATTENTION_GONE_FROM == (0, 15, 0)
    assert backend_env.MOE_GONE_FROM == (0, 24, 0)
    assert backend_env.MOE_ENV not in __import__("k3plan.engines.vllm.serve", fromlist=["STALE_ENV"]).STALE_ENV


def test_b300_is_outside_the_exact_sm100_gate_before_0_13():
    # get_fp8_moe_backend's is_device_capability(100) in the 0.11.1-0.12.0 wheels: sm_103 takes no FlashInfer MoE
    cmd = ISSUE_26042.replace("=latency", "=throughput")
    assert "VLLM_FLASHINFER_MOE_BACKEND=throughput" in _read(cmd, "0.12.0", hardware="nvidia-b300").ignored
    with pytest.raises(K3PlanError, match="does not support block quantization"):
        _read(cmd, "0.12.0")  # B200, sm_100
    with pytest.raises(K3PlanError, match="does not support block quantization"):
        _read(cmd, "0.13.0", hardware="nvidia-b300")  # the family gate from 0.13.0
