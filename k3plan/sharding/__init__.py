"""Sharding: mesh, logical-axis rules -> a ShardSpec per tensor, stacks, user ShardSpecs."""

from k3plan.sharding.mesh import Mesh, Parallel, make_mesh
from k3plan.sharding.resolve import Fallback, ShardingPlan, ShardSpec, resolve
from k3plan.sharding.stack import Stack, list_stacks, load_stack

__all__ = [
    "Mesh",
    "Parallel",
    "make_mesh",
    "Fallback",
    "ShardSpec",
    "ShardingPlan",
    "resolve",
    "Stack",
    "list_stacks",
    "load_stack",
]
