"""Where an engine holds a 4-bit checkpoint as it is stored: one rule for ``fit --serve``, plain ``fit`` and ``plan``
(a figure priced for a GPU whose load path k3plan has not read would be another checkpoint's bytes).

An FP4 storage format (models/formats.py) is priced as the checkpoint's bytes only on the hardware whose kernels
load it as stored, under an engine whose held bytes for it were read (``Engine.fp4_storage_held``):

- ``nvfp4`` (NVIDIA ModelOpt NVFP4: models/bundled/deepseek-r1-0528-fp4-v2): NVIDIA GPUs with FP4 tensor cores.
  vLLM 0.31.0 (ModelOptNvFp4FusedMoE.process_weights_after_loading: replace_parameter swaps each loaded expert
  tensor for its kernel-format one, w13's two global scales kept as one) and SGLang 0.5.15
  (ModelOptNvFp4FusedMoEMethod under flashinfer_trtllm: the swizzled block scales alias the loaded ones;
  ModelOptFp4LinearMethod pads N to 128 and K / 16 to 4, which that checkpoint's Linears are at TP 1-8) hold the
  checkpoint's bytes there. Elsewhere both run Marlin W4A16 paths (SGLang's overrides pick marlin on SM80-SM90)
  whose holding k3plan has not read.
- ``quark_mxfp4`` (AMD Quark OCP MXFP4: models/bundled/deepseek-r1-0528-mxfp4): AMD GPUs with FP4 matrix cores
  (gfx950: MI350X / MI355X, the checkpoint cards' 'Supported Hardware Microarchitecture: AMD MI350/MI355'). SGLang
  0.5.12 / 0.5.15 keep the loaded bytes there (QuarkW4A4MXFP4: uint8 weight and E8M0 scale as loaded;
  QuarkW4A4MXFp4MoE.process_weights_after_loading: e8m0_shuffle and, on gfx95, shuffle_weight, each the same
  shape). On gfx942 (MI300X / MI325X, no FP4 units) the weight shuffle is skipped and that path was not read; on
  NVIDIA the scheme's aiter kernels are not imported; what vLLM 0.31.0's Quark OCP MX methods (QuarkOCP_MX,
  QuarkOCP_MX_MoEMethod) hold after loading was not read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from k3plan.engines.engine import Engine
from k3plan.hardware import HardwareSpec
from k3plan.models import Model


@dataclass(frozen=True)
class Fp4Path:
    """An FP4 storage format's load path: the GPU ``vendor`` whose FP4 units run it as stored, the checkpoint's
    kind in words, and the hardware to price it on instead."""

    vendor: str
    checkpoint: str
    elsewhere: str
    price_on: str


FP4_PATHS = {
    "nvfp4": Fp4Path(
        vendor="nvidia",
        checkpoint="a ModelOpt NVFP4 checkpoint",
        elsewhere="runs another path of the engine's (Marlin W4A16 on NVIDIA)",
        price_on="an NVIDIA GPU with FP4 (nvidia-b200, nvidia-b300, nvidia-gb200-nvl72, nvidia-gb300-nvl72)",
    ),
    "quark_mxfp4": Fp4Path(
        vendor="amd",
        checkpoint="a Quark OCP MXFP4 checkpoint",
        elsewhere="runs a path of the engine's (the checkpoint's card supports AMD MI350 / MI355 only)",
        price_on="amd-mi355x",
    ),
}


def fp4_storages(formats: Iterable[str]) -> tuple[str, ...]:
    """The FP4 storage formats (``FP4_PATHS``) among a checkpoint's tensor formats, in a stable order."""
    have = set(formats)
    return tuple(f for f in FP4_PATHS if f in have)


def fp4_refusal(storages: Iterable[str], *, hardware: HardwareSpec, engine: Engine) -> str | None:
    """Why ``engine`` on ``hardware`` is not priced for a checkpoint holding ``storages`` (``fp4_storages``), in one
    clause; None where every one loads as stored."""
    has_fp4 = hardware.flops_table().get("fp4") is not None
    for storage in storages:
        path = FP4_PATHS[storage]
        if hardware.vendor.lower() != path.vendor or not has_fp4:
            units = "AMD" if path.vendor == "amd" else "NVIDIA"
            return (
                f"{path.checkpoint} on {hardware.name} (no {units} FP4 units) {path.elsewhere}, whose held bytes "
                f"k3plan has not read; price it on {path.price_on}"
            )
        if storage not in engine.fp4_storage_held:
            return (
                f"{path.checkpoint} under {engine.name}: what the engine holds after loading it was not read; "
                f"k3plan prices it under {', '.join(_holders(storage))}"
            )
    return None


def model_fp4_refusal(model: Model, *, hardware: HardwareSpec, engine: Engine) -> str | None:
    """``fp4_refusal`` for a loaded model: the FP4 storages its inventory holds (plain fit and plan, which have the
    model; fit --serve reads the storage from the checkpoint's config)."""
    return fp4_refusal(fp4_storages(t.fmt for t in model.inventory.tensors), hardware=hardware, engine=engine)


def _holders(storage: str) -> list[str]:
    from k3plan.engines.registry import engines

    return [e.name for e in engines() if storage in e.fp4_storage_held] or ["no engine"]
