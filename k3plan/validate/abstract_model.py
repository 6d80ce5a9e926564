"""The planned model as abstract arrays: params, cache and step inputs as ShapeDtypeStructs.

Params follow the inventory's CHECKPOINT shapes in the stack's RUNTIME formats (an mxfp4 tensor is
two uint8 arrays, ``packed`` [.., out, in/2] and ``scale`` [.., out, in/32], dequantized inside the
forward), each with the NamedSharding of its resolved ShardSpec. Layers folded into the scan are
stacked per block position AFTER their specs are resolved, with ``None`` prepended to the
PartitionSpec: the stacked leading axis is never mistaken for a model dimension (docs/k3-facts.md §6).

The cache mirrors the budget's layout (k3plan.step.cache): per MLA layer [b, capacity, 576] in
the KV dtype (fp8_ds_mla: 656 raw bytes a token), capacity rounded up to whole blocks; per KDA layer
the conv state [b, 3, kernel-1, heads*head_dim] and the recurrent state [b, heads, d, d], split by
heads over tp when the heads divide; the sequence axis b split over dp when the stack says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from k3plan.errors import K3PlanError
from k3plan.models.inventory import Tensor
from k3plan.setup import Setup
from k3plan.step.cache import CacheLayout
from k3plan.step.structure import LayerPlan

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32, "fp32": jnp.float32, "fp8": jnp.float8_e4m3fn}
FP8_DS_MLA_BYTES = 656


def make_jax_mesh(setup: Setup, devices: list) -> jax.sharding.Mesh:
    """dp x tp over the target's devices, Auto axes (jax.make_mesh would default to Explicit)."""
    dp, tp = setup.mesh.axes["dp"], setup.mesh.axes["tp"]
    return jax.make_mesh((dp, tp), ("dp", "tp"), axis_types=(AxisType.Auto, AxisType.Auto), devices=devices)


def key_of(t: Tensor) -> str:
    """Layer-independent name: 'self_attn.q_proj.weight', 'block_sparse_moe.experts.{e}.w1.weight',
    globals without their 'language_model.' / 'model.' prefixes."""
    m = re.search(r"layers\.\d+\.(.*)$", t.name)
    if m and t.layer is not None:
        return m.group(1)
    return re.sub(r"^(language_model\.)?(model\.)?", "", t.name)


