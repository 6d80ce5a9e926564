"""SGLang 0.4.7-0.5.4 cut mem_fraction_static by 0.85 under the aiter attention backend for a model context above
8,192 tokens (engines/sglang/aiter_fraction.py, read in the 0.4.9.post2 and 0.4.10 wheels): the command's backend
or the one SGLang picks on HIP (an MLA model with 16 or 128 KV heads a TP rank, no speculative decoding)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.sglang.aiter_fraction import aiter_fraction_scale

R1 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 --trust-remote-code"


def _scale(**kw):
    args = dict(release=(0, 4, 9), vendor="amd", backend=None, speculative=False, context=163840, kv_heads=128, tp=8)
    got = aiter_fraction_scale(**{**args, **kw})
    return None if got is None else got[0]


def test_where_the_cut_applies():
    assert _scale() == 0.85  # R1 at TP 8: 16 KV heads a rank, SGLang picks aiter
    assert _scale(tp=16) is None  # 8 a rank: triton
    assert _scale(kv_heads=64) is None  # Kimi-K2's 64 heads at TP 8: triton
    assert _scale(kv_heads=64, backend="aiter") == 0.85  # the command's own backend
    assert _scale(speculative=True) is None  # no default aiter with speculative decoding
    assert _scale(context=8192) is None
    assert _scale(vendor="nvidia", backend="aiter") is None
    assert _scale(release=(0, 4, 6)) is None and _scale(release=(0, 5, 5)) is None
    assert _scale(release=(0, 4, 7)) == 0.85 and _scale(release=(0, 5, 4)) == 0.85
    assert _scale(kv_heads=None) == 0.85  # an MHA model: aiter on HIP
    # under DP attention SGLang's tp_size is the groups' TP x DP (k3plan gives each group its attention TP)
    assert _scale(tp=2, dp=4, dp_attention=True) == 0.85 and _scale(tp=2, dp=4) is None  # 16 vs 64 a rank


def _fraction(cmd: str, version: str) -> tuple[float, float]:
    res = CliRunner().invoke(
        app, ["fit", "-H", "amd-mi300x", "-t", "8", "--serve", cmd, "--engine-version", version, "--json"]
    )
    assert res.exit_code in (0, 1), res.output
    d = json.loads(res.stdout)
    return d["engine"]["kv_pool_bytes"], d["per_device"]["reserve_bytes"]


@pytest.mark.parametrize("given", ["", " --mem-fraction-static 0.9"])
def test_the_pool_and_the_reserve_read_the_cut_fraction(given):
    cut_pool, cut_reserve = _fraction(R1 + given, "0.4.8")
    # the same command with a context of 8,192: no cut
    pool, reserve = _fraction(R1 + given + " --context-length 8192", "0.4.8")
    assert cut_pool < pool and cut_reserve > reserve
