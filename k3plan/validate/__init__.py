"""The compiler as referee: an abstract JAX model of the planned configuration, AOT-compiled.

The same TensorInventory and ShardSpecs that ``fit`` uses become ``jax.ShapeDtypeStruct`` params
with ``NamedSharding`` (nothing is allocated); the prefill and decode steps are lowered and compiled
for fake CPU devices or, deviceless, for a real TPU topology; ``memory_analysis()`` and the HLO's
collectives are compared with the budget term by term.

jax is imported only inside this package, and only by the functions that need it: importing
``k3plan.validate`` (or ``k3plan.validate.targets``) does not import jax, because XLA_FLAGS must be
set before the first ``import jax``.
"""