def runtime_parts(shape: tuple[int, ...], fmt: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Arrays a tensor is held as at runtime: name -> (shape, dtype)."""
    if fmt in DTYPES:
        return {"w": (shape, DTYPES[fmt])}
    if fmt == "mxfp4":
        return {
            "packed": ((*shape[:-1], shape[-1] // 2), jnp.uint8),
            "scale": ((*shape[:-1], shape[-1] // 32), jnp.uint8),
        }
    if fmt == "mxfp4_f32scale":  # torchtpu-vllm: the E8M0 scales widened to fp32 at load (models/formats.py)
        return {
            "packed": ((*shape[:-1], shape[-1] // 2), jnp.uint8),
            "scale": ((*shape[:-1], shape[-1] // 32), jnp.float32),
        }
    if fmt == "int4_g32":  # Kimi-K2.5/K2.6's experts: eight int4 an int32 word, a bf16 scale a 32 (models/formats.py)
        return {
            "packed": ((*shape[:-1], shape[-1] // 8), jnp.int32),
            "scale": ((*shape[:-1], shape[-1] // 32), jnp.bfloat16),
        }
    if fmt == "fp8_block":
        return {
            "w": (shape, jnp.float8_e4m3fn),
            "scale": ((*shape[:-2], math.ceil(shape[-2] / 128), math.ceil(shape[-1] / 128)), jnp.float32),
        }
    raise K3PlanError(f"validate: runtime format {fmt!r} has no JAX representation")


def pspec(partition: tuple) -> P:
    return P(*[None if p is None else (p[0] if len(p) == 1 else tuple(p)) for p in partition])


def nbytes_per_device(sds: jax.ShapeDtypeStruct) -> int:
    return math.prod(sds.sharding.shard_shape(sds.shape)) * jnp.dtype(sds.dtype).itemsize


@dataclass
class Abstract:
    """Pytrees of ShapeDtypeStructs plus the byte accounting the comparison needs."""

    mesh: Any
    lplan: LayerPlan
    params: dict
    cache: dict
    weight_notes: list[tuple[str, int]] = field(default_factory=list)  # (why, bytes) vs the budget per tensor
    formats: dict[str, str] = field(default_factory=dict)  # key -> runtime format

    def weights_bytes(self) -> int:
        return sum(nbytes_per_device(x) for x in jax.tree.leaves(self.params))

    def cache_bytes(self) -> int:
        return sum(nbytes_per_device(x) for x in jax.tree.leaves(self.cache))


def _tensor_arrays(t: Tensor, setup: Setup, mesh, notes: list, lead: int = 0) -> dict:
    fmt = setup.stack.runtime_format(t.role, t.fmt)
    partition = setup.plan.specs[t.name].partition
    out = {}
    for name, (shape, dtype) in runtime_parts(t.shape, fmt).items():
        part = list(partition)
        for d, p in enumerate(part):
            if p and shape[d] % setup.mesh.size(p):
                notes.append(
                    (f"{t.name} {name}: dim {d} ({shape[d]}) does not divide over {'x'.join(p)}; replicated here", 0)
                )
                part[d] = None
        full = ((lead,) if lead else ()) + tuple(shape)
        spec = pspec(((None,) if lead else ()) + tuple(part))
        out[name] = jax.ShapeDtypeStruct(full, dtype, sharding=NamedSharding(mesh, spec))
    return out


def _layer_tensors(setup: Setup) -> dict[int, dict[str, Tensor]]:
    by_layer: dict[int, dict[str, Tensor]] = {}
    for t in setup.model.inventory.text:
        if t.layer is not None:
            by_layer.setdefault(t.layer, {})[key_of(t)] = t
    return by_layer


def build_params(setup: Setup, mesh, lplan: LayerPlan) -> tuple[dict, list, dict]:
    notes: list = []
    formats = {}
    glob = {}
    for t in setup.model.inventory.text:
        formats[key_of(t)] = setup.stack.runtime_format(t.role, t.fmt)
        if t.layer is None:
            glob[key_of(t)] = _tensor_arrays(t, setup, mesh, notes)
    layers = _layer_tensors(setup)
    one = lambda i: {k: _tensor_arrays(t, setup, mesh, notes) for k, t in layers[i].items()}
    blocks = []
    for pos in range(len(lplan.block)):
        ids = lplan.block_layers(pos)
        first = layers[ids[0]]
        for i in ids[1:]:
            other = layers[i]
            for k, t in first.items():
                o = other.get(k)
                if o is None or o.shape != t.shape or setup.plan.specs[o.name] != setup.plan.specs[t.name]:
                    raise K3PlanError(
                        f"validate: layer {i} differs from layer {ids[0]} in {k}; cannot fold them into one scan "
                        f"(use --unroll)"
                    )
        blocks.append({k: _tensor_arrays(t, setup, mesh, notes, lead=len(ids)) for k, t in first.items()})
    params = {
        "globals": glob,
        "prefix": [one(i) for i in lplan.prefix],
        "blocks": blocks,
        "suffix": [one(i) for i in lplan.suffix],
    }
    return params, notes, formats


def _batch_axis(setup: Setup) -> Optional[str]:
    dp = setup.mesh.axes["dp"]
    return "dp" if dp > 1 and setup.stack.kv_cache.split_across_dp else None


def padded_batch(setup: Setup, batch: int) -> int:
    dp = setup.mesh.axes["dp"]
    return math.ceil(batch / dp) * dp if _batch_axis(setup) else batch


def _layer_cache(setup: Setup, mixer: str, b: int, capacity: int) -> dict[str, tuple[tuple[int, ...], Any, tuple]]:
    spec, stack, tp = setup.model.spec, setup.stack, setup.mesh.axes["tp"]
    bax = _batch_axis(setup)
    if mixer == "mla":
        kvd = stack.kv_cache.dtype
        width, dtype = (
            (FP8_DS_MLA_BYTES, jnp.uint8) if kvd == "fp8_ds_mla" else (spec.mla.cache_values_per_token, DTYPES[kvd])
        )
        lat = None if stack.kv_cache.replicate_across_tp or width % tp else "tp"
        return {"kv": ((b, capacity, width), dtype, (bax, None, lat))}
    kda = spec.kda
    assert kda is not None  # a "kda" mixer layer exists only in a spec with KDA dims
    hax = "tp" if stack.state.shard_by_heads and kda.heads % tp == 0 and tp > 1 else None
    return {
        "conv": ((b, 3, kda.conv_kernel - 1, kda.width), DTYPES[stack.state.conv_dtype], (bax, None, None, hax)),
        "rec": (
            (b, kda.heads, kda.head_dim, kda.head_dim),
            DTYPES[stack.state.recurrent_dtype],
            (bax, hax, None, None),
        ),
    }


def build_cache(setup: Setup, mesh, lplan: LayerPlan, *, batch: int, capacity: int) -> dict:
    mixers = setup.model.spec.mixers
    b = padded_batch(setup, batch)

    def sds(entry, lead=0):
        shape, dtype, part = entry
        shape = ((lead,) if lead else ()) + shape
        part = ((None,) if lead else ()) + part
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(*part)))

    one = lambda i: {k: sds(v) for k, v in _layer_cache(setup, mixers[i], b, capacity).items()}
    blocks = [
        {k: sds(v, lead=lplan.n_blocks) for k, v in _layer_cache(setup, m, b, capacity).items()} for m, _ in lplan.block
    ]
    return {"prefix": [one(i) for i in lplan.prefix], "blocks": blocks, "suffix": [one(i) for i in lplan.suffix]}


def capacity_tokens(layout: CacheLayout, context: int) -> int:
    """The cache holds whole blocks, as the budget's allocator does."""
    return math.ceil(context / layout.block_tokens) * layout.block_tokens


def build_inputs(setup: Setup, mesh, *, stage: str, batch: int, tokens: int) -> dict:
    bax = _batch_axis(setup)
    b = padded_batch(setup, batch)
    s = lambda shape, part: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=NamedSharding(mesh, P(*part)))
    if stage == "prefill":
        return {"tokens": s((b, tokens), (bax, None)), "start": s((), ())}
    return {"tokens": s((b,), (bax,)), "positions": s((b,), (bax,))}


def build(setup: Setup, devices: list, lplan: LayerPlan, *, stage: str, batch: int, tokens: int, capacity: int):
    mesh = make_jax_mesh(setup, devices)
    params, notes, formats = build_params(setup, mesh, lplan)
    cache = build_cache(setup, mesh, lplan, batch=batch, capacity=capacity)
    inputs = build_inputs(setup, mesh, stage=stage, batch=batch, tokens=tokens)
    return Abstract(mesh=mesh, lplan=lplan, params=params, cache=cache, weight_notes=notes, formats=formats), inputs


def inputs_bytes(inputs: dict) -> int:
    return sum(nbytes_per_device(x) for x in jax.tree.leaves(inputs))
