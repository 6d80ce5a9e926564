"""The layers of a kimi_linear model in plain JAX, written against abstract params.

Structurally faithful where memory and collectives are decided; simplified where they are not:
- KDA: q/k/v projections, depthwise causal short conv (state: the last kernel-1 inputs), SiLU,
  L2-normalised q/k, per-channel log decay -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias), beta,
  gated delta rule with an fp32 state: chunked (WY form, chunks of 64) for prefill, one step for
  decode; per-head RMSNorm, output gate (full rank or low rank), o_proj.
- MLA, absorbed: the cache holds kv_lora + rope values a token (576 for K3); q_nope is absorbed
  into kv_b's K half, attention runs over the latent, kv_b's V half maps back. NoPE: the rope dims
  are cached but not rotated (K3 sets mla_use_nope); output gate when the config has one.
- MoE: sigmoid router + e_score_correction_bias top-k (noaux_tc, one group), renormalised weights,
  shared experts, LatentMoE down/norm/up around the experts; local experts under ``shard_map``
  (group_sort + three ``jax.lax.ragged_dot`` + scatter-add, dequantized there as the stack's
  formulation says: k3plan.validate.experts) and one psum over the expert axes; an all-to-all stack
  dispatches and combines instead (``_moe_a2a``), and vLLM's default EP backend with DP > 1 all-gathers
  the routed rows over DP, reduce-scatters the outputs and all-reduces over TP (``_moe_agrs``).
- Simplified: AttnRes is a per-layer sigmoid gate from the res_norm/res_proj weights on each
  residual branch (the real block-wise attention over earlier outputs is not modelled); SiTU is
  replaced by SiLU; gate_lower_bound is ignored. None of these changes a weight or cache byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from k3plan.models.spec import ModelSpec
from k3plan.validate.dispatch import a2a_experts
from k3plan.validate.experts import local_experts
from k3plan.validate.quant import dequant, ds_mla_decode, ds_mla_encode

KDA_CHUNK = 64


@dataclass(frozen=True)
class Ctx:
    spec: ModelSpec
    act: Any  # activation dtype
    mesh: Any
    batch_axis: Optional[str]
    kv_dtype: str  # stack name: bf16 | fp8 | fp8_ds_mla | fp32
    expert_axes: tuple[str, ...]  # mesh axes the routed experts are split over
    latent_in_axes: tuple[str, ...] = ()  # how routed_expert_up_proj's input (latent) dim is split
    experts_form: str = "layer"  # where the experts are dequantized: k3plan.validate.experts.FORMS
    expert_dispatch: str = "all_reduce"  # collectives.experts: all_reduce | all_to_all | allgather_reducescatter
    dispatch_dtype: Any = None  # all_to_all: the payload dtype (the stack's collectives.dispatch_dtype)
    logits_all_gather: bool = False  # the stack's logits.gather: all_gather (else XLA's partitioned argmax)
    ragged_dispatch: bool = False  # all_to_all: ragged_all_to_all (TPU targets; XLA:CPU cannot compile it)

    def constrain(self, x, *spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P(*spec)))

    def residual(self, x):
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P(self.batch_axis, None, None)))


def W(p: dict, key: str, dtype) -> jax.Array:
    return dequant(p[key], dtype)


def lin(x, w):
    """x @ w.T for a checkpoint [out, in] matrix."""
    return jnp.einsum("...i,oi->...o", x, w.astype(x.dtype))


def rmsnorm(x, w, eps: float = 1e-5):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


def l2norm(x, eps: float = 1e-6):
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


# --- KDA -------------------------------------------------------------------------------------


def short_conv(x3, state, w3):
    """x3 [b,3,N,W], state [b,3,K-1,W], w3 [3,W,K] -> (silu(conv) [b,3,N,W], new state)."""
    k = w3.shape[-1]
    n = x3.shape[2]
    xx = jnp.concatenate([state.astype(x3.dtype), x3], axis=2)
    out = sum(xx[:, :, j : j + n, :] * w3[None, :, None, :, j].astype(x3.dtype) for j in range(k))
    return jax.nn.silu(out), xx[:, :, n:, :] if k > 1 else state


def gdr_step(q, k, v, g, beta, S):
    """One decode step. q,k,v,g [b,H,D]; beta [b,H]; S [b,H,Dk,Dv] fp32."""
    S = jnp.exp(g)[..., None] * S
    u = beta[..., None] * (v - jnp.einsum("bhkv,bhk->bhv", S, k))
    S = S + jnp.einsum("bhk,bhv->bhkv", k, u)
    return jnp.einsum("bhkv,bhk->bhv", S, q), S


def gdr_chunked(q, k, v, g, beta, S, chunk: int = KDA_CHUNK):
    """Chunked gated delta rule with per-channel decay (WY form). q,k,v,g [b,N,H,D] fp32,
    beta [b,N,H], S [b,H,Dk,Dv]. N must be a multiple of ``chunk``. Returns (o [b,N,H,Dv], S).
    Within a chunk, with G the cumulative log decay: u = T (v - kd S0), T = (I + tril(kd kinv^T, -1)
    diag(beta))^-1; o = qd S0 + tril(qd kinv^T) (beta u); S' = exp(G_L) S0 + (k exp(G_L - G))^T (beta u)."""
    b, n, h, d = q.shape
    c = n // chunk
    r = lambda t: t.reshape(b, c, chunk, h, t.shape[-1]).transpose(1, 0, 3, 2, 4)  # [c,b,H,L,D]
    q, k, v, g = r(q), r(k), r(v), r(g)
    beta = beta.reshape(b, c, chunk, h).transpose(1, 0, 3, 2)  # [c,b,H,L]
    G = jnp.cumsum(g, axis=3)
    kd, kinv, qd = k * jnp.exp(G), k * jnp.exp(-G), q * jnp.exp(G)
    eye = jnp.eye(chunk, dtype=q.dtype)
    strict = jnp.tril(jnp.ones((chunk, chunk), bool), -1)
    M = jnp.where(strict, jnp.einsum("...id,...jd->...ij", kd, kinv), 0.0)
    A = eye + M * beta[..., None, :]
    T = jax.scipy.linalg.solve_triangular(A, jnp.broadcast_to(eye, A.shape), lower=True, unit_diagonal=True)
    Tv, Tk = T @ v, T @ kd
    Aqk = jnp.where(strict | jnp.eye(chunk, dtype=bool), jnp.einsum("...id,...jd->...ij", qd, kinv), 0.0)
    gL = G[..., -1, :]  # [c,b,H,D]
    kdec = k * jnp.exp(gL[..., None, :] - G)

    def body(S, xs):
        tv, tk, qc, aqk, kc, bc, gl = xs
        bu = bc[..., None] * (tv - tk @ S)
        o = qc @ S + aqk @ bu
        S = jnp.exp(gl)[..., None] * S + jnp.swapaxes(kc, -1, -2) @ bu
        return S, o

    S, o = jax.lax.scan(body, S, (Tv, Tk, qd, Aqk, kdec, beta, gL))
    return o.transpose(1, 0, 3, 2, 4).reshape(b, n, h, -1), S


