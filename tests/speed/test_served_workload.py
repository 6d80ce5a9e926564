"""The workload as the engine serves it (speed.serving.served_workload, issue 46 item 4): at one request it is the
one-step model exactly; DP groups each take their share; asynchronous scheduling hides the host term, keyed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from k3plan.engines.flags import run_scheduling
from k3plan.speed.overheads import HOST_TERM_NAME, async_host_term
from k3plan.speed.serving import served_workload


def _op(name, seconds, kind="overhead"):
    return SimpleNamespace(name=name, kind=kind, expected_s=seconds)


class FakeModel:
    """A decode step of 10 ms + 1 ms a sequence of the deployment (4.5 ms of it the host term), a 1,000-token
    prompt's prefill 100 ms, whatever its chunks."""

    def __init__(self, dp=1):
        self.setup = SimpleNamespace(parallel=SimpleNamespace(dp=dp), topology=SimpleNamespace(chips=1))

    def decode_s(self, batch, context):
        return 0.010 + 0.001 * batch

    def speed(self, batch, context, chunk):
        decode = SimpleNamespace(ops=(_op("matmul", 0.0065, "matmul"), _op(HOST_TERM_NAME, 0.0045)))
        return SimpleNamespace(decode=decode, prefill=SimpleNamespace(expected_s=0.100))


def test_one_request_is_the_one_step_model():
    s = served_workload(FakeModel(), isl=1000, osl=50, concurrency=1, prompts=4, token_budget=1000)
    assert s.tpot_s == pytest.approx(0.011)  # the decode step at batch 1
    assert s.ttft_s == pytest.approx(0.100)  # one prompt's prefill: no one ahead of it


def test_prompts_sent_together_wait_and_decodes_share_the_steps():
    one = served_workload(FakeModel(), isl=1000, osl=50, concurrency=1, prompts=8, token_budget=1000)
    many = served_workload(FakeModel(), isl=1000, osl=50, concurrency=8, prompts=8, token_budget=1000)
    assert many.ttft_s > 3 * one.ttft_s  # the 8th prompt waits for 7
    assert many.tpot_s > FakeModel().decode_s(8, 1000)  # the prefills ride in the decode steps


def test_dp_groups_take_their_share():
    s = served_workload(FakeModel(dp=4), isl=1000, osl=50, concurrency=8, prompts=8, token_budget=1000)
    assert (s.groups, s.concurrency_per_group, s.prompts_per_group) == (4, 2, 2)
    # a group's sequence is 4 of the deployment's: a = (T(8) - T(4)) / (2 - 1)
    assert s.step.per_decode_seq_s == pytest.approx(0.004)


def test_async_hides_the_host_term_only_where_the_run_is_async():
    sync = served_workload(FakeModel(), isl=1000, osl=50, concurrency=1, prompts=2, token_budget=1000)
    asyn = served_workload(
        FakeModel(), isl=1000, osl=50, concurrency=1, prompts=2, token_budget=1000, async_scheduling=True
    )
    assert sync.tpot_s - asyn.tpot_s == pytest.approx(0.0045)
    assert asyn.async_hidden_s == pytest.approx(0.0045) and sync.async_hidden_s == 0
    stage = FakeModel().speed(1, 1, 1).decode
    assert async_host_term(stage, async_scheduling=None) is None  # unknown: nothing hidden
    no_host = SimpleNamespace(ops=(_op("matmul", 0.01, "matmul"),))
    assert async_host_term(no_host, async_scheduling=True) is None  # an engine with no host term: nothing to hide


def test_the_run_s_scheduling_is_its_flag_else_a_cited_default():
    assert run_scheduling("torchtpu-vllm", False) == (False, "the run's own flag")
    value, source = run_scheduling("torchtpu-vllm", None)
    assert value is True and "run_benchmarks.sh" in source and "--async-scheduling" in source
    assert run_scheduling("sglang", None)[0] is True
    value, source = run_scheduling("vllm", None)  # vLLM's own default since v0.14.0, read in its config code
    assert value is True and "VllmConfig.__post_init__" in source and "v0.14.0" in source
    assert run_scheduling("jetstream", None)[0] is None
