"""SGLang cuts its derived --mem-fraction-static for a multimodal model by the vision encoder's size
(ServerArgs.adjust_mem_fraction_for_vlm, read in the 0.5.8.post1 and 0.5.15 wheels; AutoFraction.vlm in the sglang
stack): Kimi-K2.5 on 8 MI355X logs 0.8260405859375 (tests/engines/cases/sglang-amdissues-kimi-k2.5-mi355x-tp8.yaml).
Only the model classes SGLang counts multimodal: not Kimi-K3's (its class builds the language model alone) nor
DeepSeek-V4.1's, whose config keeps no vision_config (sglang 0.5.21-0.5.23 wheels, configs/deepseek_v41.py pops
it: adjust_mem_fraction_for_vlm cuts nothing)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.stack import load_stack
from k3plan.hardware import load_hardware
from k3plan.models.loader import load_model


def _fraction(model: str, hardware: str = "amd-mi355x", tp: int = 8) -> float:
    """The fraction at SGLang's own defaults (moe_a2a_backend none, the GPU's chunk), as the logged run had them."""
    hw = load_hardware(hardware)
    st = load_stack("sglang:moe_a2a_backend=none").bind(hw).for_model(load_model(model))
    reserve = st.reserve_fraction(usable_bytes=hw.usable_bytes_per_device, tp=tp, pp=1, chunk=None, vendor=hw.vendor)
    return 1 - reserve


def test_kimi_k2_5_s_fraction_is_the_logged_one():
    assert _fraction("kimi-k2.6") == pytest.approx(0.8260405859375, abs=1e-12)  # 0.908 x 0.95 x 0.9576


@pytest.mark.parametrize("model", ["kimi-k3", "deepseek-v4.1-flash", "deepseek-v3"])
def test_models_sglang_does_not_count_multimodal_keep_the_derived_fraction(model):
    assert _fraction(model) == 0.908


def test_fit_and_plan_read_the_same_cut(cli):
    """plan's SGLang row for K2.6 holds the reserve fit's does (Stack.for_model in both), and it is the cut one."""
    fit = json.loads(cli("fit", "-m", "kimi-k2.6", "-H", "amd-mi355x", "-t", "8", "--stack", "sglang", "--json").stdout)
    plan = json.loads(
        cli("plan", "-m", "kimi-k2.6", "-H", "amd-mi355x", "--stacks", "sglang", "--max-chips", "8", "--json").stdout
    )
    chunk = fit["workload"]["prefill_chunk_tokens"]
    row = next(
        r for r in plan["ranked"] if (r["tp"], r["dp"], r["pp"], r["devices"], r["chunk_tokens"]) == (8, 1, 1, 8, chunk)
    )
    assert row["per_device"]["reserve_bytes"] == fit["per_device"]["reserve_bytes"]
    hw = load_hardware("amd-mi355x")
    uncut = load_stack("sglang").bind(hw)
    kw = dict(usable_bytes=hw.usable_bytes_per_device, tp=8, pp=1, chunk=chunk, vendor=hw.vendor)
    assert uncut.reserve_fraction(**kw) < uncut.for_model(load_model("kimi-k2.6")).reserve_fraction(**kw)