def kda_mixer(p: dict, x, cache: dict, ctx: Ctx, *, decode: bool):
    kda, act = ctx.spec.kda, ctx.act
    assert kda is not None  # a "kda" mixer layer exists only in a spec with KDA dims
    H, D = kda.heads, kda.head_dim
    b, n, _ = x.shape
    A = "self_attn."
    x3 = jnp.stack([lin(x, W(p, f"{A}{s}_proj.weight", act)) for s in "qkv"], axis=1)
    w3 = jnp.stack([W(p, f"{A}{s}_conv1d.weight", jnp.float32).reshape(kda.width, -1) for s in "qkv"])
    y3, conv = short_conv(x3, cache["conv"], w3)
    q, k, v = (y3[:, i].astype(jnp.float32).reshape(b, n, H, D) for i in range(3))
    q, k = l2norm(q) / math.sqrt(D), l2norm(k)
    f = lin(lin(x, W(p, f"{A}f_a_proj.weight", act)), W(p, f"{A}f_b_proj.weight", act)).astype(jnp.float32)
    # replicated: a slice of the per-head decays propagated back the heads' split costs XLA collective-permutes
    a_log = ctx.constrain(W(p, f"{A}A_log", jnp.float32).reshape(-1)[:H], None)
    dt_bias = W(p, f"{A}dt_bias", jnp.float32)
    g = -jnp.exp(a_log)[:, None] * jax.nn.softplus((f + dt_bias).reshape(b, n, H, D))
    beta = jax.nn.sigmoid(lin(x, W(p, f"{A}b_proj.weight", act)).astype(jnp.float32))
    S = cache["rec"].astype(jnp.float32)
    if decode:
        o, S = gdr_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], S)
        o = o[:, None]
    else:
        pad = -n % KDA_CHUNK
        z = lambda t: jnp.pad(t, [(0, 0), (0, pad)] + [(0, 0)] * (t.ndim - 2))
        o, S = gdr_chunked(z(q), z(k), z(v), z(g), z(beta), S)
        o = o[:, :n]
    o = rmsnorm(o.astype(act), W(p, f"{A}o_norm.weight", jnp.float32)).reshape(b, n, H * D)
    if f"{A}g_proj.weight" in p:
        gate = lin(x, W(p, f"{A}g_proj.weight", act))
    else:
        gate = lin(lin(x, W(p, f"{A}g_a_proj.weight", act)), W(p, f"{A}g_b_proj.weight", act))
    out = lin(o * jax.nn.sigmoid(gate), W(p, f"{A}o_proj.weight", act))
    new = {"conv": conv.astype(cache["conv"].dtype), "rec": S.astype(cache["rec"].dtype)}
    return out, new


