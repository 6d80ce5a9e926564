"""A scaled-down K3: the bundled config's structure (KDA and MLA layers, one dense MLP, MXFP4 routed
experts in a latent) at toy widths, as tests/validate's tiny model, and concrete arrays for the
abstract params and cache ``validate.abstract_model`` builds for it.

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


def scaled_config_path() -> Path:
    """The scaled config written to a fresh temporary folder (load_model reads a path)."""
    folder = Path(tempfile.mkdtemp(prefix="k3plan-scaled-k3-"))
    (folder / "config.json").write_text(json.dumps(scaled_k3_raw()))
    return folder / "config.json"


def concrete(tree, *, seed: int = 0):
    """Arrays for a pytree of sharded ShapeDtypeStructs, drawn ON the device by ONE compiled program (issue 50:
    a drawer program a distinct leaf, with jax.random's threefry, took ~2 minutes for a K3-width step's 13 GB
    on a v5e): each element is a hash of its index and its leaf's number, computed in the fusion that writes
    it -- no random-bits temporary the size of a leaf, so the draw needs no more HBM than the arrays.
    Floats ~ uniform with std 0.02, MXFP4 ``scale`` bytes 2^-7 (E8M0 120), other bytes the hash's top byte,
    integers zero. Not random numbers: weights the step can run on (routing, the next token's range)."""
    import jax
    import numpy as np

    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    plan = []
    for path, sds in leaves:
        dt = np.dtype(sds.dtype)
        if dt == np.uint8 and "scale" in jax.tree_util.keystr(path):
            kind = "scale"
        elif dt == np.uint8:
            kind = "bytes"
        elif dt.kind in "iub":
            kind = "zeros"
        else:
            kind = "normal"
        plan.append((kind, tuple(sds.shape), sds.dtype))

    def draw():
        return [_draw(kind, shape, dtype, salt=seed * 7919 + i) for i, (kind, shape, dtype) in enumerate(plan)]

    out = jax.jit(draw, out_shardings=[sds.sharding for _, sds in leaves])()
    return jax.tree_util.tree_unflatten(treedef, out)


_HALF_WIDTH = 0.02 * 3**0.5  # uniform on [-a, a] has std a / sqrt(3)


def _draw(kind: str, shape: tuple, dtype, *, salt: int):
    import jax.numpy as jnp
    from jax import lax

    if kind == "scale":
        return jnp.full(shape, 120, jnp.uint8)
    if kind == "zeros":
        return jnp.zeros(shape, dtype)
    idx = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for d in reversed(range(len(shape))):
        idx = idx + lax.broadcasted_iota(jnp.uint32, shape, d) * jnp.uint32(stride % 2**32)
        stride *= shape[d]
    h = idx * jnp.uint32(0x9E3779B1) + jnp.uint32((salt * 0x85EBCA77 + 1) % 2**32)
    h = (h ^ (h >> 16)) * jnp.uint32(0x7FEB352D)
    h = (h ^ (h >> 15)) * jnp.uint32(0x846CA68B)
    h = h ^ (h >> 16)
    if kind == "bytes":
        return (h >> 24).astype(jnp.uint8)
    u = (h >> 8).astype(jnp.float32) * (2.0 / 2**24) - 1.0
    return (u * _HALF_WIDTH).astype(dtype)


def zeros(tree):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), tree)


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
    """The config written to a fresh temporary folder named ``k3-width-<L>l-<E>e`` (the model's name, which a
    calibration of it is matched by: k3plan/evidence/calibrations/k3-width-4l-32e-v5e-*.yaml)."""
    raw = k3_width_raw(**kw)
    t = raw["text_config"]
    folder = Path(tempfile.mkdtemp(prefix="k3plan-")) / f"k3-width-{t['num_hidden_layers']}l-{t['num_experts']}e"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    return folder / "config.json"
