"""The engine's MLA kernel at its blocks (issue 38): torchtpu-vllm picks its MLA kernel's block sizes from a tuned
table, else defaults (kernels/mla/v2/tuned_params.py get_tuned_params @79bd30e0); probe mla-engine timed the
defaults; engines/torchtpu_vllm/speed.py mla_kernel (the speed registry's term mla-kernel) prices a prefill chunk's MLA layers from those points, beyond the step
description's attention ops. Synthetic points here; the committed record's figures are in docs/device.md."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from k3plan.engines.torchtpu_vllm.speed import (
    MLA_DEFAULT_BLOCKS,
    MLA_DEFAULT_PAGE,
    MLA_STEP_BOUND,
    engine_mla_blocks,
    mla_kernel,
)
from k3plan.speed.curves import KernelTime
from k3plan.speed.terms import BY_NAME, TermKey


def _pt(context, us, *, rows=512, block=(16, 1), decode=False, heads=3, page=16, eff=0.01):
    return KernelTime(
        tokens=rows,
        blocks=0,
        seconds=us * 1e-6,
        record_path="r.json",
        device_kind="TPU v5 lite",
        context=context,
        block=block,
        decode=decode,
        heads=heads,
        page=page,
        efficiency=eff,
    )


PTS = [_pt(512, 100), _pt(2048, 300), _pt(8192, 900), _pt(8192, 50, block=(512, 8))]
PTS += [_pt(1024, 20, rows=16, block=(1, 3), decode=True), _pt(8192, 90, rows=16, block=(1, 3), decode=True)]
PTS += [_pt(8192, 30, page=192)]  # another page size: not the engine's
ARGS = dict(stage="prefill", rows=512, context=4352, heads=3, layers=24, kv_dtype="bf16", attention_s=0.0)


def _term(pts=PTS, stack="torchtpu-vllm", **kw):
    """The registry's mla-kernel term where its key holds (the stack, a TPU, the cache's dtype), priced by the
    engine's rule."""
    args = {**ARGS, **kw}
    key = TermKey(stage=args["stage"], stack=stack, hardware="tpu", kv_dtype=args["kv_dtype"])
    if not BY_NAME["mla-kernel"].applies(key):
        return None
    timed = mla_kernel(pts, **args)
    return None if timed is None else SimpleNamespace(seconds=timed[0], source=timed[1])


def test_the_engines_blocks_are_the_defaults_with_a_bf16_cache_only():
    assert engine_mla_blocks(stage="prefill", kv_dtype="bf16") == MLA_DEFAULT_BLOCKS["mixed"] == (16, 1)
    assert engine_mla_blocks(stage="decode", kv_dtype=None) == MLA_DEFAULT_BLOCKS["decode"] == (1, 3)
    assert engine_mla_blocks(stage="prefill", kv_dtype="fp8") is None  # K3's tuned entries are fp8's: not measured
    assert MLA_DEFAULT_PAGE == 16  # the plugin's default KV block, as its benchmark configs say


def test_a_chunk_is_priced_at_its_context_linear_in_it_less_the_attention_ops():
    t = _term()
    per_call = 300e-6 + (4352 - 2048) / (8192 - 2048) * 600e-6  # between the two points around it
    assert t is not None and t.seconds == pytest.approx(24 * per_call)
    assert "16 queries x 1 pages of 16 tokens" in t.source and "tuned_params.py" in t.source
    assert "16-token default" in t.source and "as measured" in t.source
    assert _term(attention_s=2e-3).seconds == pytest.approx(24 * per_call - 2e-3)
    assert _term(attention_s=1.0).seconds == 0.0  # never below the ops' own time
    # beyond the last point the time a step stays: linear through the last two (a longer prompt's chunks)
    assert _term(context=14336).seconds == pytest.approx(24 * (900e-6 + 6144 / 6144 * 600e-6))
    assert _term(context=256).seconds == pytest.approx(24 * 100e-6)  # below: the first point
    assert _term([_pt(8192, 900)], context=20000).seconds == pytest.approx(24 * 900e-6)  # one point: as it is
    dec = _term(stage="decode", rows=16, context=4608)
    assert dec is not None and dec.seconds == pytest.approx(24 * (20e-6 + (4608 - 1024) / 7168 * 70e-6))
    assert "the decode pass" in dec.source and "lower bound" not in dec.source
    more = _term(stage="decode", rows=16, context=4608, sequences=4)
    assert more.seconds == dec.seconds and "4 sequences a device where one was measured: a lower bound" in more.source


def test_a_point_that_streams_the_cache_is_not_taken_as_measured():
    streaming = [_pt(1024, 20, rows=16, block=(1, 3), decode=True, eff=MLA_STEP_BOUND)]
    assert _term(streaming, stage="decode", rows=16) is None  # the attention ops' HBM efficiency prices it
    assert _term([_pt(512, 100, eff=None)]) is None  # no ceiling known: not shown to be step-bound


def test_no_term_where_no_point_matches_or_the_stack_is_another():
    assert _term(kv_dtype="fp8") is None  # a tuned entry may apply
    assert _term(stack="tpu-inference") is None
    assert _term(heads=12) is None  # TP 8: 12 heads a device, not measured
    assert _term(rows=8192) is None  # a chunk of another size
    assert _term(rows=16) is None  # the decode pass's points are not a chunk's
    assert _term([_pt(8192, 30, page=192)]) is None  # a page the engine does not run
    assert _term([]) is None