# --- MLA (absorbed) --------------------------------------------------------------------------


def _encode(entry, ctx: Ctx, dtype):
    if ctx.kv_dtype == "fp8_ds_mla":
        return ds_mla_encode(entry, ctx.spec.mla.kv_lora_rank)
    return entry.astype(dtype)


def _decode_cache(kv, ctx: Ctx):
    mla = ctx.spec.mla
    if ctx.kv_dtype == "fp8_ds_mla":
        return ds_mla_decode(kv, mla.kv_lora_rank, mla.qk_rope_head_dim, ctx.act)
    return kv.astype(ctx.act)


def mla_mixer(p: dict, x, cache: dict, ctx: Ctx, *, start):
    """start [b]: position of x's first token in each sequence."""
    mla, act = ctx.spec.mla, ctx.act
    H, R, nope, rope, vd = mla.heads, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
    b, n, _ = x.shape
    A = "self_attn."
    if mla.q_lora_rank:
        cq = rmsnorm(lin(x, W(p, f"{A}q_a_proj.weight", act)), W(p, f"{A}q_a_layernorm.weight", jnp.float32))
        q = lin(cq, W(p, f"{A}q_b_proj.weight", act))
    else:
        q = lin(x, W(p, f"{A}q_proj.weight", act))
    q = q.reshape(b, n, H, nope + rope)
    qn, qr = q[..., :nope], q[..., nope:]
    kva = lin(x, W(p, f"{A}kv_a_proj_with_mqa.weight", act))
    entry = jnp.concatenate([rmsnorm(kva[..., :R], W(p, f"{A}kv_a_layernorm.weight", jnp.float32)), kva[..., R:]], -1)
    kv = cache["kv"]
    kv = jax.vmap(lambda c, e, s: jax.lax.dynamic_update_slice(c, e, (s, 0)))(kv, _encode(entry, ctx, kv.dtype), start)
    full = _decode_cache(kv, ctx)
    ck, ckr = full[..., :R], full[..., R:]
    wkv = W(p, f"{A}kv_b_proj.weight", act).reshape(H, nope + vd, R)
    ql = jnp.einsum("bnhd,hdc->bnhc", qn, wkv[:, :nope])
    s = (
        jnp.einsum("bnhc,btc->bhnt", ql, ck, preferred_element_type=jnp.float32)
        + jnp.einsum("bnhr,btr->bhnt", qr, ckr, preferred_element_type=jnp.float32)
    ) / math.sqrt(nope + rope)
    qpos = start[:, None] + jnp.arange(n)[None, :]
    mask = jnp.arange(kv.shape[1])[None, None, :] <= qpos[:, :, None]
    s = jnp.where(mask[:, None], s, -jnp.inf)
    pr = jax.nn.softmax(s, axis=-1).astype(act)
    ol = jnp.einsum("bhnt,btc->bnhc", pr, ck)
    o = jnp.einsum("bnhc,hvc->bnhv", ol, wkv[:, nope:]).reshape(b, n, H * vd)
    if f"{A}g_proj.weight" in p:
        o = o * jax.nn.sigmoid(lin(x, W(p, f"{A}g_proj.weight", act)))
    return lin(o, W(p, f"{A}o_proj.weight", act)), {"kv": kv}


