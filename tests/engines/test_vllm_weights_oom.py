"""Where vLLM raises the weights' out-of-memory error follows the checkpoint's expert format: the MoE method that
format selects allocates the expert tensors, nearly all of the bytes (engines/vllm/memory.py weights_oom_at, vllm
0.33.0 wheel). It named mxfp4.py Mxfp4MoEMethod (vllm-project/vllm#51124's K3 traceback) for every checkpoint, an
FP8 DeepSeek-R1 among them (llm-d's H100 log: tests/engines/cases/vllm-llmd-r1-h100-tp1-16k.yaml)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(
    ("hardware", "model", "raised"),
    [
        ("nvidia-h100-sxm", "deepseek-ai/DeepSeek-R1", "quantization/fp8.py Fp8MoEMethod.create_weights"),
        ("nvidia-h100-sxm", "moonshotai/Kimi-K3", "quantization/mxfp4.py Mxfp4MoEMethod.create_weights"),
        (
            "nvidia-h100-sxm",
            "moonshotai/Kimi-K2-Thinking",
            "compressed_tensors_moe_wna16.py CompressedTensorsWNA16MoEMethod.create_weights",
        ),
        (
            "nvidia-b200",
            "nvidia/DeepSeek-R1-0528-FP4-v2",
            "quantization/modelopt.py ModelOptNvFp4FusedMoE.create_weights",
        ),
    ],
)
def test_the_weights_oom_names_the_moe_method_of_the_checkpoint_s_experts(cli, hardware, model, raised):
    r = cli("fit", "-H", hardware, "-t", "1", "--serve", f"vllm serve {model} --max-model-len 4096", "--json")
    eng = json.loads(r.stdout)["engine"]
    assert r.exit_code == 1 and not eng["starts"] and "while loading the weights" in eng["message"]
    assert raised in eng["raised_at"]
