"""--prefix-hit on fit and roofline: TTFT with and without the hit, and the tier the prefix comes from.
Expected numbers by hand from k3-facts (KV a token), the v7x spec's host tier and the roofline's own
whole-prompt TTFT."""

from __future__ import annotations

import json
import math

import pytest
from k3_testing import one_error_line

# k3-facts.md §3: 24 MLA layers x 576 values, which tpu-inference pads to 512 + 128 = 640 (the vllm-tpu stack's
# kv_cache.layout), x 2 B (bf16), the whole latent on every TP rank (vllm-tpu)
KV_BPT_PER_DEVICE = 24 * 640 * 2  # 30,720
# hardware_specs/tpu-v7x.yaml memory_tiers.host_dram: 4 chips a host x 64 GB/s (PCIe Gen5 x16) = 256 GB/s
HOST_BW = 256e9
# 2x4x4 = 32 chips, 2 devices a chip, 4 chips a host: 8 hosts of 8 devices
DEVICES_PER_HOST = 8
CONTEXT = 131072
SETUP = ("-t", "2x4x4", "--tp", "32")


def _json(cli, *args):
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def cli_m():
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def test_fit_prefix_hit_from_host_dram_by_hand(cli_m):
    d = _json(cli_m, "fit", *SETUP, "--prefix-hit", "0.6", "--prefix-tier", "host")
    ttft_cold = _json(cli_m, "roofline", *SETUP)["prefill"]["ceiling_ttft_s"]  # the whole prompt, no cache (the bound)
    p = d["prefix_hit"]
    cached = math.floor(0.6 * CONTEXT)  # 78,643
    block = d["cache_layout"]["block_tokens"]
    loaded = math.ceil(cached / block) * block * KV_BPT_PER_DEVICE + d["per_device"]["state_bytes_per_sequence"]
    load_s = loaded * DEVICES_PER_HOST / HOST_BW  # the spec gives the host tier no latency
    assert p["tier"] == "host_dram"
    assert p["effect"]["cached_tokens"] == cached
    assert p["loaded_bytes_per_device"] == loaded
    assert math.isclose(p["load_s"], load_s, rel_tol=1e-12)
    assert math.isclose(p["effect"]["ttft_cold_s"], ttft_cold, rel_tol=1e-12)
    warm = (CONTEXT - cached) * ttft_cold / CONTEXT + load_s
    assert math.isclose(p["effect"]["ttft_s"], warm, rel_tol=1e-9)
    assert 0 < p["effect"]["ttft_s"] < ttft_cold


def test_roofline_prefix_hit_from_hbm_has_no_load_and_prints_both_ttfts(cli_m):
    d = _json(cli_m, "roofline", *SETUP, "--prefix-hit", "0.9")
    cold = d["prefill"]["ceiling_ttft_s"]
    p = d["prefix_hit"]
    assert p["tier"] == "hbm" and p["load_s"] == 0 and p["loaded_bytes_per_device"] == 0
    # 10% of the prompt left to prefill: 131,072 - floor(0.9 x 131,072) = 13,108 tokens
    assert math.isclose(p["effect"]["ttft_s"], 13108 * cold / CONTEXT, rel_tol=1e-9)
    out = " ".join(cli_m("roofline", *SETUP, "--prefix-hit", "0.9").stdout.split())  # rich wraps lines
    assert (
        f"TTFT (one prompt's prefill, no queue) {cold * 1e3:,.1f} ms without the hit -> {13108 * cold / CONTEXT * 1e3:,.1f} ms with it"
        in out
    )
    assert "cached in hbm" in out


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--prefix-hit", "1.5"), "--prefix-hit 1.5"),
        (("--prefix-hit", "-0.1"), "--prefix-hit -0.1"),
        (("--prefix-hit", "nan"), "--prefix-hit nan"),
        (("--prefix-hit", "x"), "--prefix-hit"),
        (("--prefix-hit", "0.5", "--prefix-tier", "disk"), "--prefix-tier 'disk'"),
        (("--prefix-tier", "host"), "--prefix-tier: only with --prefix-hit"),
        (("--prefix-hit", "0.5", "--prefix-tier", "ssd"), "--prefix-tier ssd: tpu-v7x has no local_ssd tier"),
    ],
)
@pytest.mark.parametrize("command", ["fit", "roofline"])
def test_bad_prefix_values_exit_2_with_one_line(cli_m, command, args, flag):
    line = one_error_line(cli_m(command, *SETUP, *args))
    assert flag in line


def test_plan_prefix_hit_prices_the_picks_prompt_of_isl_tokens(cli_m):
    args = ("plan", "-H", "tpu-v7x", "--max-chips", "64", "--isl", "32000", "--osl", "500", "--concurrency", "8")
    d = _json(cli_m, *args, "--prefix-hit", "0.8", "--prefix-tier", "host")
    r, p = d["recommended"], d["prefix_hit"]
    # the pick's own prefill roofline for the 32,000-token prompt, through `k3plan roofline`
    roof = _json(
        cli_m, "roofline", "-H", r["hardware"], "-t", r["topology"], "--tp", r["tp"], "--ep", r["ep"], "--dp", r["dp"],
        "--stack", r["stack"], "--kv-dtype", r["kv_dtype"], "--context", "32000", "--chunk", r["chunk_tokens"],
    )  # fmt: skip
    cold = roof["prefill"]["ceiling_ttft_s"]  # the prefill bound: what plan and roofline price a hit on
    cached = math.floor(0.8 * 32000)  # 25,600 tokens
    assert p["effect"]["prompt_tokens"] == 32000 and p["effect"]["cached_tokens"] == cached
    assert math.isclose(p["effect"]["ttft_cold_s"], cold, rel_tol=1e-12)
    assert p["tier"] == "host_dram" and p["load_s"] > 0
    assert math.isclose(p["effect"]["ttft_s"], (32000 - cached) * cold / 32000 + p["load_s"], rel_tol=1e-9)
    line = one_error_line(cli_m(*args, "--prefix-hit", "2"))
    assert "--prefix-hit 2.0" in line