# --- MLPs ------------------------------------------------------------------------------------


def mlp(p: dict, x, prefix: str, act):
    g = lin(x, W(p, f"{prefix}gate_proj.weight", act))
    u = lin(x, W(p, f"{prefix}up_proj.weight", act))
    return lin(jax.nn.silu(g) * u, W(p, f"{prefix}down_proj.weight", act))


def moe(p: dict, x, ctx: Ctx):
    spec, act = ctx.spec, ctx.act
    m = spec.moe
    M, proj = moe_names(p)
    b, n, hdim = x.shape
    xt = x.reshape(b * n, hdim)
    logits = lin(xt.astype(jnp.float32), W(p, f"{M}gate.weight", jnp.float32))
    scores = jax.nn.sigmoid(logits)
    bias = W(p, f"{M}gate.e_score_correction_bias", jnp.float32)
    z = xt
    if m.latent:
        z = lin(xt, W(p, f"{M}routed_expert_down_proj.weight", act))
        if f"{M}routed_expert_norm.weight" in p:
            z = rmsnorm(z, W(p, f"{M}routed_expert_norm.weight", jnp.float32))
    ex = [p[f"{M}experts.{{e}}.{w}.weight"] for w in proj]  # gate, down, up
    espec = P(ctx.expert_axes or None, None, None)
    if ctx.expert_dispatch == "all_to_all" and ctx.expert_axes:
        y = _moe_a2a(z, scores, bias, ex, espec, ctx)
    elif ctx.expert_dispatch == "allgather_reducescatter" and _agrs_axis(ctx):
        y = _moe_agrs(z, scores, bias, ex, espec, ctx)
    else:
        ids, wts = route(scores, bias, m.top_k)
        y = _moe_all_reduce(z, ids, wts.astype(act), ex, espec, ctx)
    if m.latent:
        if ctx.latent_in_axes:  # a free local slice of the replicated sum, so up_proj runs row-parallel
            y = ctx.constrain(y, None, ctx.latent_in_axes)  # instead of all-gathering the weight
        y = lin(y, W(p, f"{M}routed_expert_up_proj.weight", act))
    if f"{M}shared_experts.gate_proj.weight" in p:
        y = y + mlp(p, xt, f"{M}shared_experts.", act)
    return y.reshape(b, n, hdim)


def moe_names(p: dict) -> tuple[str, tuple[str, str, str]]:
    """The MoE block's prefix and its experts' gate, down and up projections, as the family's checkpoint
    names them: kimi_linear 'block_sparse_moe.experts.{e}.w1/w2/w3' (k3plan.models.families.kimi_linear),
    deepseek_v3 'mlp.experts.{e}.gate_proj/down_proj/up_proj' (k3plan.models.families.deepseek_v3)."""
    if "mlp.gate.weight" in p:
        return "mlp.", ("gate_proj", "down_proj", "up_proj")
    return "block_sparse_moe.", ("w1", "w2", "w3")


