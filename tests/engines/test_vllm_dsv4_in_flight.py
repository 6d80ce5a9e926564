"""vLLM's windowed DeepSeek-V4 groups charge a request its window plus the tokens in flight, one
max_num_batched_tokens a concurrent batch from 0.26.0 (VllmConfig.max_in_flight_tokens; 0.25.0 charged one batch),
and from 0.28.0 a >= 160 GiB GPU takes 16,384 batched tokens by default. With both, vllm-project/vllm#53961's
DeepSeek-V4-Pro on eight MI300X needs 24.06 GiB for one 1M-token request: 0.28.0's form of the check exactly (a
session-41 helper's trace of the wheel; the issue's build printed 23.32, 0.29.0's bytes-a-block form)."""

from __future__ import annotations

import json
import re

import pytest

from k3plan.engines.vllm.releases import in_flight_batches

V4 = (  # vllm-project/vllm#53961's command (tests/engines/cases/vllm-53961-dsv4-pro-mi300x-tp8-1m.yaml)
    "VLLM_ROCM_USE_AITER=1 VLLM_USE_BREAKABLE_CUDAGRAPH=0 vllm serve deepseek-ai/DeepSeek-V4-Pro --dtype auto -tp 8 "
    "--load-format dummy --no-enable-prefix-caching --kv-cache-dtype fp8"
)


@pytest.mark.parametrize(
    ("release", "async_on", "pp", "v2", "batches"),
    [
        (None, None, 1, False, 1),  # the cited v0.25.0 code
        ((0, 25, 0), None, 1, False, 1),
        ((0, 26, 0), None, 1, False, 2),  # async scheduling on by default
        ((0, 26, 0), False, 1, False, 1),
        ((0, 28, 0), None, 2, False, 2),  # the V1 runner without async at PP > 1: PP
        ((0, 31, 0), None, 2, True, 3),  # Model Runner V2: PP + 1
        # vllm 0.34.0 wheel (PyPI), vllm/config/vllm.py VllmConfig.max_concurrent_batches: Model Runner V2 the only
        # runner, PP + 1 under async scheduling (0.33.0's V1 runner at PP 2: 2)
        ((0, 33, 0), None, 2, False, 2),
        ((0, 34, 0), None, 2, False, 3),
        ((0, 34, 0), None, 1, False, 2),
        ((0, 34, 0), False, 2, False, 2),
    ],
)
def test_the_batches_in_flight_follow_the_release_and_the_scheduler(release, async_on, pp, v2, batches):
    assert in_flight_batches(release, async_scheduling=async_on, pp=pp, v2_runner=v2) == batches


def _check(cli, *extra: str) -> tuple[float, bool]:
    """(the KV one max_model_len request needs, GiB to 2 decimals; whether the check passes): from the engine's
    error where it refuses, else its pool less the check's margin (``check_margin_bytes``)."""
    r = cli("fit", "-H", "amd-mi300x", "-t", "8", "--serve", " ".join((V4, *extra[:-2])), *extra[-2:], "--json")
    eng = json.loads(r.stdout)["engine"]
    m = re.search(r"\(([\d.]+) GiB KV cache is needed", eng["message"])
    if m:
        return float(m.group(1)), eng["starts"]
    return round((eng["kv_pool_bytes"] - eng["check_margin_bytes"]) / 2**30, 2), eng["starts"]


def test_vllm_53961_s_check_at_0_28(cli):
    assert _check(cli, "--engine-version", "0.28.0") == (24.06, False)
    # without async scheduling one batch is in flight: 14.88 GiB, more than the 13.41 GiB the issue's build had too
    assert _check(cli, "--no-async-scheduling", "--engine-version", "0.28.0") == (14.88, False)


def test_vllm_53961_s_check_at_0_29_is_the_issue_s_figure(cli):
    """From 0.29.0 the check charges a block the largest group's pages summed (engines/vllm/dsv4_pages.py
    V4_FORM_SOURCES): the 23.32 GiB vllm-project/vllm#53961 prints (k3plan's available side is 4.62 GiB below the
    logged 13.41: the case's strict xfail); ROCm/MAD#235's workaround, 8,192 batched tokens, starts."""
    assert _check(cli, "--engine-version", "0.29.0")[0] == 23.32
    assert _check(cli, "--max-num-batched-tokens", "8192", "--engine-version", "0.29.0")[1]


def _v4_pro_weights(cli, hw: str, extra: str = "", release: str = "0.30.0") -> int:
    r = cli(
        "fit", "-H", hw, "-t", "8", "--serve", f"vllm serve deepseek-ai/DeepSeek-V4-Pro -tp 8 {extra}",
        "--engine-version", release, "--json",
    )  # fmt: skip
    return json.loads(r.stdout)["engine"]["weights_bytes"]


