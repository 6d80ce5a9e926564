"""Fake CPU devices for the validate tests: XLA_FLAGS must be set before jax is first imported.

The tiny model is K3's structure at toy size: 8 layers (KDA x3, MLA, KDA x3, MLA; layer 1 dense),
16 experts top-2 in a 128-wide latent, MXFP4 experts as in K3's quantization_config. 8 devices:
tpu-v7x 2x2x1 (4 chips x 2), TP=8.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys

_FLAG = "--xla_force_host_platform_device_count"
if "jax" not in sys.modules:
    _flags = re.sub(_FLAG + r"=\S*", "", os.environ.get("XLA_FLAGS", "")).strip()
    os.environ["XLA_FLAGS"] = f"{_flags} {_FLAG}=8".strip()

import pytest  # noqa: E402

from k3plan.models.loader import BUNDLED_DIR  # noqa: E402


def tiny_k3_raw() -> dict:
    raw = copy.deepcopy(json.loads((BUNDLED_DIR / "kimi-k3" / "config.json").read_text()))
    raw.pop("vision_config", None)
    t = raw["text_config"]
    t.update(
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        num_experts=16,
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
    t["linear_attn_config"].update(kda_layers=[1, 2, 3, 5, 6, 7], full_attn_layers=[4, 8], num_heads=8, head_dim=32)
    return raw


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny-k3") / "config.json"
    path.write_text(json.dumps(tiny_k3_raw()))
    return str(path)


@pytest.fixture(scope="session")
def tiny_setup(tiny_config):
    from k3plan.setup import make_setup

    return make_setup(model=tiny_config, hardware="tpu-v7x", topology="2x2x1", tp=8)


def has_libtpu() -> bool:
    from k3plan.validate.targets import libtpu_version

    return libtpu_version() is not None
