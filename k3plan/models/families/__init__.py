"""The architecture-family registry: config.json -> (ModelSpec, TensorInventory)."""

from __future__ import annotations

from types import ModuleType

from k3plan.models.families import deepseek_v3, deepseek_v4, deepseek_v41, kimi_linear

FAMILIES: dict[str, ModuleType] = {
    "kimi_linear": kimi_linear,
    "deepseek_v3": deepseek_v3,
    "deepseek_v4": deepseek_v4,
    "deepseek_v41": deepseek_v41,
}


def family_for(raw: dict) -> ModuleType | None:
    archs = raw.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs if isinstance(archs, list) else []
    model_type = raw.get("model_type")
    model_type = model_type if isinstance(model_type, str) else None
    for module in FAMILIES.values():
        if any(a in module.ARCHITECTURES for a in archs) or model_type in module.MODEL_TYPES:
            return module
    return None


def supported() -> str:
    return "; ".join(f"{name} ({', '.join(m.ARCHITECTURES + m.MODEL_TYPES)})" for name, m in FAMILIES.items())