def test_v4_s_mxfp4_experts_on_gfx942_are_padded_to_256_a_shard(cli):
    """TRITON_UNFUSED on gfx942 (AITER takes MXFP4 weights on gfx950 only) rounds a TP shard's intermediate up to 256
    to vLLM 0.30.0: V4-Pro's 3,072 / 8 = 384 -> 512, the routed experts 4/3 as large (engines/vllm/moe_padding.py
    MOE_SHARD_RULES_BY_HARDWARE); gfx950's AITER + SiLU keeps 384, and expert parallelism splits whole experts."""
    gap = _v4_pro_weights(cli, "amd-mi300x") - _v4_pro_weights(cli, "amd-mi355x")
    assert 31.5 * 2**30 < gap < 32.5 * 2**30  # the experts' third: 102,756,777,984 B / 3 a GPU
    ep = "--enable-expert-parallel"
    assert abs(_v4_pro_weights(cli, "amd-mi300x", ep) - _v4_pro_weights(cli, "amd-mi355x", ep)) < 2**20


def test_from_0_31_v4_s_gfx942_shards_round_to_128_and_384_holds(cli):
    """vllm 0.31.0 wheel (PyPI), model_executor/layers/fused_moe/oracle/mxfp4.py
    mxfp4_round_up_hidden_size_and_intermediate_size: TRITON_UNFUSED before CDNA4 with SiLU rounds to 128
    (triton_uses_128, absent from the 0.29.0 / 0.30.0 wheels), so V4-Pro's 384 a shard on MI300X is held as on
    MI355X (engines/vllm/moe_padding.py MOE_SHARD_RULES_FROM); 0.31.0 is also the default release."""
    for release in ("0.31.0", "0.33.0"):
        gap = _v4_pro_weights(cli, "amd-mi300x", release=release) - _v4_pro_weights(cli, "amd-mi355x", release=release)
        assert abs(gap) < 2**20
    r = cli("fit", "-H", "amd-mi300x", "-t", "8", "--serve", "vllm serve deepseek-ai/DeepSeek-V4-Pro -tp 8", "--json")
    assert json.loads(r.stdout)["engine"]["weights_bytes"] == _v4_pro_weights(cli, "amd-mi300x", release="0.31.0")


@pytest.mark.parametrize(
    ("release", "env", "spec", "vendor", "v4", "on"),
    [
        ((0, 27, 0), {}, None, "nvidia", True, False),  # V1 before 0.28.0
        ((0, 28, 0), {}, None, "nvidia", True, True),  # 0.28.0: DeepSeek-V4 on CUDA a default V2 architecture
        ((0, 28, 0), {}, "ngram", "nvidia", True, False),
        ((0, 28, 0), {}, None, "amd", True, False),
        ((0, 31, 0), {}, None, "nvidia", True, True),  # 0.29.0 on: V2 by default
        ((0, 31, 0), {}, None, "nvidia", False, True),  # DeepSeek-V4.1 too
        ((0, 31, 0), {}, None, "amd", True, False),  # ROCM_DEFAULT_MRV1_ARCHITECTURES to 0.32.x
        ((0, 31, 0), {}, None, "amd", False, True),  # V4.1 is not in it
        ((0, 33, 0), {}, None, "amd", True, True),  # the ROCm list is gone from 0.33.0's wheel
        ((0, 31, 0), {}, "ngram", "nvidia", True, False),  # 0.29.0-0.32.x: V2 lacks ngram
        ((0, 33, 0), {}, "ngram", "nvidia", True, True),
        ((0, 33, 0), {}, "suffix", "nvidia", True, False),
        ((0, 25, 0), {}, "dspark", "nvidia", False, True),  # DSpark: V2 only
        ((0, 31, 0), {"VLLM_USE_V2_MODEL_RUNNER": "0"}, None, "nvidia", True, False),  # the variable where set
        ((0, 27, 0), {"VLLM_USE_V2_MODEL_RUNNER": "1"}, None, "nvidia", True, True),
        (None, {}, None, "nvidia", True, False),  # no release: the code the rules cite
    ],
)
def test_which_runner_runs_the_command(release, env, spec, vendor, v4, on):
    """vllm/config/vllm.py use_v2_model_runner as the 0.28.0-0.33.0 wheels read it (engines/vllm/releases.py
    model_runner_v2): the one rule the graphs' estimate (cudagraph.py v2_unprofiled) and the windowed groups'
    batches in flight read; at PP > 1 under async scheduling V2 holds PP + 1 batches, V1 PP."""
    from k3plan.engines.vllm.releases import model_runner_v2

    assert model_runner_v2(release=release, env=env, spec_method=spec, vendor=vendor, v4=v4)[0] is on
    if release is not None and release >= (0, 26, 0):
        assert in_flight_batches(release, async_scheduling=None, pp=2, v2_runner=on) == (3 if on else 2)
