"""What a stack's engine refuses or cannot run, said wherever the stack is priced (Stack.refusals,
setup.engine_refusals). History: tpu-inference, the retired vllm-tpu stack's engine, raises for every MLA model unless
NEW_MODEL_DESIGN=1 and DP attention are set (tpu_platform.py TpuPlatform.check_and_update_config, at both
commits read), and on MODEL_IMPL_TYPE=vllm has no TPU op for K3's KDA layers (it registers K3 only to serve it
with its own JAX model). k3plan prices vllm-tpu's head-parallel TP layout for K3 on v7x by default and said
FITS with no word of either: a buyer would have reserved a slice for a launch the engine refuses."""

from __future__ import annotations

import json

import msgspec
import pytest
from msgspec import ValidationError

from k3plan.engines.stack import Stack, load_stack
from k3plan.models import load_model
from k3plan.setup import engine_refusals
from k3plan.structs import dump

REFUSAL = {
    "layers": ["kda"],
    "says": "a test engine has no op for the KDA layers",
    "sources": [{"repo": "example/engine", "file": "engine/kda.py", "symbol": "NoKda", "commit": "0" * 40}],
}
CITE = "example/engine engine/kda.py NoKda @00000000"


def _refusing_stack(tmp_path, refusals=(REFUSAL,)) -> str:
    """torchtpu-vllm's YAML with ``refusals`` added, as a user stack path (the bundled stacks that run what
    they price refuse nothing for K3 since issue 34 retired vllm-tpu's tpu-inference refusals)."""
    import yaml

    from k3plan.engines.registry import stack_path

    data = yaml.safe_load((stack_path("torchtpu-vllm")).read_text())
    data["name"] = "torchtpu-vllm"  # a launch needs a known engine: the name stays, the path differs
    data["refusals"] = list(refusals)
    path = tmp_path / "refusing.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("model", "stack", "want"),
    [
        ("kimi-k3", "torchtpu-vllm", 0),  # the default on tpu-v7x: the plugin's K3 CI serves it nightly
        ("kimi-k3", "vllm-tpu", 0),  # the old name loads torchtpu-vllm
        ("kimi-k3", "jax-native", 0),
        ("kimi-k3", "vllm", 0),
        ("kimi-k3", "sglang", 0),
        ("kimi-k3", "REFUSING", 1),  # a stack that refuses K3's KDA layers
        ("deepseek-v3", "REFUSING", 0),  # MLA only: no KDA layer to refuse
    ],
)
def test_refusals_follow_the_model_s_layers(model, stack, want, tmp_path):
    ref = _refusing_stack(tmp_path) if stack == "REFUSING" else stack
    lines = engine_refusals(load_model(model), load_stack(ref))
    assert len(lines) == want
    assert all(CITE in ln for ln in lines)
    assert all(
        ln.startswith(f"stack {load_stack(ref).label}: the engine does not run this as priced: ") for ln in lines
    )


def test_fit_s_default_tpu_deployment_is_one_its_engine_runs(cli):
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--json")
    d = json.loads(r.stdout)
    assert d["stack"].startswith("torchtpu-vllm")
    assert not [w for w in d["warnings"] if "the engine does not run this as priced" in w]


def test_fit_warns_of_a_refusal(cli, tmp_path):
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--stack", _refusing_stack(tmp_path), "--json")
    d = json.loads(r.stdout)
    assert [w for w in d["warnings"] if CITE in w]  # the memory verdict is k3plan's; the refusal is a warning


def test_plan_and_its_launch_file_carry_the_refusals(cli, tmp_path):
    out = tmp_path / "run.sh"
    stack = _refusing_stack(tmp_path)
    r = cli("plan", "-H", "tpu-v7x", "--stacks", stack, "--emit", "launch", out, "--json")
    assert r.exit_code == 0, r.output
    assert [a for a in json.loads(r.stdout)["assumptions"] if CITE in a]
    warned = [ln for ln in out.read_text().splitlines() if ln.startswith("# WARNING: stack torchtpu-vllm")]
    assert [ln for ln in warned if CITE in ln]


def test_a_refusal_names_options_the_stack_has():
    raw = dump(load_stack("tpu-inference"), mode="python")
    raw["refusals"] = [{**REFUSAL, "options": {"model_impl": ["torchax"]}}]
    with pytest.raises(ValidationError, match="option model_impl has no choice"):
        msgspec.convert(raw, Stack)
    raw["refusals"] = [{**REFUSAL, "options": {"no_such_option": ["x"]}}]
    with pytest.raises(ValidationError, match="unknown option 'no_such_option'"):
        msgspec.convert(raw, Stack)


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
    assert not [ln for ln in named if "torchtpu-vllm" in ln]  # the TPU default runs what it prices


def test_plan_lists_refusals_only_for_stacks_it_searched(cli):
    """A GPU-only plan searches no TPU row: it listed the TPU stack's TPU refusals among its assumptions anyway."""
    d = json.loads(cli("plan", "-H", "nvidia-h200", "--json").stdout)
    assert not [a for a in d["assumptions"] if "the engine does not run this as priced" in a]
