"""A stack's grouped-matmul row tiling and kernel curve applied to the step's expert tensors: the kernel rules
(gmm_v2's ``calculate_tiling``, its visits and buckets, the formats it dequantizes) are the torch_tpu plugin's,
in its folder (k3plan.engines.torchtpu_vllm.gmm, cited there); here a stack's ``experts.gmm_tile`` rule picks
them and a tensor's leaf name says which call (fused gate and up, or down) it is."""

from __future__ import annotations

from typing import Any, Callable

from k3plan.engines.torchtpu_vllm.gmm import (  # noqa: F401  # the kernel's names, read through here too
    BF16_SUBLANE_ROWS,
    CURVE_FORMATS,
    FORMATS,
    GMM_CURVE,
    GMM_V2_SOURCE,
    RECORD_CURVES,
    VMEM_BYTES,
    VMEM_SHARE,
    Tiles,
    capped,
    fused_rhs,
    gmm_curve_key,
    gmm_v2_tiles,
    group_rows,
    visit_ends,
    visit_mxu_rows,
)


def expert_rows_of(stack: Any, hardware: Any, spec: Any) -> Callable[..., Any] | None:
    """(rows a touched expert, its tensor, the step's routed rows in all) -> the MXU rows the stack's kernel
    computes for it, or None where the stack declares no row tiling (the rows as routed). ``hardware``: a
    HardwareSpec (its device kind picks the VMEM the tiling fits); ``spec``: the ModelSpec (the expert
    widths). A tensor whose runtime format the rule was not read for keeps its rows."""
    rule = getattr(getattr(stack, "experts", None), "gmm_tile", None)
    if rule is None:
        return None
    vmem = VMEM_BYTES.get(hardware.file.device_kind.value)
    moe = spec.moe
    from k3plan.step.names import leaf_name

    held: dict[tuple[bool, tuple[int, int]], Tiles] = {}

    def tiles(fused: bool, fmt: tuple[int, int]) -> Tiles:
        if (fused, fmt) not in held:
            k, n = (moe.expert_in, 2 * moe.expert_intermediate) if fused else (moe.expert_intermediate, moe.expert_in)
            t = gmm_v2_tiles(
                size_m=2**31,
                size_k=k,
                size_n=n,
                rhs_bits=fmt[0],
                quant_block=fmt[1],
                fused=fused,
                vmem_limit=int(vmem * VMEM_SHARE) if vmem else 2**62,
            )
            if vmem is None:  # no VMEM figure for this kind: the base tile, no buckets (the rows padded least)
                t = Tiles(tile_m=t.base, tile_k=t.tile_k, tile_n=t.tile_n, base=t.base)
            held[(fused, fmt)] = t
        return held[(fused, fmt)]

    def rows_of(rows, tensor, size_m) -> Any:
        fmt = FORMATS.get(stack.runtime_format(tensor.role, tensor.fmt)) if tensor is not None else (4, 32)
        if fmt is None:
            return rows
        fused = tensor is None or fused_rhs(leaf_name(tensor))
        return group_rows(rows, capped(tiles(fused, fmt), size_m))

    return rows_of


def expert_rows_of_setup(setup: Any) -> Callable[..., Any] | None:
    """``expert_rows_of`` for one Setup's stack, hardware and model."""
    return expert_rows_of(setup.stack, setup.hardware, setup.model.spec)


def kernel_curve_of(stack: Any) -> Callable[[Any], str | None] | None:
    """Tensor -> the efficiency curve of the kernel the stack runs a routed expert's matmul with (``gmm_curve_key``),
    or None: a stack whose ``experts.gmm_tile`` rule is gmm_v2 (its kernel measured by ``probe gmm``) and an expert
    tensor whose runtime format the kernel dequantizes (``CURVE_FORMATS``). None for any other stack."""
    rule = getattr(getattr(stack, "experts", None), "gmm_tile", None)
    if rule is None or getattr(rule, "rule", None) != "gmm_v2":
        return None
    from k3plan.step.names import leaf_name

    def curve_of(tensor: Any) -> str | None:
        fmt = CURVE_FORMATS.get(stack.runtime_format(tensor.role, tensor.fmt))
        return None if fmt is None else gmm_curve_key(fmt, fused=fused_rhs(leaf_name(tensor)))

    return curve_of


def kernel_curve_of_setup(setup: Any) -> Callable[[Any], str | None] | None:
    """``kernel_curve_of`` for one Setup's stack."""
    return kernel_curve_of(setup.stack)
