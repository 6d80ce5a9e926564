"""The term prefill-pass: each step that prefills holds the engine loop for the engine's TTFT floor (SGLang runs a
prefill batch as a step of its own, its prefill without a CUDA graph for DeepSeek-V4 and Kimi-K3), so the decode batch
waits for it; the request's own pass is the floor its TTFT carries once. No new parameter: the floor is the one the
score fits on the published TTFTs, held out case by case."""

from __future__ import annotations

import numpy as np
import pytest

from k3plan.speed.scheduler import StepCoefficients, simulate, steady_state

PASS = 0.2
STEP = StepCoefficients(base_s=0.01, per_decode_seq_s=0.0, per_prefill_token_s=1e-5, source="test")
HELD = StepCoefficients(
    base_s=0.01, per_decode_seq_s=0.0, per_prefill_token_s=1e-5, source="test", per_prefill_pass_s=PASS
)


def test_a_step_pays_the_pass_only_where_it_prefills():
    assert HELD(8, 0) == pytest.approx(STEP(8, 0))
    assert HELD(8, 100) == pytest.approx(STEP(8, 100) + PASS)
    got = HELD(np.array([4, 4]), np.array([0, 512]))  # plan's columns: the same rule element-wise
    assert got == pytest.approx(STEP(np.array([4, 4]), np.array([0, 512])) + np.array([0.0, PASS]))


def test_a_negative_pass_is_refused():
    with pytest.raises(ValueError, match="per_prefill_pass_s"):
        StepCoefficients(base_s=0.0, per_decode_seq_s=0.0, per_prefill_token_s=0.0, source="t", per_prefill_pass_s=-1)


def test_the_decode_batch_waits_for_every_prefill_step_under_sglang_s_rule():
    """Prefill-first, 16 requests of the client's lengths at a time: the decoders wait out every prefill step, so a
    decode step is followed by about 16 passes in a request's 64 (one a request), +PASS x 16 / 64 on the TPOT; the
    TTFT grows by its own pass at least."""
    run = dict(isl=1024, osl=64, token_budget=8192, concurrency=16, prompts=64, prefill_first=True, range_ratio=0.5)
    off, on = simulate(step_time=STEP, **run), simulate(step_time=HELD, **run)
    assert on.tpot_s - off.tpot_s == pytest.approx(PASS * 16 / 64, rel=0.35)
    assert on.ttft_s > off.ttft_s + PASS
    assert on.output_tokens_per_s < off.output_tokens_per_s


def test_one_request_pays_one_pass():
    """One request alone: its one prefill step carries the pass, its decode none."""
    run = dict(isl=1024, osl=32, token_budget=8192, concurrency=1, prompts=3, prefill_first=True)
    off, on = simulate(step_time=STEP, **run), simulate(step_time=HELD, **run)
    assert on.ttft_s == pytest.approx(off.ttft_s + PASS)
    assert on.tpot_s == pytest.approx(off.tpot_s)


def test_the_mixed_steady_state_pays_it_every_step():
    """vLLM's mixed steady state prefills some tokens every step: each step pays the pass."""
    kw = dict(isl=1024, osl=64, token_budget=8192, concurrency=16)
    off, on = steady_state(step=STEP, **kw), steady_state(step=HELD, **kw)
    assert on.tpot_s == pytest.approx(off.tpot_s + PASS)


@pytest.fixture(scope="module")
def dsv4_case():
    from k3plan.app.score import Models
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.terms import default_terms

    b = next(
        b
        for b in load_benchmarks()
        if b.path.endswith("deepseek-v4-flash-sglang-h200-tp4-marlin-isl8192-osl1024-c1024.yaml")
    )
    m, _, why = Models().of(b, frozenset(default_terms()))
    assert m is not None, why
    return m, b


def test_a_served_run_says_its_pass_and_leaves_the_own_one_to_the_floor(dsv4_case):
    """The served TTFT leaves out the request's own pass (the floor every TTFT carries once, engine_floor_s): the
    figure a client measures is TTFT + floor with the term or without it."""
    from k3plan.speed.serving import served_of

    m, b = dsv4_case
    on, _ = served_of(m, b, pass_s=PASS)
    off, _ = served_of(m, b, pass_s=0.0)
    assert f"+ {PASS * 1e3:.1f} ms a step that prefills (term prefill-pass" in on.label
    assert "prefill-pass" not in off.label
    assert on.step.per_prefill_pass_s == PASS and off.step.per_prefill_pass_s == 0.0
    assert on.ttft_s == pytest.approx(on.result.ttft_s - PASS)
    assert on.tpot_s > off.tpot_s and on.result.output_tokens_per_s < off.result.output_tokens_per_s


def test_the_commands_take_the_admitted_floor_for_sglang_only():
    """loop_pass_s: the admitted SGLang floor for an SGLang stack with the term ON (its engine x hardware's where the
    admission fitted one, else the engine's); 0 for vLLM, or with it OFF."""
    from k3plan.app.setup import setup_from
    from k3plan.speed.serving import ModelAt, loop_pass_s
    from k3plan.speed.terms import default_terms, ttft_floor_s

    on = default_terms()
    assert "prefill-pass" in on
    sg = setup_from(model="deepseek-v4-flash", hardware="nvidia-h200", topology="4", tp=4, ep=4, dp=1, stack="sglang")
    vl = setup_from(model="deepseek-v4-flash", hardware="nvidia-h200", topology="4", tp=4, ep=4, dp=1, stack="vllm")
    own = ttft_floor_s("sglang", "nvidia-h200")
    assert loop_pass_s(ModelAt(sg, sg.hardware, evidence=None, terms=on)) == pytest.approx(own)
    assert loop_pass_s(ModelAt(sg, sg.hardware, evidence=None, terms=on - {"prefill-pass"})) == 0.0
    assert loop_pass_s(ModelAt(vl, vl.hardware, evidence=None, terms=on)) == 0.0


def test_pass_engine_floor_holds_the_engine_s_floor_in_the_loop_and_leaves_the_family_s_to_the_ttft():
    """With pass-engine-floor a prefill step holds the loop for the engine's admitted floor where a family floor is
    fitted; the TTFT's own floor stays the family's."""
    from k3plan.app.setup import setup_from
    from k3plan.speed.serving import ModelAt, engine_floor_s, loop_pass_s
    from k3plan.speed.terms import default_terms, ttft_floor_s

    on = default_terms() | {"prefill-pass"}
    sg = setup_from(model="deepseek-v4-flash", hardware="nvidia-h200", topology="4", tp=4, ep=4, dp=1, stack="sglang")
    with_it = ModelAt(sg, sg.hardware, evidence=None, terms=on | {"pass-engine-floor"})
    assert loop_pass_s(with_it) == pytest.approx(ttft_floor_s("sglang"))
    assert engine_floor_s(with_it)[0] == pytest.approx(ttft_floor_s("sglang", "nvidia-h200"))


def test_the_score_applies_it_to_sglang_s_runs_only():
    """With the term, every SGLang row is served again at its held-out floor and says so; no other engine's row
    moves."""
    from k3plan.app.score import score_rows
    from k3plan.speed.terms import default_terms

    on = default_terms()
    with_it = {r.case: r for r in score_rows(terms=on)}
    without = {r.case: r for r in score_rows(terms=on - {"prefill-pass"})}
    for case, r in with_it.items():
        if r.family.startswith("sglang"):
            assert "(term prefill-pass)" in r.priced_as
            assert r.held_out_throughput_ratio is None or r.tpot_model_ms >= without[case].tpot_model_ms * 0.999
        else:
            assert r == without[case]
