"""One formula for the KV bytes of a sequence (issue 51): ``k3plan.step.memory.kv_sequence_bytes`` and its inverse
``kv_context_tokens``. The budget's columns, a Setup's cache layout, a speculative-decoding draft's KV and a parked
session all go through it; before, the draft's longest context read ``n_mla`` layers where the pool holds
``layers_held`` (vLLM's layer groups under --pp) and its KV ignored the block rounding the budget applies."""

from __future__ import annotations

import inspect

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import k3plan.workload.draft as draft
from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import load_stack
from k3plan.models import load_model
from k3plan.setup import make_setup
from k3plan.step.cache import cache_layout, kv_bytes_per_token_layer
from k3plan.step.memory import BudgetTerms, kv_context_tokens, kv_sequence_bytes
from k3plan.tiers.sessions import stored_session_bytes
from k3plan.workload.draft import DraftKv, add_draft_kv

BLOCK = st.sampled_from([1, 16, 64, 256, 1024])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    ctx=st.integers(0, 1 << 21),
    block=BLOCK,
    layers=st.integers(0, 72),
    per=st.integers(0, 4096),
    extra=st.integers(0, 8192),
)
def test_the_formula_by_hand_and_over_columns(ctx, block, layers, per, extra):
    got = kv_sequence_bytes(
        ctx, block_tokens=block, layers=layers, kv_bytes_per_token_layer=per, extra_bytes_per_token=extra
    )
    assert got == -(-ctx // block) * block * (layers * per + extra)  # whole blocks, every page of a token
    col = kv_sequence_bytes(
        np.array([ctx, ctx]),
        block_tokens=np.array([block, block]),
        layers=layers,
        kv_bytes_per_token_layer=np.array([per, per]),
        extra_bytes_per_token=extra,
    )
    assert col.tolist() == [got, got]  # the same numbers over numpy columns (plan)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    room=st.integers(-10, 1 << 40),
    block=BLOCK,
    layers=st.integers(0, 72),
    per=st.integers(0, 4096),
    extra=st.integers(0, 8192),
)
def test_the_inverse_is_the_longest_context_that_fits(room, block, layers, per, extra):
    kw = dict(block_tokens=block, layers=layers, kv_bytes_per_token_layer=per, extra_bytes_per_token=extra)
    ctx = kv_context_tokens(room, **kw)
    assert ctx % block == 0 and ctx >= 0
    if layers * per + extra and room > 0:
        assert kv_sequence_bytes(ctx, **kw) <= room < kv_sequence_bytes(ctx + block, **kw)


def test_layout_budget_and_session_call_the_one_formula():
    spec = load_model("kimi-k3").spec
    for name, hw, topo, tp in (
        ("vllm", "nvidia-b200", "2x8", 16),
        ("sglang", "nvidia-b200", "2x8", 16),
        ("torchtpu-vllm", "tpu-v7x", "2x2x4", 32),
        ("vllm-tpu", "tpu-v7x", "2x4x4", 32),
    ):
        stack = load_stack(name)
        setup = make_setup(hardware=hw, topology=topo, tp=tp, stack=name)
        lay = cache_layout(spec=spec, stack=stack, parallel=setup.parallel)
        for ctx in (1, 1000, 131_072):
            one = kv_sequence_bytes(
                ctx,
                block_tokens=lay.block_tokens,
                layers=lay.layers_held[0],
                kv_bytes_per_token_layer=lay.kv_bytes_per_token_layer,
            )
            assert lay.kv_bytes(ctx) == one
            f = fit(setup, Workload(context_tokens=ctx, batch=3, prefill_chunk_tokens=min(ctx, 4096)), evidence=False)
            assert f.per_device.kv_bytes == f.per_device.sequences * one
        per = kv_bytes_per_token_layer(spec, stack.kv_cache.dtype, stack.kv_cache.layout)
        stored = stored_session_bytes(spec=spec, stack=stack, context_tokens=1000)
        assert stored - stored_session_bytes(spec=spec, stack=stack, context_tokens=0) == kv_sequence_bytes(
            1000, block_tokens=1, layers=spec.n_mla, kv_bytes_per_token_layer=per
        )


