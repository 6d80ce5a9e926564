"""vLLM's --performance-mode read as its releases do (engines/vllm/serve.py read_performance_mode): registered from
0.17.0 (the 0.16.0 wheel's vllm/engine/arg_utils.py has no such option); "throughput" doubles max_num_batched_tokens
and max_num_seqs where the command leaves each unset, before max_num_seqs is cut to the budget (the vllm 0.17.0,
0.20.0 and 0.34.0 wheels (PyPI) vllm/engine/arg_utils.py EngineArgs._set_default_max_num_seqs_and_batched_tokens_args);
"balanced" is the default; "interactivity" (a finer capture grid: VllmConfig._set_cudagraph_sizes) is refused."""

from __future__ import annotations

import pytest

from k3plan.engines.release import parse_release
from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.units import GiB

BASE = "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --max-model-len 32768"


def _read(command: str, *, hardware: str = "nvidia-h100-sxm", release: str | None = "0.20.0"):
    hw = load_hardware(hardware)
    return parse_serve(
        command,
        platform=hw.kind,
        device_gib=hw.usable_bytes_per_device / GiB,
        device_name=hw.name,
        release=parse_release(release) if release else None,
    )


def test_throughput_doubles_the_defaults_left_unset():
    plain = _read(BASE)
    fast = _read(BASE + " --performance-mode throughput")
    assert (fast.batch, fast.chunk) == (2 * plain.batch, 2 * plain.chunk)
    assert "doubled by --performance-mode throughput" in fast.batch_source


def test_throughput_leaves_what_the_command_gives():
    fast = _read(BASE + " --performance-mode throughput --max-num-batched-tokens 16384 --max-num-seqs 64")
    assert (fast.batch, fast.chunk) == (64, 16384)
    only_seqs = _read(BASE + " --performance-mode throughput --max-num-batched-tokens 16384")
    assert (only_seqs.batch, only_seqs.chunk) == (2 * _read(BASE).batch, 16384)


def test_throughput_cut_to_the_budget_after_the_doubling():
    # a budget under the doubled default batch: max_num_seqs = min(2 x default, max_num_batched_tokens)
    fast = _read(BASE + " --performance-mode throughput --max-num-batched-tokens 1536")
    assert (fast.batch, _read(BASE + " --max-num-batched-tokens 1536").batch) == (1536, 1024)


def test_balanced_is_the_default():
    plain = _read(BASE)
    bal = _read(BASE + " --performance-mode balanced")
    assert (bal.batch, bal.chunk) == (plain.batch, plain.chunk)
    assert "--performance-mode" in bal.ignored


@pytest.mark.parametrize(
    ("tail", "release", "said"),
    [
        (" --performance-mode throughput", "0.16.0", "its parser has no such option"),
        (" --performance-mode interactivity", "0.20.0", "interactivity"),
        (" --performance-mode fast", "0.20.0", "expected one of"),
    ],
)
def test_refused(tail: str, release: str, said: str):
    with pytest.raises(K3PlanError, match=said):
        _read(BASE + tail, release=release)
