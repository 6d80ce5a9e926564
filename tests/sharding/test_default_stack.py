"""The default stack comes from the hardware (sharding.stack.default_stack_for): one rule, named in the output."""

import pytest

from k3plan.engines.stack import default_stack_for, load_stack
from k3plan.hardware import load_hardware
from k3plan.setup import make_setup


@pytest.mark.parametrize(
    ("hw", "stack"),
    [
        ("tpu-v7x", "torchtpu-vllm"),
        ("tpu-v5e", "torchtpu-vllm"),
        ("nvidia-h200", "vllm"),  # in the vLLM K3 recipe's list (vllm.yaml platforms)
        ("nvidia-b300", "vllm"),
        ("amd-mi355x", "vllm"),
        ("nvidia-h100-sxm", "sglang"),  # not in the recipe's list: SGLang's CUDA path
        ("amd-mi300x", "sglang"),  # SGLang's HIP path
    ],
)
def test_default_stack_runs_on_the_hardware(hw, stack):
    name, why = default_stack_for(load_hardware(hw))
    assert name == stack and load_stack(name).runs_on(load_hardware(hw))
    assert f"stack {stack}: the default for {hw}" in why


def test_fit_without_stack_names_the_choice():
    s = make_setup(hardware="nvidia-h200", topology="2x8")
    assert s.stack.name == "vllm"
    assert any(n.startswith("stack vllm: the default for nvidia-h200") for n in s.notes)
    assert make_setup(hardware="tpu-v7x", topology="2x2x4", tp=32).stack.name == "torchtpu-vllm"
    # an explicit stack is kept and not announced as a default
    s = make_setup(hardware="nvidia-h200", topology="2x8", stack="sglang")
    assert s.stack.name == "sglang" and not any("the default for" in n for n in s.notes)