def test_the_draft_path_is_the_one_formula():
    """The draft's KV joins a sequence in whole blocks, and the longest context with a draft is the layout's own
    inverse (no second copy of the formula in workload/draft.py)."""
    assert not hasattr(draft, "max_context_with_draft")
    assert "block_tokens *" not in inspect.getsource(draft) and "// (" not in inspect.getsource(draft)
    kv = DraftKv(bytes_per_token_per_device=10, given=True, source="test")
    terms = BudgetTerms(
        weights_bytes=0,
        reserve_bytes=0,
        sequences=2,
        kv_bytes=0,
        state_bytes=0,
        free_bytes=10**9,
        room_bytes=10**9,
        sequence_bytes=0,
        max_sequences=0,
        kv_bytes_per_token=0,
        state_bytes_per_sequence=0,
    )
    out = add_draft_kv(terms, kv=kv, context_tokens=1000, block_tokens=256, split_across_dp=False, dp=1)
    one = kv_sequence_bytes(1000, block_tokens=256, layers=0, kv_bytes_per_token_layer=0, extra_bytes_per_token=10)
    assert one == 1024 * 10 and out.kv_bytes == 2 * one and out.sequence_bytes == one


def test_fit_with_a_draft_under_vllm_layer_groups_on_pp_uses_the_pools_pages():
    """vLLM's hybrid manager at pp 2: a KV block of the binding stage holds ``layers_held[0]`` MLA pages, which can
    exceed the stage's MLA layers; the draft's longest context was read off ``n_mla`` (the drift) and now is the
    layout's inverse with the draft's bytes a token, so the longest context's KV with the draft fits the room."""
    setup = make_setup(hardware="nvidia-b200", topology="2x8", tp=8, pp=2, stack="vllm")
    w = Workload(context_tokens=32768, batch=2, prefill_chunk_tokens=4096)
    kv = DraftKv(bytes_per_token_per_device=4096, given=True, source="test")
    f = fit(setup, w, evidence=False, draft_kv=kv)
    lay = f.cache_layout
    assert lay is not None and lay.layers_held[0] == 12 != lay.n_mla == 11  # the case the drift got wrong
    ctx = f.capacity.memory_context_tokens
    per_seq_room = (f.per_device.free_bytes + f.per_device.kv_bytes + f.per_device.state_bytes) / f.per_device.sequences
    kw = dict(
        block_tokens=lay.block_tokens,
        layers=lay.layers_held[0],
        kv_bytes_per_token_layer=lay.kv_bytes_per_token_layer,
        extra_bytes_per_token=4096,
    )
    # 1,730,304 while a dequantized-experts buffer was charged (vLLM's fused MXFP4 kernels hold none); 1,936,896 at
    # the 0.9 utilization k3plan read as vLLM's default until session 44 (0.92 from 0.20.0)
    assert ctx == kv_context_tokens(per_seq_room - lay.state_bytes_per_sequence, **kw) == 2_044_416


def test_no_module_but_step_memory_writes_the_formula_out():
    """A line that rounds to whole blocks (ceil / cdiv) or divides by a block's bytes (``// (``) and names bytes a
    token is the formula written out again: before issue 51 this found it 8 times (advice/rules.py 5, step/cache.py,
    step/memory.py, workload/draft.py); only its one definition may remain."""
    import re
    from pathlib import Path

    import k3plan

    root = Path(k3plan.__file__).parent
    rounding, per_token = (
        re.compile(r"(ceil|cdiv)\(|//\s*\("),
        re.compile(r"kv_bytes|bpt\b|bytes_per_token|per_token\b"),
    )
    found = [
        f"{p.relative_to(root)}:{n}"
        for p in sorted(root.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "block" in line and per_token.search(line) and rounding.search(line)
    ]
    assert [f.split(":")[0] for f in found] == ["step/memory.py"], found  # kv_sequence_bytes' one line
