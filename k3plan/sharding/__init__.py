"""Sharding: mesh, a stack's logical-axis rules -> a ShardSpec per tensor, user ShardSpecs."""

from k3plan.sharding.mesh import Mesh, Parallel, make_mesh
from k3plan.sharding.resolve import Fallback, ShardingPlan, ShardSpec, resolve

__all__ = [
    "Mesh",
    "Parallel",
    "make_mesh",
    "Fallback",
    "ShardSpec",
    "ShardingPlan",
    "resolve",
]
