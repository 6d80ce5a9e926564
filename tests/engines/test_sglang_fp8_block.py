"""SGLang's fp8 block check on DeepSeek-V4's TP-split shared expert (k3plan/engines/sglang/fp8_block.py).

Sources: sgl-project/sglang#23602 (a comment, 2026-05-02: DeepSeek-V4-Pro at --tp 16 on two H20 nodes, "ValueError:
Weight output_partition_size = 192 is not divisible by weight quantization block_n = 128"); the sglang 0.5.12 wheel
(PyPI), srt/layers/quantization/fp8.py Fp8LinearMethod.validate_block_quant_shapes and srt/models/deepseek_v2.py
DeepseekV2MoE.__init__ (_shared_expert_use_tp1)."""

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app

POOL = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-{m} --tp {tp} --trust-remote-code{x}"


def _fit(hw: str, tp: int, model: str, release: str, extra: str = "") -> dict:
    r = CliRunner().invoke(
        app,
        ["fit", "-H", hw, "-t", str(tp), "--serve", POOL.format(m=model, tp=tp, x=extra)]
        + ["--engine-version", release, "--json"],
    )
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_pro_at_tp16_is_refused_with_sglangs_message():
    eng = _fit("nvidia-h20", 16, "Pro", "0.5.12")
    assert not eng["starts"]
    # the line: V4-Pro's shared expert, 3,072 rows (moe_intermediate_size x n_shared_experts) over 16 ranks
    assert eng["message"].startswith(
        "ValueError: Weight output_partition_size = 192 is not divisible by weight quantization block_n = 128."
    )
    assert "validate_block_quant_shapes" in eng["raised_at"]


@pytest.mark.parametrize(
    ("hw", "tp", "model", "release", "extra"),
    [
        ("nvidia-h20", 16, "Flash", "0.5.12", ""),  # 2,048 / 16 = 128: whole blocks
        ("nvidia-h200", 8, "Pro", "0.5.12", ""),  # 3,072 / 8 = 384
        ("nvidia-h20", 16, "Pro", "0.5.12", " --moe-a2a-backend deepep"),  # DeepEP replicates the shared expert
    ],
)
def test_no_refusal_where_sglang_builds_whole_blocks_or_does_not_split(hw, tp, model, release, extra):
    eng = _fit(hw, tp, model, release, extra)
    assert "block_n" not in eng["message"]


def test_0_5_23_refuses_it_too():
    # 0.5.23 decides the fusion in resolve_shared_experts_config (DeepseekV4ForCausalLM.shared_experts_fusion_disable_
    # reason: off without --enforce-shared-experts-fusion) and builds the shared expert over parallel_group 'tp'
    eng = _fit("nvidia-h20", 16, "Pro", "0.5.23")
    assert not eng["starts"] and "output_partition_size = 192" in eng["message"]