def route(scores, bias, k: int):
    """noaux_tc top-k on the biased scores, weights from the unbiased ones renormalised -> (ids, wts)."""
    _, ids = jax.lax.top_k(scores + bias, k)
    wts = jnp.take_along_axis(scores, ids, axis=-1)
    return ids, wts / (jnp.sum(wts, axis=-1, keepdims=True) + 1e-20)


def _moe_all_reduce(z, ids, wts, ex, espec, ctx: Ctx):
    """Every device's local experts over all tokens, summed with one psum over the expert axes (vllm-tpu)."""
    act = ctx.act
    fn = jax.shard_map(
        lambda z_, i_, w_, a, b_, c: local_experts(
            z_, i_, w_, a, b_, c, axes=ctx.expert_axes, act=act, form=ctx.experts_form
        ),
        mesh=ctx.mesh,
        in_specs=(P(), P(), P(), *({k: espec for k in e} for e in ex)),
        out_specs=P(),
        check_vma=False,
    )
    return fn(z, ids, wts, *ex)


def _agrs_axis(ctx: Ctx) -> str | None:
    """The DP axis vLLM's all-gather / reduce-scatter backend runs over: the rows split over it and the
    experts split over it too (EP spans the DP groups); None: DP 1 or no EP over DP, where the experts'
    sum is the TP all-reduce alone (use_all2all_kernels needs DP > 1)."""
    ax = ctx.batch_axis
    return ax if ax is not None and ax in ctx.expert_axes and ctx.mesh.shape[ax] > 1 else None


def _as_bytes(a):
    """[rows, ...] of any dtype -> [rows, bytes a row] uint8 (a bitcast: the same bytes on the wire)."""
    b = jax.lax.bitcast_convert_type(a, jnp.uint8)
    return b.reshape(a.shape[0], -1)


def _from_bytes(b, dtype, shape: tuple[int, ...]):
    size = jnp.dtype(dtype).itemsize
    b = b.reshape(b.shape[0], *shape, size) if size > 1 else b.reshape(b.shape[0], *shape)
    return jax.lax.bitcast_convert_type(b, dtype)


def _moe_agrs(z, scores, bias, ex, espec, ctx: Ctx):
    """vLLM's default EP backend (AgRsAll2AllManager, ``--all2all-backend allgather_reducescatter``): each
    DP rank routes its own rows (top-k inside the shard_map: XLA does not split a top-k over its rows, it
    would all-gather the scores), all-gathers them over the DP group with their top-k weights (f32) and ids
    (int32) -- one buffer, one call, as the op list counts it (k3plan.step.ops.moe_ops) --, runs its local
    experts over every rank's rows, reduce-scatters the partial outputs back to each rank's rows, and the
    TP group all-reduces them (KimiMoE.forward's maybe_all_reduce_tensor_model_parallel)."""
    act, dp_ax = ctx.act, _agrs_axis(ctx)
    assert dp_ax is not None
    n = ctx.mesh.shape[dp_ax]
    pad = -z.shape[0] % n
    real = jnp.arange(z.shape[0] + pad) < z.shape[0]
    if pad:
        z, scores = (jnp.pad(a, ((0, pad), (0, 0))) for a in (z, scores))
    k, width = ctx.spec.moe.top_k, z.shape[1]
    tp_axes = tuple(a for a in ctx.expert_axes if a != dp_ax and ctx.mesh.shape[a] > 1)  # TP 1: no all-reduce

    def local(z_, s_, r_, b_, w1, w2, w3):
        i_, w_ = route(s_, b_, k)
        w_ = jnp.where(r_[:, None], w_, 0.0).astype(jnp.float32)  # padded rows: weight 0
        packed = jnp.concatenate([_as_bytes(z_), _as_bytes(w_), _as_bytes(i_)], axis=1)
        g = jax.lax.all_gather(packed, dp_ax, axis=0, tiled=True)  # dispatch: every DP rank's rows
        zb = width * jnp.dtype(z_.dtype).itemsize
        zg = _from_bytes(g[:, :zb], z_.dtype, (width,))
        wg = _from_bytes(g[:, zb : zb + 4 * k], jnp.float32, (k,))
        ig = _from_bytes(g[:, zb + 4 * k :], jnp.int32, (k,))
        out = local_experts(
            zg, ig, wg.astype(act), w1, w2, w3, axes=ctx.expert_axes, act=act, form=ctx.experts_form, reduce=False
        )
        out = jax.lax.psum_scatter(out, dp_ax, scatter_dimension=0, tiled=True)  # combine: back to its rows
        return jax.lax.psum(out, tp_axes) if tp_axes else out

    rows = P(dp_ax, None)
    fn = jax.shard_map(
        local,
        mesh=ctx.mesh,
        in_specs=(rows, rows, P(dp_ax), P(), *({k_: espec for k_ in e} for e in ex)),
        out_specs=rows,
        check_vma=False,
    )
    y = fn(z, scores, real, bias, *ex)
    return y[: y.shape[0] - pad] if pad else y


