"""Helpers the tests import by name (a module of its own: `from k3_testing import ...` resolves to
whichever conftest.py pytest imported last -- tests/probes/ and tests/validate/ have their own)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from k3plan.models.loader import BUNDLED_DIR

# the porting study's measured jax-native calibration on TPU v7x 2x2x4, TP 32, as the package ships it (the
# copy in ../shared/data/calibration is the same measurement; a fresh clone has only this one)
CALIBRATION = (
    Path(__file__).resolve().parents[1]
    / "k3plan"
    / "evidence"
    / "calibrations"
    / "k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml"
)


def one_error_line(result) -> str:
    """Bad input: exit 2, no traceback, exactly one line on stderr starting with 'error:'."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:")
    return lines[0]


def bundled_raw(name: str) -> dict:
    return json.loads((BUNDLED_DIR / name / "config.json").read_text())


def tiny_kimi_raw() -> dict:
    """K3's config shrunk to 4 layers (KDA, KDA, KDA, MLA), 8 experts: every K3 feature, tiny dims."""
    raw = copy.deepcopy(bundled_raw("kimi-k3"))
    raw.pop("vision_config")
    t = raw["text_config"]
    t.update(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_experts=8,
        num_experts_per_token=2,
        routed_expert_hidden_size=128,
        moe_intermediate_size=64,
        intermediate_size=512,
        vocab_size=1024,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
    )
    t["linear_attn_config"].update(kda_layers=[1, 2, 3], full_attn_layers=[4], num_heads=4, head_dim=32)
    return raw


_STACK_DIR = None


def transposed_torchtpu_stack() -> str:
    """A stack YAML path: torchtpu-vllm with tpu-inference's MLA_TRANSPOSE_KV_CACHE=1 entry (576 values a token a
    MLA layer, the rope part unpadded), for the hand arithmetic of k3-facts.md §3's 576-value tables on a
    head-parallel TP deployment (tpu-inference itself runs attention TP only under DP attention)."""
    import os
    import tempfile
    from pathlib import Path

    import yaml

    from k3plan.engines.registry import stack_path
    from k3plan.engines.stack import load_stack
    from k3plan.structs import dump

    data = yaml.safe_load((stack_path("torchtpu-vllm")).read_text())
    data["name"] = "torchtpu-vllm-transposed"
    layout = load_stack("tpu-inference:mla_transpose_kv_cache=1").kv_cache.layout
    assert layout is not None
    data["kv_cache"]["layout"] = dump(layout)
    global _STACK_DIR
    if _STACK_DIR is None:  # removed when the test process ends (a file a process was left in /tmp before)
        _STACK_DIR = tempfile.TemporaryDirectory(prefix=f"k3plan-test-{os.getpid()}-")
    path = Path(_STACK_DIR.name) / "torchtpu-transposed.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def dsv3_fp8_mlp_bytes(intermediate: int, layers: int) -> int:
    """gate, up and down of hidden x ``intermediate`` in FP8 (1 B) with a float32 scale a 128 x 128 block
    (quantization_config.weight_block_size), over ``layers`` layers, from the bundled DeepSeek-V3 config."""
    c = bundled_raw("deepseek-v3")
    h = c["hidden_size"]
    bh, bi = c["quantization_config"]["weight_block_size"]
    return layers * (3 * h * intermediate + 3 * (h // bh) * (intermediate // bi) * 4)


def dsv3_dense_mlp_bytes() -> int:
    """DeepSeek-V3's dense layers' MLPs (first_k_dense_replace of them), whole."""
    c = bundled_raw("deepseek-v3")
    return dsv3_fp8_mlp_bytes(c["intermediate_size"], c["first_k_dense_replace"])


def dsv3_shared_expert_bytes() -> int:
    """DeepSeek-V3's shared experts over its MoE layers, whole."""
    c = bundled_raw("deepseek-v3")
    moe_layers = c["num_hidden_layers"] - c["first_k_dense_replace"]
    return dsv3_fp8_mlp_bytes(c["moe_intermediate_size"] * c["n_shared_experts"], moe_layers)
