"""Which layers are folded into a scan, and truncation to the first N layers (jax-free).

A layer's signature is (mixer, mlp). The repeating block is derived from the model: the period p
and start s that cover the most layers with identical consecutive blocks; ties go to the block
that ends with the model's rarest mixer (K3: KDA, KDA, KDA, MLA — the MLA layers are every 4th),
then to the earliest start. Layers before the first block are the prefix (K3: layers 1-4, the
first of which has a dense MLP), those after the last are the remainder (K3: layer 93).
"""

from __future__ import annotations

import dataclasses

from k3plan.errors import K3PlanError
from k3plan.models.inventory import TensorInventory
from k3plan.setup import Setup
from k3plan.sharding.resolve import ShardingPlan
from k3plan.structs import replace


def check_layers(setup: Setup, layers: int) -> None:
    """--layers names a count of the model's decoder layers (checked before anything is compiled)."""
    spec = setup.model.spec
    if layers < 1 or layers > spec.num_layers:
        raise K3PlanError(
            f"--layers {layers}: expected 1..{spec.num_layers} ({spec.name} has {spec.num_layers} layers)"
        )


def truncate_setup(setup: Setup, layers: int) -> Setup:
    """The same setup with only the first ``layers`` decoder layers (globals kept): a scaled run."""
    check_layers(setup, layers)
    spec = setup.model.spec
    if layers == spec.num_layers:
        return setup
    new_spec = replace(spec, num_layers=layers, mixers=spec.mixers[:layers], mlps=spec.mlps[:layers])
    keep = tuple(t for t in setup.model.inventory.tensors if t.layer is None or t.layer < layers)
    inv = TensorInventory(tensors=keep)
    names = {t.name for t in keep}
    plan = ShardingPlan(
        mesh=setup.plan.mesh,
        specs={k: v for k, v in setup.plan.specs.items() if k in names},
        fallbacks=tuple(f for f in setup.plan.fallbacks if f.tensor in names),
        source=setup.plan.source,
    )
    model = replace(setup.model, spec=new_spec, inventory=inv)
    note = f"truncated to the first {layers} of {spec.num_layers} layers (--layers)"
    return dataclasses.replace(setup, model=model, plan=plan, notes=setup.notes + (note,))
