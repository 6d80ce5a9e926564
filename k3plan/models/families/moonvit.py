"""The MoonViT vision tower + projector of Kimi K3 (kind ``vision``: counted apart from the text
model). Shapes follow the released checkpoint: 27 blocks, RMSNorm, no biases, a 2x2 patch merge and
a PatchMergerV2 projector to the text width (165 vision_tower + 3 mm_projector tensors)."""

from __future__ import annotations

from typing import Any, Iterator

from k3plan.errors import K3PlanError
from k3plan.models.builder import InventoryBuilder
from k3plan.models.config import ConfigReader
from k3plan.models.spec import ModelSpec

# The trimmed K3 config says vt_hidden_size 1152 (the Kimi-VL / K2.5 MoonViT width); the released
# K3 checkpoint's vision_tower tensors are 1024 wide (docs/k3-facts.md §2: "27 blocks of width 1024").
# Checkpoint truth wins, and the difference is printed as a note.
_VISION_CHECKPOINT_TRUTH = {"kimi_k3": {"vt_hidden_size": 1024}}
# MoonViT-3D defaults (the K3 vision encoder): RMSNorm, no biases, 2x2 patch merge, PatchMergerV2.
_VISION_DEFAULTS = {
    "patch_size": 14,
    "vt_hidden_size": 1024,
    "qkv_hidden_size": 1536,
    "vt_num_hidden_layers": 27,
    "vt_intermediate_size": 4096,
    "init_pos_emb_height": 64,
    "init_pos_emb_width": 64,
}
_MERGE_KERNEL_DEFAULT = [2, 2]


def add_vision(b: InventoryBuilder, raw: dict, spec: ModelSpec) -> Iterator[str]:
    """Add the vision tensors to ``b``; yields a note per config field the checkpoint overrides."""
    root = ConfigReader(raw, source=spec.source)
    if not root.has("vision_config"):
        return
    vc = root.sub("vision_config")
    cfg = {k: vc.int(k, d) for k, d in _VISION_DEFAULTS.items()}
    kernel = vc.int_list("merge_kernel_size", _MERGE_KERNEL_DEFAULT)
    if len(kernel) != 2 or min(kernel) < 1:
        raise K3PlanError(
            f"{spec.source}: field 'vision_config.merge_kernel_size' is {kernel!r}; expected two integers >= 1"
        )
    for key, truth in _VISION_CHECKPOINT_TRUTH.get(spec.architecture, {}).items():
        if cfg[key] != truth:
            yield (
                f"vision_config.{key} is {cfg[key]} in the config but {truth} in the checkpoint's "
                f"vision_tower tensors; the inventory follows the checkpoint"
            )
            cfg[key] = truth
    w, q, ff, P = cfg["vt_hidden_size"], cfg["qkv_hidden_size"], cfg["vt_intermediate_size"], cfg["patch_size"]
    merged = w * kernel[0] * kernel[1]
    V: dict[str, Any] = dict(fmt="bf16", kind="vision", role="vision", active=0.0)
    W = [("vision_embed", w)]
    b.add("vision_tower.patch_embed.proj.weight", [W, [("rgb", 3)], [("patch", P)], [("patch", P)]], **V)
    b.add(
        "vision_tower.patch_embed.pos_emb.weight",
        [[("pos", cfg["init_pos_emb_height"])], [("pos", cfg["init_pos_emb_width"])], W],
        **V,
    )
    b.vector("vision_tower.encoder.final_layernorm.weight", W, **V)
    for i in range(cfg["vt_num_hidden_layers"]):
        B = f"vision_tower.encoder.blocks.{i}."
        b.vector(B + "norm0.weight", W, **V)
        b.vector(B + "norm1.weight", W, **V)
        b.linear(B + "wqkv.weight", [("vision_qkv", 3 * q)], W, **V)
        b.linear(B + "wo.weight", W, [("vision_qkv", q)], **V)
        b.linear(B + "mlp.fc0.weight", [("vision_mlp", ff)], W, **V)
        b.linear(B + "mlp.fc1.weight", W, [("vision_mlp", ff)], **V)
    b.linear("mm_projector.proj.0.weight", [("vision_merged", merged)], [("vision_merged", merged)], **V)
    b.linear("mm_projector.proj.2.weight", [("embed", spec.hidden_size)], [("vision_merged", merged)], **V)
    b.vector("mm_projector.post_norm.weight", [("embed", spec.hidden_size)], **V)
