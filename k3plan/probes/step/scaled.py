"""A scaled-down K3: the bundled config's structure (KDA and MLA layers, one dense MLP, MXFP4 routed
experts in a latent) at toy widths, as tests/validate's tiny model (the concrete arrays for the abstract
params and cache ``validate.abstract_model`` builds for it: ``validate.local.concrete`` / ``zeros``).

2 layers (KDA with K3's dense first MLP, MLA with the routed experts: every op kind of a K3 step), hidden
256, 8 heads, 8 experts top-2 in a 128-wide latent, vocab 1,024 (tests/conftest.py's tiny_kimi_raw
widths). XLA's CPU compile of even this takes ~5-20 s (it grows ~8 s a layer on a loaded host).
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

from k3plan.models.loader import BUNDLED_DIR

SCALED = {
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "num_experts": 8,
    "num_experts_per_token": 2,
    "routed_expert_hidden_size": 128,
    "moe_intermediate_size": 64,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
}
SCALED_KDA = {"kda_layers": [1], "full_attn_layers": [2], "num_heads": 8, "head_dim": 32}


def scaled_k3_raw() -> dict:
    raw = copy.deepcopy(json.loads((BUNDLED_DIR / "kimi-k3" / "config.json").read_text()))
    raw.pop("vision_config", None)
    t = raw["text_config"]
    t.update(SCALED)
    t["linear_attn_config"].update(SCALED_KDA)
    return raw


# the process's one temporary folder for the configs below, removed when the process ends (load_model reads a path;
# a fresh mkdtemp a call left one folder in /tmp for every test and probe that asked)
_FOLDER: tempfile.TemporaryDirectory | None = None


def _written(name: str, raw: dict) -> Path:
    """``raw`` written as ``<the process's folder>/<name>/config.json`` (a fresh subfolder a call)."""
    global _FOLDER
    if _FOLDER is None:
        _FOLDER = tempfile.TemporaryDirectory(prefix="k3plan-configs-")
    folder = Path(tempfile.mkdtemp(dir=_FOLDER.name)) / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    return folder / "config.json"


def scaled_config_path() -> Path:
    """The scaled config written to a temporary folder removed at exit (load_model reads a path)."""
    return _written("scaled-k3", scaled_k3_raw())


# K3's widths on one accelerator (issue 35): hidden 7168, latent 3584, 96 heads of 128, MLA ranks as K3's;
# the layers, the experts and the vocabulary cut so that the weights fit one 16 GiB chip. Layers keep K3's
# pattern (three KDA, then one MLA; the first MLP dense); top-16 routing is K3's.
K3_WIDTH_LAYERS = 4
K3_WIDTH_EXPERTS = 32
K3_WIDTH_VOCAB = 16384


def k3_width_raw(
    *, layers: int = K3_WIDTH_LAYERS, experts: int = K3_WIDTH_EXPERTS, vocab: int = K3_WIDTH_VOCAB
) -> dict:
    raw = copy.deepcopy(json.loads((BUNDLED_DIR / "kimi-k3" / "config.json").read_text()))
    raw.pop("vision_config", None)
    t = raw["text_config"]
    top_k = int(t["num_experts_per_token"])
    t.update({"num_hidden_layers": layers, "num_experts": max(experts, top_k), "vocab_size": vocab})
    t["linear_attn_config"].update(
        {
            "kda_layers": [i for i in range(1, layers + 1) if i % 4],
            "full_attn_layers": [i for i in range(1, layers + 1) if i % 4 == 0],
        }
    )
    return raw


def k3_width_config_path(**kw) -> Path:
    """The config written to a temporary folder named ``k3-width-<L>l-<E>e`` (the model's name, which a calibration
    of it is matched by: k3plan/evidence/calibrations/k3-width-4l-32e-v5e-*.yaml), removed at exit."""
    raw = k3_width_raw(**kw)
    t = raw["text_config"]
    return _written(f"k3-width-{t['num_hidden_layers']}l-{t['num_experts']}e", raw)
