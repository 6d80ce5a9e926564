"""The term swa-pool: SGLang's sliding-window pool caps the running requests of a hybrid-SWA model (DeepSeek-V4): a
request holds its first prefill chunk, in whole pages, and a page of decode for its life (sglang 0.5.15
PrefillAdder rem_swa_tokens, SWARadixCache.inc_lock_ref: speed.scheduler.SWA_RULE), the pool sized as SGLang sizes
it (engines/sglang/memory.py sglang_dsv4_swa_tokens)."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.speed.scheduler import SWA_RULE, StepCoefficients, simulate

STEP = StepCoefficients(base_s=0.01, per_decode_seq_s=1e-4, per_prefill_token_s=1e-6, source="test")
RUN = dict(step_time=STEP, isl=1000, osl=200, token_budget=8192, concurrency=64, prompts=256, prefill_first=True)


def test_the_pool_caps_the_running_requests_at_its_pages():
    """1,000-token prompts hold 4 pages + 1 of decode (1,280 tokens): a 12,800-token pool runs 10 at a time."""
    free = simulate(**RUN)
    capped = simulate(**RUN, swa_pool_tokens=12_800)
    assert free.mean_decode_seqs > 30
    assert 8 < capped.mean_decode_seqs <= 10
    assert capped.output_tokens_per_s < free.output_tokens_per_s and capped.ttft_s > free.ttft_s
    assert any(SWA_RULE in a for a in capped.assumptions)


def test_a_prompt_longer_than_the_budget_holds_one_chunk():
    """A prompt longer than the budget holds one chunk, not its prompt: 20,000 tokens at an 8,192-token budget hold
    8,192 + a page (an upper bound on its last chunk, which SGLang keeps)."""
    kw = dict(step_time=STEP, isl=20_000, osl=50, token_budget=8192, concurrency=4, prompts=8, prefill_first=True)
    assert simulate(**kw, swa_pool_tokens=2 * (8192 + 256)).mean_decode_seqs > 1.2
    with pytest.raises(K3PlanError, match="sliding-window pool"):
        simulate(**kw, swa_pool_tokens=8192)


def test_sglang_sizes_the_pool_from_the_full_tokens_its_memory_leaves(cli):
    """V4-Pro on 8 H200 at --mem-fraction-static 0.88, the cookbook cell: the sliding-window pool is 0.1 of the full
    tokens fit --serve's start check reports (SGLang's own count), in 256-token pages."""
    import json

    from k3plan.app.setup import setup_from
    from k3plan.budget.fit import check_workload, fit
    from k3plan.engines.sglang.memory import sglang_dsv4_swa_tokens

    serve = (
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --tp 8 "
        "--moe-runner-backend flashinfer_mxfp4 --mem-fraction-static 0.88"
    )
    full = json.loads(cli("fit", "-H", "nvidia-h200", "--serve", serve, "--json").stdout)["engine"]["kv_pool_tokens"]
    s = setup_from(
        model="deepseek-v4-pro",
        hardware="nvidia-h200",
        topology="8",
        tp=8,
        ep=8,
        dp=1,
        stack="sglang:moe_a2a_backend=none+mem_fraction_static=0.88",
    )
    r = fit(s, check_workload(context_tokens=9216, batch=1, prefill_chunk_tokens=8192))
    got = sglang_dsv4_swa_tokens(s, r.per_device.weights_bytes)
    assert got is not None
    swa, how = got
    assert swa == int(full * 0.1) // 256 * 256 and "0.1 x the" in how
    v41 = setup_from(
        model="deepseek-v4.1-flash", hardware="nvidia-h200", topology="4", tp=4, ep=4, dp=1, stack="sglang"
    )
    assert sglang_dsv4_swa_tokens(v41, 0) is None  # V4.1's pool is sized in cap mode, not by the ratio


def test_held_batch_draws_the_line_through_the_batch_the_run_holds():
    """The term held-batch: V4-Pro's cookbook run holds ~35 decoding at once (its pools) of 1,024 sent; the line
    through the model's step at 1 and 1,024 prices 35 far below the model's own step at 35 (the step is concave in
    the batch: the routed experts touched saturate), so the run is served again on the line through 1 and the batch
    the first run held."""
    from k3plan.app.score import Models, _fit_note, _served
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.terms import default_terms

    on = default_terms()
    assert "held-batch" in on
    b = next(
        b
        for b in load_benchmarks()
        if b.path.endswith("deepseek-v4-pro-sglang-h200-tp8-mxfp4-isl8192-osl1024-c1024.yaml")
    )
    m, _, why = Models().of(b, on)
    assert m is not None, why
    fitted = _fit_note(m.setup, b)
    with_it, _ = _served(m, b, on, fitted, pass_s=0.2)
    without, _ = _served(m, b, on - {"held-batch"}, fitted, pass_s=0.2)
    assert "term held-batch" in with_it.step.source and "held-batch" not in without.step.source
    held = round(with_it.result.output_tokens_per_s * with_it.result.tpot_s)
    assert 20 < held < 0.8 * with_it.concurrency_per_group
    ctx = b.workload.isl + b.workload.osl // 2
    for step, err in ((with_it.step, 0.35), (without.step, None)):
        line = step.base_s + step.per_decode_seq_s * held
        own = m.decode_s(held, ctx)
        if err is not None:
            assert line == pytest.approx(own, rel=err)
        else:
            assert line < 0.7 * own  # the line through 1 and 1,024 prices the held batch far below its step
    assert with_it.tpot_s > without.tpot_s
