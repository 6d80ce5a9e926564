"""SGLang's Mxfp4MoEMethod under AITER pads a TP-split MXFP4 expert shard to 256 (128 with SGLANG_AITER_K3_OPT) on an
AMD GPU (engines/sglang/moe_padding.py, read in the sglang 0.5.17-0.5.23 wheels): Kimi-K3 at TP 8 holds 3,072 / 8 =
384 as 512 without the switch, and as loaded with it -- the AMD day-0 recipe's case (sgl-project/sglang#32548,
tests/engines/cases/sglang-32548-kimi-k3-mi355x-tp8.yaml) sets it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.sglang.moe_padding import expert_shard_pad

AITER = {"SGLANG_USE_AITER": "1"}
K3_OPT = {**AITER, "SGLANG_AITER_K3_OPT": "1"}
RECIPE = (
    "sglang serve --model-path moonshotai/Kimi-K3 --trust-remote-code --tp 8 --attention-backend triton "
    "--dtype bfloat16 --mem-fraction-static 0.85 --cuda-graph-max-bs-decode 256 --disable-radix-cache"
)


def _pad(**kw):
    args = dict(architecture="kimi_k3", hardware="amd-mi355x", vendor="amd", intermediate=3072, shards=8, env=AITER)
    got = expert_shard_pad(**{**args, **kw})
    return None if got is None else got[:2]


def test_k3_at_tp8_pads_384_to_512_without_the_switch_and_not_with_it():
    assert _pad() == (4096, 3072)  # 512 x 8 over 3,072: the experts' share x 4 / 3
    assert _pad(env=K3_OPT) is None  # 384 is a multiple of 128
    assert _pad(shards=16, env=K3_OPT) == (4096, 3072)  # 192 -> 256 under the switch too
    assert _pad(shards=4) is None  # 768: a multiple of 256


def test_only_amd_with_aiter_for_k3_from_0_5_17():
    assert _pad(env={}) is None and _pad(env={"SGLANG_USE_AITER": "0"}) is None
    assert _pad(vendor="nvidia") is None
    assert _pad(architecture="kimi_k25") is None
    assert _pad(release=(0, 5, 16)) is None and _pad(release=(0, 5, 17)) == (4096, 3072)


def test_expert_parallel_splits_the_expert_over_tp_over_ep():
    assert _pad(ep=8) is None  # whole experts, 3,072 a rank
    assert _pad(ep=2) is None  # 3,072 / 4 = 768
    assert _pad(shards=16, ep=2) == (4096, 3072)  # 3,072 / 8 = 384 -> 512


def _fit(env: str) -> dict:
    r = CliRunner().invoke(
        app,
        ["fit", "-H", "amd-mi355x", "-t", "8", "--serve", f"{env} {RECIPE}", "--engine-version", "0.5.17", "--json"],
    )
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_the_recipe_starts_and_without_the_switch_the_experts_grow_by_a_third():
    opt = _fit("SGLANG_USE_AITER=1 SGLANG_AITER_K3_OPT=1 AITER_FLYDSL_FORCE=1 AITER_SITUV2_A8W4=1")
    bare = _fit("SGLANG_USE_AITER=1")
    plain = _fit("")
    assert opt["starts"] and opt["weights_bytes"] == plain["weights_bytes"]
    assert bare["weights_bytes"] > opt["weights_bytes"] * 1.25 and not bare["starts"]
