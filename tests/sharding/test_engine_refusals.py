"""What a stack's engine refuses or cannot run, said wherever the stack is priced (Stack.refusals,
setup.engine_refusals). tpu-inference, the vllm-tpu stack's engine, raises for every MLA model unless
NEW_MODEL_DESIGN=1 and DP attention are set (tpu_platform.py TpuPlatform.check_and_update_config, at both
commits read), and on MODEL_IMPL_TYPE=vllm has no TPU op for K3's KDA layers (it registers K3 only to serve it
with its own JAX model). k3plan prices vllm-tpu's head-parallel TP layout for K3 on v7x by default and said
FITS with no word of either: a buyer would have reserved a slice for a launch the engine refuses."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from k3plan.engines.stack import Stack, load_stack
from k3plan.models import load_model
from k3plan.setup import engine_refusals

MLA = "tpu_inference/platforms/tpu_platform.py TpuPlatform.check_and_update_config @811f8e20"
KDA = "tpu_inference/models/vllm/experimental/__init__.py _TPU_VLLM_MODELS['KimiK3ForConditionalGeneration'] @811f8e20"


def _cites(lines: list[str]) -> list[str]:
    return [c for c in (MLA, KDA) if any(c in ln for ln in lines)]


@pytest.mark.parametrize(
    ("model", "stack", "want"),
    [
        ("kimi-k3", "vllm-tpu", [MLA, KDA]),  # the default deployment on tpu-v7x
        ("kimi-k3", "vllm-tpu:model_impl=flax_nnx", [MLA]),  # tpu-inference's own K3: the MLA check still raises
        ("deepseek-v3", "vllm-tpu", [MLA]),  # MLA, no KDA layers
        ("kimi-k3", "jax-native", []),
        ("kimi-k3", "vllm", []),
        ("kimi-k3", "sglang", []),
    ],
)
def test_refusals_follow_the_model_s_layers_and_the_stack_s_options(model, stack, want):
    lines = engine_refusals(load_model(model), load_stack(stack))
    assert _cites(lines) == want
    assert len(lines) == len(want)
    assert all(
        ln.startswith(f"stack {load_stack(stack).label}: the engine does not run this as priced: ") for ln in lines
    )


def test_fit_warns_that_tpu_inference_refuses_the_default_deployment(cli):
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--json")
    d = json.loads(r.stdout)
    assert d["fits"] is True and r.exit_code == 0  # the memory verdict is k3plan's; the refusal is a warning
    assert _cites(d["warnings"]) == [MLA, KDA]
    assert any("NEW_MODEL_DESIGN=1" in w for w in d["warnings"])


def test_plan_and_its_launch_file_carry_the_refusals(cli, tmp_path):
    out = tmp_path / "run.sh"
    r = cli("plan", "-H", "tpu-v7x", "--stacks", "vllm-tpu", "--emit", "launch", out, "--json")
    assert r.exit_code == 0, r.output
    assert _cites(json.loads(r.stdout)["assumptions"]) == [MLA, KDA]
    warned = [ln for ln in out.read_text().splitlines() if ln.startswith("# WARNING: stack vllm-tpu")]
    assert _cites(warned) == [MLA, KDA]


def test_a_refusal_names_options_the_stack_has():
    raw = load_stack("vllm-tpu").model_dump()
    raw["refusals"] = [{**raw["refusals"][1], "options": {"model_impl": ["torchax"]}}]
    with pytest.raises(ValidationError, match="option model_impl has no choice"):
        Stack.model_validate(raw)
    raw["refusals"] = [{**raw["refusals"][0], "options": {"no_such_option": ["x"]}}]
    with pytest.raises(ValidationError, match="unknown option 'no_such_option'"):
        Stack.model_validate(raw)


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        (["-t", "2x2x4", "--tp", "32", "--kv-dtype", "fp8_ds_mla"], True),  # tpu-inference: no such JAX dtype
        (["-t", "2x2x4", "--tp", "32", "--kv-dtype", "fp8"], False),
        (["-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "--stack", "sglang", "--kv-dtype", "fp8_ds_mla"], True),
        (["-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "--stack", "vllm", "--kv-dtype", "fp8_ds_mla"], False),
    ],
)
def test_fit_warns_of_a_kv_dtype_the_engine_does_not_take(cli, args, warned):
    d = json.loads(cli("fit", *args, "--json").stdout)
    assert any("does not take it" in w for w in d["warnings"]) is warned


def test_the_report_s_findings_name_the_refused_deployment():
    """reports/k3-capacity.md is what `report` prints (tests/docs/test_committed_report.py): its findings say
    that the tpu-v7x pick is one tpu-inference does not run as priced, and no GPU stack is named so."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "reports" / "k3-capacity.md").read_text()
    findings = text.split("## Findings", 1)[1].split("\n## ", 1)[0]
    named = [ln for ln in findings.splitlines() if "the engine does not run this as priced" in ln]
    assert len(named) == 1 and named[0].startswith("- **tpu-v7x with vllm-tpu: ")


def test_plan_lists_refusals_only_for_stacks_it_searched(cli):
    """A GPU-only plan searches no vllm-tpu row: it listed vllm-tpu's TPU refusals among its assumptions anyway."""
    d = json.loads(cli("plan", "-H", "nvidia-h200", "--json").stdout)
    assert not [a for a in d["assumptions"] if "the engine does not run this as priced" in a]
