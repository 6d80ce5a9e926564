"""SGLang's KV dtype for DeepSeek-V4 / V4.1 (DeepseekV4ForCausalLM; V4.1's config maps to it) on a GPU: --kv-cache-dtype
auto is set to fp8_e4m3 (sglang 0.5.12-0.5.14 wheels arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults,
0.5.15-0.5.23 arg_groups/overrides.py _deepseek_v4_kv_cache_dtype), bfloat16 accepted only when given and only from
0.5.14 (0.5.12 / 0.5.13 assert kv_cache_dtype in ['fp8_e4m3']); anything else is refused. Both dtypes size the pool at
the same bytes a token: the FlashMLA slot qk_nope + 2 x qk_rope + 8 (0.5.21 wheel, model_executor/
pool_configurator.py DSV4PoolConfigurator.__init__ kv_bytes), so the stack's KV dtype is the engine's default (fp8)
in fit and plan (Engine.architecture_kv, Stack.architecture_kv) and only the label and the launch line move."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.sglang.releases import DSV4_KV_ARCHITECTURES
from k3plan.models.loader import load_model
from k3plan.setup import make_setup

FLASH = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8"


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash", "deepseek-v4-pro"])
def test_the_stack_holds_the_engines_fp8_for_v4(model):
    assert load_model(model).spec.architecture in DSV4_KV_ARCHITECTURES
    s = make_setup(model=model, hardware="nvidia-b200", topology="8", stack="sglang")
    assert s.stack.kv_cache.dtype == "fp8"
    assert any("fp8_e4m3" in n for n in s.notes)


def test_another_model_keeps_its_own():
    s = make_setup(model="kimi-k2", hardware="nvidia-b200", topology="8", stack="sglang")
    assert s.stack.kv_cache.dtype == "bf16"


def test_plan_recommends_the_engines_dtype(cli):
    r = cli("plan", "-m", "deepseek-v4-flash", "--stacks", "sglang", "-H", "nvidia-b200", "--max-chips", "8")
    assert r.exit_code == 0, r.output
    assert "--kv-dtype fp8 " in r.output and "--kv-dtype bf16" not in r.output
    assert "--kv-cache-dtype fp8_e4m3" in r.output


def _fit(cli, cmd: str, *extra: str):
    return cli("fit", "-H", "nvidia-b200", "-t", "8", *extra, "--serve", cmd, "--json")


def test_bfloat16_sizes_the_pool_as_auto(cli):
    auto, bf16 = _fit(cli, FLASH), _fit(cli, FLASH + " --kv-cache-dtype bfloat16")
    assert auto.exit_code == bf16.exit_code == 0
    a, b = json.loads(auto.stdout)["engine"], json.loads(bf16.stdout)["engine"]
    assert a["kv_pool_tokens"] == b["kv_pool_tokens"] and a["kv_pool_bytes"] == b["kv_pool_bytes"]


@pytest.mark.parametrize(
    ("flag", "version"), [("bfloat16", "0.5.13"), ("fp8_e5m2", None)], ids=["bf16-before-0.5.14", "e5m2"]
)
def test_what_sglang_refuses_is_refused(cli, flag, version):
    extra = ("--engine-version", version) if version else ()
    r = _fit(cli, FLASH + f" --kv-cache-dtype {flag}", *extra)
    assert r.exit_code == 2 and "not supported for DeepseekV4ForCausalLM" in r.output


def test_a_tpu_binding_keeps_the_stacks_own(cli):
    """SGLang's rule is a GPU's: plan's space binds dp-attention per kind after for_model (Stack.bindings), and its
    TPU binding takes the stack's own dtype back, its GPU binding keeps the engine's fp8."""
    for hw, kv in (("tpu-v7x", "bf16"), ("nvidia-h200", "fp8")):
        r = cli("plan", "-m", "deepseek-v4-flash", "--stacks", "dp-attention", "-H", hw, "--max-chips", "8")
        assert r.exit_code == 0, r.output
        assert f"--kv-dtype {kv} " in r.output
