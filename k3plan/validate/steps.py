"""Prefill and decode steps: embed, the layers (prefix, a scan over the repeating block, the
remainder), final norm, lm_head on the last token, greedy next token.

In the scan the stacked cache is the carry and each block updates its slice in place
(dynamic_update_index), so the donated cache can alias the output without a copy.
prefill(params, cache, tokens [b, N], start []) -> (next [b], cache): one chunk of N tokens per
sequence slot, written at positions start..start+N-1. decode(params, cache, tokens [b],
positions [b]) -> (next [b], cache): one token per sequence at its position.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from k3plan.errors import K3PlanError
from k3plan.setup import Setup
from k3plan.step.structure import LayerPlan
from k3plan.validate.abstract_model import Abstract, _batch_axis
from k3plan.validate.experts import form_for
from k3plan.validate.layers import Ctx, W, decoder_layer, lin, rmsnorm

_WIRE = {"fp8": jnp.float8_e4m3fn, "bf16": jnp.bfloat16, "f32": jnp.float32}  # collectives.dispatch_dtype


def make_ctx(setup: Setup, mesh) -> Ctx:
    act = {"bf16": jnp.bfloat16, "f32": jnp.float32}[setup.stack.activation_dtype]
    expert = next((t for t in setup.model.inventory.text if t.role == "expert"), None)
    axes: tuple[str, ...] = ()
    if expert is not None:
        part = setup.plan.specs[expert.name].partition
        if any(p for p in part[1:]):
            raise K3PlanError(
                f"validate: routed experts must be split on the expert axis only; the plan has "
                f"{[list(p) if p else None for p in part]} for {expert.name}"
            )
        axes = tuple(part[0] or ())
    if setup.stack.kv_cache.dtype == "fp8_ds_mla":
        mla = setup.model.spec.mla
        if (mla.kv_lora_rank, mla.qk_rope_head_dim) != (512, 64):
            raise K3PlanError("--kv-dtype fp8_ds_mla is vLLM's layout for kv_lora 512 + rope 64; this model differs")
    up = next((t for t in setup.model.inventory.text if t.name.endswith("routed_expert_up_proj.weight")), None)
    latent_in = tuple(setup.plan.specs[up.name].partition[1] or ()) if up is not None else ()
    return Ctx(
        spec=setup.model.spec,
        act=act,
        mesh=mesh,
        batch_axis=_batch_axis(setup),
        kv_dtype=setup.stack.kv_cache.dtype,
        expert_axes=axes,
        latent_in_axes=latent_in,
        experts_form=form_for(setup.stack.name),
        expert_dispatch=setup.stack.collectives.experts,
        dispatch_dtype=_WIRE.get(setup.stack.collectives.dispatch_dtype),
        logits_all_gather=setup.stack.logits.gather == "all_gather",
        ragged_dispatch=mesh.devices.flat[0].platform == "tpu",
    )


def _run_layers(params, cache, x, start, *, ctx: Ctx, lplan: LayerPlan, decode: bool):
    spec = ctx.spec
    kw = dict(ctx=ctx, decode=decode, start=start)
    new: dict[str, list] = {"prefix": [], "blocks": [], "suffix": []}
    for j, i in enumerate(lplan.prefix):
        x, c = decoder_layer(
            params["prefix"][j], x, cache["prefix"][j], mixer=spec.mixers[i], mlp_kind=spec.mlps[i], **kw
        )
        new["prefix"].append(c)
    if lplan.n_blocks:

        def body(carry, xs):
            x, stack = carry
            pblk, idx = xs
            stack = list(stack)
            for pos, (mixer, mlp_kind) in enumerate(lplan.block):
                c = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, idx, 0, keepdims=False), stack[pos])
                x, c = decoder_layer(pblk[pos], x, c, mixer=mixer, mlp_kind=mlp_kind, **kw)
                stack[pos] = jax.tree.map(lambda a, u: jax.lax.dynamic_update_index_in_dim(a, u, idx, 0), stack[pos], c)
            return (x, stack), None

        (x, blocks), _ = jax.lax.scan(
            body, (x, list(cache["blocks"])), (params["blocks"], jnp.arange(lplan.n_blocks, dtype=jnp.int32))
        )
        new["blocks"] = blocks
    for j, i in enumerate(lplan.suffix):
        x, c = decoder_layer(
            params["suffix"][j], x, cache["suffix"][j], mixer=spec.mixers[i], mlp_kind=spec.mlps[i], **kw
        )
        new["suffix"].append(c)
    return x, new


def _head(params, x_last, ctx: Ctx):
    g = params["globals"]
    h = rmsnorm(x_last, W(g, "norm.weight", jnp.float32))
    logits = lin(h, W(g, "lm_head.weight", ctx.act)).astype(jnp.float32)
    if ctx.logits_all_gather:  # the engine's LogitsProcessor gathers the vocabulary split, then samples
        logits = ctx.constrain(logits, ctx.batch_axis, None)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def _embed(params, tokens, ctx: Ctx):
    return jnp.take(W(params["globals"], "embed_tokens.weight", ctx.act), tokens, axis=0)


def make_step(stage: str, *, ctx: Ctx, lplan: LayerPlan) -> Callable:
    if stage == "prefill":

        def prefill(params, cache, tokens, start):
            b = tokens.shape[0]
            x = ctx.residual(_embed(params, tokens, ctx))
            x, cache = _run_layers(
                params, cache, x, jnp.full((b,), start, jnp.int32), ctx=ctx, lplan=lplan, decode=False
            )
            return _head(params, x[:, -1], ctx), cache

        return prefill

    def decode(params, cache, tokens, positions):
        x = ctx.residual(_embed(params, tokens[:, None], ctx))
        x, cache = _run_layers(params, cache, x, positions, ctx=ctx, lplan=lplan, decode=True)
        return _head(params, x[:, 0], ctx), cache

    return decode


def jitted(stage: str, setup: Setup, ab: Abstract, inputs: dict):
    """jit with the abstract shardings, the cache donated and every argument kept."""
    ctx = make_ctx(setup, ab.mesh)
    fn = make_step(stage, ctx=ctx, lplan=ab.lplan)
    shard = lambda t: jax.tree.map(lambda s: s.sharding, t)
    in_sh = (shard(ab.params), shard(ab.cache), *(shard(inputs[k]) for k in inputs))
    out_sh = (NamedSharding(ab.mesh, P(ctx.batch_axis)), shard(ab.cache))
    jf = jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=(1,), keep_unused=True)
    return jf, (ab.params, ab.cache, *(inputs[k] for k in inputs))
