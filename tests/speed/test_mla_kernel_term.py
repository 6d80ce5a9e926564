"""The engine's MLA kernel at its blocks (issue 38): torchtpu-vllm picks its MLA kernel's block sizes from a tuned
table, else defaults (kernels/mla/v2/tuned_params.py get_tuned_params @79bd30e0); probe mla-engine timed the
defaults; speed.overheads.mla_kernel_term prices a step's MLA layers from those points, beyond the step
description's attention ops. Synthetic points here; the committed record's figures are in docs/device.md."""

from __future__ import annotations

import pytest

from k3plan.speed.curves import KernelTime
from k3plan.speed.overheads import MLA_DEFAULT_BLOCKS, engine_mla_blocks, mla_kernel_term


class _Curves:
    def __init__(self, pts):
        self.kernel_times = {"mla-engine": tuple(pts)}


def _pt(context, us, *, rows=512, block=(16, 1), decode=False, heads=3):
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
    )


PTS = [_pt(512, 100), _pt(8192, 900), _pt(8192, 50, block=(512, 8)), _pt(8192, 40, rows=16, block=(1, 3), decode=True)]


def _term(**kw):
    args = dict(
        stage="prefill",
        rows=512,
        context=4352,
        heads=3,
        layers=24,
        kv_dtype="bf16",
        stack="torchtpu-vllm",
        attention_s=0.0,
    )
    args.update(kw)
    return mla_kernel_term(_Curves(PTS), **args)


def test_the_engines_blocks_are_the_defaults_with_a_bf16_cache_only():
    assert engine_mla_blocks(stage="prefill", kv_dtype="bf16") == MLA_DEFAULT_BLOCKS["mixed"] == (16, 1)
    assert engine_mla_blocks(stage="decode", kv_dtype=None) == MLA_DEFAULT_BLOCKS["decode"] == (1, 3)
    assert engine_mla_blocks(stage="prefill", kv_dtype="fp8") is None  # K3's tuned entries are fp8's: unmeasured


def test_a_chunk_is_priced_at_its_context_between_measured_points_less_the_attention_ops():
    t = _term()
    per_call = 100e-6 + (4352 - 512) / (8192 - 512) * 800e-6  # linear in the context: 500 us
    assert t is not None and t.seconds == pytest.approx(24 * per_call)
    assert "16 queries x 1 pages" in t.source and "tuned_params.py" in t.source and "as measured" in t.source
    less = _term(attention_s=2e-3)
    assert less is not None and less.seconds == pytest.approx(24 * per_call - 2e-3)
    assert _term(attention_s=1.0).seconds == 0.0  # never below the ops' own time
    assert _term(context=20000).seconds == pytest.approx(24 * 900e-6)  # outside: the nearest measured
    dec = _term(stage="decode", rows=16, context=8192)
    assert dec is not None and dec.seconds == pytest.approx(24 * 40e-6)


def test_no_term_where_no_point_matches_or_the_stack_is_another():
    assert _term(kv_dtype="fp8") is None  # a tuned entry may apply
    assert _term(stack="tpu-inference") is None
    assert _term(heads=12) is None  # TP 8: 12 heads a device, not measured
    assert _term(rows=8192) is None  # a chunk of another size
    assert (
        mla_kernel_term(
            _Curves([]),
            **{
                **dict(
                    stage="prefill",
                    rows=512,
                    context=512,
                    heads=3,
                    layers=24,
                    kv_dtype="bf16",
                    stack="torchtpu-vllm",
                    attention_s=0.0,
                )
            },
        )
        is None
    )
