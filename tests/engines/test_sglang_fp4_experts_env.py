"""SGLANG_DSV4_FP4_EXPERTS read as SGLang reads it (k3plan/engines/sglang/serve.py dsv4_fp4_experts_env).

Source: the sglang 0.5.12-0.5.23 wheels (PyPI), srt/environ.py SGLANG_DSV4_FP4_EXPERTS = EnvBool(True) and EnvBool.parse
(true / 1 / yes / y, false / 0 / no / n, any case), srt/configs/model_config.py (read for a DeepSeek-V4 config only);
sgl-project/sglang PR #34822 launches DeepSeek-V4-Flash-0731 with SGLANG_DSV4_FP4_EXPERTS=1."""

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app

CMD = "{env} python -m sglang.launch_server --model-path deepseek-ai/{model} --tp {tp} --trust-remote-code"


def _run(env: str, model: str = "DeepSeek-V4-Flash", tp: int = 4, hw: str = "nvidia-h200"):
    return CliRunner().invoke(
        app,
        ["fit", "-H", hw, "-t", str(tp), "--engine-version", "0.5.17", "--json"]
        + ["--serve", CMD.format(env=env, model=model, tp=tp)],
    )


@pytest.mark.parametrize("value", ["1", "true", "True", "y"])
def test_the_bundled_fp4_layout_is_read(value):
    assert _run(f"SGLANG_DSV4_FP4_EXPERTS={value}").exit_code in (0, 1)


@pytest.mark.parametrize("value", ["0", "false", "N"])
def test_the_fp8_expert_layout_is_refused_for_deepseek_v4(value):
    r = _run(f"SGLANG_DSV4_FP4_EXPERTS={value}")
    assert r.exit_code == 2 and "not priced" in r.output and len(r.output.strip().splitlines()) == 1


def test_a_value_envbool_does_not_take_is_refused():
    r = _run("SGLANG_DSV4_FP4_EXPERTS=maybe")
    assert r.exit_code == 2 and "is not a valid boolean value" in r.output


def test_other_models_ignore_it():
    # SGLang reads it for a DeepSeek-V4 config only (model_config.py: is_deepseek_v4)
    assert _run("SGLANG_DSV4_FP4_EXPERTS=0", model="DeepSeek-R1", tp=8).exit_code in (0, 1)