def _moe_a2a(z, scores, bias, ex, espec, ctx: Ctx):
    """The tokens split over the expert axes, each device routing its own rows (top-k inside the
    shard_map, as each engine rank routes its tokens: XLA does not split a top-k over its batch rows),
    dispatched to their experts' devices and combined back with two all-to-alls
    (k3plan.validate.dispatch); rows padded to a multiple of the EP group (id -1: dispatched nowhere)."""
    ep = math.prod(ctx.mesh.shape[a] for a in ctx.expert_axes)
    k = ctx.spec.moe.top_k
    pad = -z.shape[0] % ep
    real = jnp.arange(z.shape[0] + pad) < z.shape[0]
    if pad:
        z = jnp.pad(z, ((0, pad), (0, 0)))
        scores = jnp.pad(scores, ((0, pad), (0, 0)))
    rows = P(ctx.expert_axes, None)

    def local(z_, s_, r_, b_, w1, w2, w3):
        ids, wts = route(s_, b_, k)
        ids = jnp.where(r_[:, None], ids, -1)
        return a2a_experts(
            z_,
            ids,
            wts.astype(ctx.act),
            w1,
            w2,
            w3,
            axes=ctx.expert_axes,
            n=ep,
            act=ctx.act,
            form=ctx.experts_form,
            wire=ctx.dispatch_dtype or ctx.act,
            ragged=ctx.ragged_dispatch,
        )

    fn = jax.shard_map(
        local,
        mesh=ctx.mesh,
        in_specs=(rows, rows, P(ctx.expert_axes), P(), *({k: espec for k in e} for e in ex)),
        out_specs=rows,
        check_vma=False,
    )
    y = fn(z, scores, real, bias, *ex)
    return y[: y.shape[0] - pad] if pad else y


# --- a decoder layer -------------------------------------------------------------------------


def _res_gate(p: dict, x, which: str):
    key = f"{which}_res_proj.weight"
    if key not in p:
        return 1.0
    h = rmsnorm(x, W(p, f"{which}_res_norm.weight", jnp.float32))
    return jax.nn.sigmoid(lin(h, W(p, key, x.dtype)))


def decoder_layer(p: dict, x, cache: dict, ctx: Ctx, *, mixer: str, mlp_kind: str, decode: bool, start):
    h = rmsnorm(x, W(p, "input_layernorm.weight", jnp.float32))
    if mixer == "kda":
        a, cache = kda_mixer(p, h, cache, ctx, decode=decode)
    else:
        a, cache = mla_mixer(p, h, cache, ctx, start=start)
    x = ctx.residual(x + a * _res_gate(p, x, "self_attention"))
    h = rmsnorm(x, W(p, "post_attention_layernorm.weight", jnp.float32))
    y = mlp(p, h, "mlp.", ctx.act) if mlp_kind == "dense" else moe(p, h, ctx)
    x = ctx.residual(x + y * _res_gate(p, x, "mlp"))
    return x, cache
