"""AdviceInputs from today's `fit --json` shape, and advice on K3 at 2x2x2 (fails) vs 2x2x4."""

from __future__ import annotations

import json

import pytest

from k3plan.advice import advise
from k3plan.advice.inputs import (
    inputs_from_fit,
    kv_dtype_option_from_fit,
    topology_option_from_fit,
)
from k3plan.errors import K3PlanError


def _fit(cli, *args) -> dict:
    r = cli("fit", *args, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_missing_key_is_one_line_error():
    with pytest.raises(K3PlanError, match="missing hardware.usable_bytes_per_device"):
        inputs_from_fit({"per_device": {}, "hardware": {}})


def test_k3_2x2x2_fails_and_2x2x4_is_the_fix(cli):
    # at 8K: 2x2x4 TP=32 vllm-tpu fits there with the compiled temp (at 128K it does not, issue 15)
    ctx = ("--context", "8192")
    small, big = _fit(cli, "-t", "2x2x2", "--tp", "16", *ctx), _fit(cli, "-t", "2x2x4", "--tp", "32", *ctx)
    fp8 = _fit(cli, "-t", "2x2x2", "--tp", "16", *ctx, "--kv-dtype", "fp8_ds_mla")
    assert not small["fits"]
    x = inputs_from_fit(small, topology_options=(topology_option_from_fit(big),),
                        kv_dtype_options=(kv_dtype_option_from_fit(fp8),))
    assert x.free_bytes == small["per_device"]["free_bytes"] < 0
    a = advise(x)
    assert a.verdict == "fails"
    top = a.suggestions[0]
    assert top.action == "topology" and top.resolves and top.text.startswith("2x2x2 -> 2x2x4 (16 -> 32 devices)")
    # freed = every per-device term at 2x2x2 minus the same at 2x2x4 (same usable HBM: the free difference)
    terms = ("weights_bytes", "kv_bytes", "state_bytes", "temp_bytes", "reserve_bytes")
    assert top.freed_bytes_per_device == sum(small["per_device"][k] - big["per_device"][k] for k in terms)
    assert top.free_bytes_after == big["per_device"]["free_bytes"]
    # fp8_ds_mla: 24 MLA layers x 656 B = 15,744 B a token, whole latent on every TP rank
    kv = next(s for s in a.suggestions if s.action == "kv_dtype")
    assert "27,648 -> 15,744 B a token" in kv.text and not kv.resolves
