"""The MoonViT vision tower + projector (kind ``vision``: counted apart from the text model).

- Kimi K3 (``mm_projector_type`` patchmergerv2, the default): 27 blocks, RMSNorm, no biases, a 2x2 patch merge
  and a PatchMergerV2 projector to the text width (165 vision_tower + 3 mm_projector tensors).
- Kimi-K2.5 / K2.6 (``mm_projector_type`` patchmerger): 27 blocks of width 1152 (16 heads, MLP 4304), LayerNorm
  and every Linear with a bias, a fused wqkv of 3 x width, a [64, 64, width] position table (the temporal one is
  fixed, not stored) and a patch-merger projector (LayerNorm pre_norm, then 4 x width -> 4 x width -> text
  width, with biases): 329 vision_tower + 6 mm_projector tensors, as the released checkpoint's census lists them
  (models/bundled/kimi-k2.6/provenance.json)."""

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
    projector = vc.get("mm_projector_type", "patchmergerv2")
    if projector == "patchmerger":
        _k25_tower(b, cfg, w=w, ff=ff, P=P, merged=merged, text=spec.hidden_size, V=V)
        return
    if projector != "patchmergerv2":
        raise K3PlanError(
            f"{spec.source}: field 'vision_config.mm_projector_type' is {projector!r}; expected 'patchmergerv2' "
            "(Kimi K3) or 'patchmerger' (Kimi-K2.5/K2.6)"
        )
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


def _k25_tower(b: InventoryBuilder, cfg: dict, *, w: int, ff: int, P: int, merged: int, text: int, V: dict) -> None:
    """Kimi-K2.5/K2.6's MoonViT: LayerNorms and Linears with biases, fused wqkv 3 x width, patch-merger projector."""
    W = [("vision_embed", w)]
    Q = [("vision_qkv", 3 * w)]
    F = [("vision_mlp", ff)]
    M = [("vision_merged", merged)]
    T = [("embed", text)]
    b.add("vision_tower.patch_embed.proj.weight", [W, [("rgb", 3)], [("patch", P)], [("patch", P)]], **V)
    b.vector("vision_tower.patch_embed.proj.bias", W, **V)
    b.add(
        "vision_tower.patch_embed.pos_emb.weight",
        [[("pos", cfg["init_pos_emb_height"])], [("pos", cfg["init_pos_emb_width"])], W],
        **V,
    )
    for part in ("weight", "bias"):
        b.vector(f"vision_tower.encoder.final_layernorm.{part}", W, **V)
    for i in range(cfg["vt_num_hidden_layers"]):
        B = f"vision_tower.encoder.blocks.{i}."
        for part in ("weight", "bias"):
            b.vector(f"{B}norm0.{part}", W, **V)
            b.vector(f"{B}norm1.{part}", W, **V)
        for name, out, inp in (("wqkv", Q, W), ("wo", W, W), ("mlp.fc0", F, W), ("mlp.fc1", W, F)):
            b.linear(f"{B}{name}.weight", out, inp, **V)
            b.vector(f"{B}{name}.bias", out, **V)
    for part in ("weight", "bias"):
        b.vector(f"mm_projector.pre_norm.{part}", W, **V)
    for name, out, inp in (("proj.0", M, M), ("proj.2", T, M)):
        b.linear(f"mm_projector.{name}.weight", out, inp, **V)
        b.vector(f"mm_projector.{name}.bias", out, **V)


def vision_encoder_dims(inventory: Any) -> tuple[int, int] | None:
    """(blocks, width) of the model's MoonViT encoder, read off its vision tensors (``vision_tower.encoder.blocks.N.``
    and the ``vision_embed`` axis); None for a model without one."""
    blocks: set[int] = set()
    width = 0
    for t in inventory.of_kind("vision"):
        head, sep, rest = t.name.partition("encoder.blocks.")
        if sep:
            blocks.add(int(rest.split(".", 1)[0]))
        if not width and "vision_embed" in t.axes:
            width = t.logical_shape[t.axes.index("vision_embed")]
    return (len(blocks), width) if blocks and width else None
