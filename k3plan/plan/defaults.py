"""The default topology of a machine: plan's space and weight columns filtered to the split asked for (so
the default and plan's rows cannot disagree), and a Setup built with it where no topology is given."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.engines.stack import Stack
from k3plan.errors import K3PlanError
from k3plan.hardware import HardwareSpec, Topology
from k3plan.models import Model
from k3plan.setup import Setup, default_split, make_setup, tp_must_divide


def make_default_setup(**options: Any) -> Setup:
    """``setup.make_setup`` with the default topology (``default_topology``) where ``topology`` is None."""
    return make_setup(**options, pick_topology=default_topology)


def default_topology(
    hw: HardwareSpec, model: Model, stack: Stack, tp: Optional[int], ep: Optional[int], dp: Optional[int]
) -> Topology:
    """The smallest standard topology whose per-device weights, with the stack's default split (or
    the split asked for) and its reserve, leave room on a device: the first of default_topologies
    (a quick screen; `fit` then gives the full verdict, and the CLI moves up the list while the
    workload does not fit: app.setup.fitting_setup)."""
    found = default_topologies(hw, model, stack, tp, ep, dp)
    if not found:
        raise K3PlanError(f"{hw.name}: no standard topology leaves room for {model.name}'s weights; pass --topology")
    return found[0]


def default_topologies(
    hw: HardwareSpec, model: Model, stack: Stack, tp: Optional[int], ep: Optional[int], dp: Optional[int]
) -> list[Topology]:
    """Every standard topology, smallest first, whose per-device weights with the stack's default
    split (or the split asked for) and its reserve leave room on a device: plan's space and weight
    columns (``plan.evaluate.weight_columns``) filtered to that split."""
    import numpy as np  # here, not at import: a fit with its topology given imports no numpy

    from k3plan.plan.evaluate import weight_columns
    from k3plan.plan.space import build_space

    space = build_space(
        hardware=[hw],
        stacks=[stack],
        kv_dtypes=[None],
        chunks=[1],
        max_chips=hw.max_chips,
        stacks_given=False,
        any_platform=True,
    )
    weights, _ = weight_columns(space=space, model=model)
    c = space.cols
    for flag, n in (("--tp", tp), ("--ep", ep), ("--dp", dp)):
        if n and not any(t.devices % n == 0 for t in space.topologies):
            sizes = ", ".join(str(t.devices) for t in space.topologies)
            raise K3PlanError(
                f"{flag} {n} divides none of {hw.name}'s standard topologies (devices: {sizes}); "
                f"expected a divisor of one of them, or pass --topology"
            )
    found = []
    for i, topo in enumerate(space.topologies):
        if topo.devices * hw.usable_bytes_per_device < model.inventory.checkpoint_bytes:
            continue
        t, d = default_split(stack, topo.devices, tp, dp, tp_must_divide(model, stack))
        if t and topo.devices % t or d and topo.devices % d:
            continue
        d = d or (topo.devices // t if t else 1)
        t = t or topo.devices // d
        e = ep if ep is not None else (stack.dp_experts.ep(tp=t, dp=d) or topo.devices)
        hit = np.flatnonzero((c.topo == i) & (c.tp == t) & (c.dp == d) & (c.ep == e))
        # no workload yet: the reserve at the engine's own default chunk for this GPU (chunk None)
        reserve = stack.reserve_fraction(
            usable_bytes=hw.usable_bytes_per_device, tp=t, pp=1, chunk=None, vendor=hw.vendor, dp=d
        )
        if hit.size and weights.weights_bytes[hit[0]] < hw.usable_bytes_per_device * (1 - reserve):
            found.append(topo)
    return found
