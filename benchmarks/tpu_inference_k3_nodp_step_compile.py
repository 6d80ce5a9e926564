"""Compile the first layers of tpu-inference's Kimi-K3 step without DP attention (@e65bd14c, the mesh
TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION=1 runs: sharding_strategy tensor_parallelism 8 x expert_parallelism 4,
enable_dp_attention false) deviceless for a TPU topology, and print XLA's memory analysis a device as JSON.

What it compiles, in the engine's layer order (models/jax/kimi_k3.py KimiLinearModel: layer i is KDA unless i + 1 is
in linear_attn_config.full_attn_layers; layer 0's MLP dense, first_k_dense_replace 1; every other layer's the MoE):
  * KDA: the engine's own layers/common/kda_attention.py kda_attention (its shard_map over ATTN_DATA with the heads over
    ATTN_HEAD, _core_specs), K3's shapes (96 heads of 128, conv 4, gate_lower_bound -5.0, the full-rank g_proj), the
    parameters sharded as kimi_k3.py KimiDeltaAttention holds them; its four state arrays as kv_cache_manager.py
    initialize_kv_cache allocates them (conv P(ATTN_DATA, None, ATTN_HEAD), recurrent P(ATTN_DATA, ATTN_HEAD, None,
    None)), --slots slots each;
  * MLA: the engine's MLA v2 Pallas kernel (kernels/mla/v2/kernel.py mla_ragged_paged_attention, the tuned block
    sizes its own tuned_params lookups) under the shard_map layers/common/attention_interface.py mla_attention builds,
    with the specs kimi_k3.py gives MLAAttention (query_nth P(None, ATTN_DATA, None): every head on every device),
    its cache as runner/kv_cache.py create_kv_caches allocates it (get_kv_cache_shape_with_mesh, MLA_KV_PACKING_SIZE
    32 (envs.py default), P(BATCH, KV_CONTEXT)), --blocks blocks of --block tokens; the projections around it as
    einsums with MLAAttention's weight shardings (q_a / q_b / kv_a / k_up / v_up / g / o);
  * MoE: the engine's MEGABLX_GMM forward (layers/jax/moe/sparse_moe.py sparse_moe_distributed_fwd) under
    sparse_moe_func's shard_map, the routed experts as CompressedTensorsMxfp4MoEMethod leaves them (float4_e2m1fn
    values and float32 group-32 scales, routed_expert_shardings: E over ATTN_DATA_EXPERT, F over MODEL), the latent
    down / up projections, the router a matmul and top-16, the SiTU activation (layers/jax/activation.py), the shared
    experts a GatedMLP split over ATTN_HEAD.
The step is jitted as models/common/model_loader.py run_model is: the caches donated (donate_argnums) and every cache
leaf's out_sharding kv_cache_sharding = P(BATCH, KV_CONTEXT, KV_HEAD) (--out-sharding runner; 'same': each cache
returned as it came in, for comparison). Left out (small beside the pieces at a 512-token bucket): the embedding, the
norms, the attention residuals, the final norm and logits. Run by hand (minutes a point on 2 cores); not a test:

    git --git-dir=<mirror of vllm-project/tpu-inference> archive e65bd14c tpu_inference | tar x -C /tmp/ti-e65
    python3 benchmarks/tpu_inference_k3_nodp_step_compile.py --src /tmp/ti-e65 --layers 4
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import types
from enum import Enum

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_inference_harness import mesh_of, mla_attention_local, print_record, stub, stub_package  # noqa: E402

# Kimi-K3's config (k3plan/models/bundled/kimi-k3/config.json, text_config)
FULL_ATTN_LAYERS = (4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93)
D, INTER, MOE_D, MOE_F, EXPERTS, TOPK, SHARED = 7168, 33792, 3584, 3072, 896, 16, 2
HEADS, HEAD_DIM, CONV = 96, 128, 4
Q_LORA, KV_LORA, NOPE, ROPE, V_DIM = 1536, 512, 128, 64, 128
GROUP = 32  # the MXFP4 group (compressed-tensors group_size)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--target", default="tpu7x:2x2x4", help="a topology libtpu compiles for (default %(default)s)")
    p.add_argument("--model", type=int, default=8, help="the 'model' axis (tensor_parallelism); the rest on 'expert'")
    p.add_argument("--tokens", type=int, default=512, help="the token bucket (max_num_batched_tokens x 1 DP rank)")
    p.add_argument("--reqs", type=int, default=8, help="max_num_reqs (max(max_num_seqs, MIN_NUM_SEQS 8))")
    p.add_argument("--blocks", type=int, default=512, help="num_blocks (the pinned --num-gpu-blocks-override)")
    p.add_argument("--slots", type=int, default=0, help="a KDA layer's state slots (0: --blocks, mamba_num_blocks)")
    p.add_argument("--block", type=int, default=1024, help="tokens a block (cache_config.block_size)")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--layers", type=int, default=4, help="the first N layers")
    p.add_argument("--out-sharding", choices=("runner", "same", "none"), default="runner")
    p.add_argument(
        "--loop",
        action="store_true",
        help="the step inside the fused decode loop (runner/decode_loop.py _decode_core: a lax.while_loop over the "
        "step, the caches carried and donated, the weights loop-invariant arguments, no out_shardings) instead of "
        "run_model's jit; --tokens is then the loop's request bucket (max_num_reqs), one token a request",
    )
    p.add_argument(
        "--kinds",
        default="",
        help="the layers' attention in order, K (KDA) or M (MLA), instead of K3's first --layers (e.g. MM: two MLA "
        "layers, to see whether their caches' copies are live at once)",
    )
    p.add_argument(
        "--own-weights",
        action="store_true",
        help="each layer its own weights, as the model holds them (default: one set every layer reads, which XLA may "
        "share between layers: what the loop hoists out of its body would be computed once)",
    )
    a = p.parse_args()
    os.environ.setdefault("NEW_MODEL_DESIGN", "1")
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    stub_package(a.src)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    class MoEBackend(Enum):  # tpu_inference/layers/common/moe.py MoEBackend, the member the forward compares
        MEGABLX_GMM = "megablox_gmm"

    stub("tpu_inference.layers.common.moe", MoEBackend=MoEBackend)
    stub("tpu_inference.layers.jax.layers", FlaxUtils=object, modeling_flax_utils=types.SimpleNamespace(ACT2FN={}))
    stub("flax", nnx=types.SimpleNamespace(Param=object))
    for name in ("qwix", "qwix._src", "vllm", "vllm.model_executor", "vllm.model_executor.layers"):
        stub(name)
    stub("qwix._src.providers", ptq=types.SimpleNamespace(WithAux=object))
    stub("vllm.model_executor.layers.fused_moe", RoutedExperts=object)
    stub("tpu_inference.layers.common.process_weights.moe_weights", UnfusedMoEWeights=object)
    stub("tpu_inference.models.jax.utils.qwix.qwix_utils", manually_quantize_qwix_weight=None)
    for pkg in ("layers/jax", "layers/jax/moe"):  # their __init__ builds the nnx layer stack: skipped, the folder kept
        stub("tpu_inference." + pkg.replace("/", "."), __path__=[os.path.join(a.src, "tpu_inference", pkg)])
    sm = importlib.import_module("tpu_inference.layers.jax.moe.sparse_moe")
    act = importlib.import_module("tpu_inference.layers.jax.activation")
    kda = importlib.import_module("tpu_inference.layers.common.kda_attention")
    kern = importlib.import_module("tpu_inference.kernels.mla.v2.kernel")
    tp = importlib.import_module("tpu_inference.kernels.mla.v2.tuned_params")
    envs = sys.modules["tpu_inference.envs"]
    ax = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName

    devs, mesh = mesh_of(a.target, {"model": a.model, "expert": 0})
    n = len(devs)
    bf, f32, i32, fp4 = jnp.bfloat16, jnp.float32, jnp.int32, jnp.float4_e2m1fn

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    def ways(axes):
        return int(np.prod([mesh.shape[x] for x in ([axes] if isinstance(axes, str) else axes)]))

    t, s, hp, k = a.tokens, a.slots or a.blocks, HEADS * HEAD_DIM, HEAD_DIM
    head, data, batch = ax.ATTN_HEAD, ax.ATTN_DATA, ax.BATCH
    rep = P()
    # the KDA sublayer (kimi_k3.py KimiDeltaAttention: per-head weights over ATTN_HEAD, stored (in, out) and handed
    # to kda_attention transposed, torch [out, in]; the conv weights and o_norm fp32, cast in _params)
    kda_w = dict(
        q_proj=arg((hp, D), bf, P(head, None)), k_proj=arg((hp, D), bf, P(head, None)),
        v_proj=arg((hp, D), bf, P(head, None)), q_conv_weight=arg((hp, 1, CONV), f32, P(head, None, None)),
        k_conv_weight=arg((hp, 1, CONV), f32, P(head, None, None)),
        v_conv_weight=arg((hp, 1, CONV), f32, P(head, None, None)), A_log=arg((HEADS,), f32, P(head)),
        dt_bias=arg((hp,), f32, P(head)), f_a_proj=arg((k, D), bf, rep), f_b_proj=arg((hp, k), bf, P(head, None)),
        b_proj=arg((HEADS, D), bf, P(head, None)), o_norm_weight=arg((k,), f32, rep),
        o_proj=arg((D, hp), bf, P(None, head)), g_proj=arg((hp, D), bf, P(head, None)),
    )  # fmt: skip
    kda_state = (
        arg((s, CONV - 1, hp), bf, P(data, None, head)),
        arg((s, CONV - 1, hp), bf, P(data, None, head)),
        arg((s, CONV - 1, hp), bf, P(data, None, head)),
        arg((s, HEADS, k, k), f32, P(data, head, None, None)),
    )  # kv_cache_manager.py initialize_kv_cache, the MambaSpec branch
    meta = P(batch)  # compilation_manager.py _precompile_backbone_helper: metadata_attn_sharding
    kmeta = (arg((a.reqs,), i32, meta), arg((a.reqs + 1,), i32, meta), arg((3,), i32, meta),
             arg((a.reqs,), i32, meta))  # fmt: skip
    # the MLA layer (kimi_k3.py MLAAttention's shardings)
    lkv = KV_LORA + ROPE
    cache_shape = kern.get_kv_cache_shape(a.blocks, a.block, lkv, bf, envs.MLA_KV_PACKING_SIZE)
    cache = arg(cache_shape, bf, P(batch, ax.KV_CONTEXT))  # runner/kv_cache.py create_kv_caches (use_mla)
    pps = -(-a.max_model_len // a.block)
    mmeta = (arg((a.reqs,), i32, meta), arg((a.reqs * pps,), i32, meta), kmeta[1], kmeta[2])
    mla_w = dict(
        q_a=arg((D, Q_LORA), bf, P(None, head)), q_b=arg((Q_LORA, HEADS * (NOPE + ROPE)), bf, P(None, head)),
        kv_a=arg((D, lkv), bf, P(None, head)), k_up=arg((HEADS, NOPE, KV_LORA), bf, P(head, None, None)),
        v_up=arg((HEADS, KV_LORA, V_DIM), bf, P(head, None, None)), g=arg((D, HEADS * V_DIM), bf, P(None, head)),
        o=arg((HEADS * V_DIM, D), bf, P(head, None)),
    )  # fmt: skip
    nth, tnh, skh = P(None, data, None), P(data, None, None), P(data, None)

    # attention_interface.py mla_attention's body
    mla_local = mla_attention_local(kern, tp, max_num_seqs=a.reqs, transpose_kv_cache=envs.MLA_TRANSPOSE_KV_CACHE)

    mla = jax.jit(
        jax.shard_map(
            mla_local, mesh=mesh, in_specs=(nth, tnh, skh, skh, P(batch)) + (P(data),) * 4,
            out_specs=(P(batch), nth), check_vma=False,
        )
    )  # fmt: skip

    def wsc(x, spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    def mla_layer(x, w, c, mmeta):  # layers/jax/attention/mla.py MLABaseAttention.__call__ / MLAAttention
        q = (x @ w["q_a"]) @ w["q_b"]
        q = q.reshape(t, HEADS, NOPE + ROPE)
        q_nta = wsc(jnp.einsum("TNH,NHA->NTA", q[..., :NOPE], w["k_up"]), nth)
        q_rope = wsc(q[..., NOPE:], tnh)
        kv = x @ w["kv_a"]
        k_sa, k_rope = wsc(kv[:, :KV_LORA], skh), wsc(kv[:, KV_LORA:], skh)
        c, o_nta = mla(q_nta, q_rope, k_sa, k_rope, c, *mmeta)
        o = jnp.einsum("NTA,NAH->TNH", o_nta, w["v_up"]).reshape(t, HEADS * V_DIM)
        o = (o.astype(f32) * jax.nn.sigmoid((x @ w["g"]).astype(f32))).astype(bf)
        return c, o @ w["o"]

    # the MoE (kimi_k3.py KimiSparseMoeBlock / KimiRoutedExperts, MEGABLX_GMM)
    edf = (ax.ATTN_DATA_EXPERT, None, ax.MODEL)  # routed_expert_shardings
    efd = (ax.ATTN_DATA_EXPERT, ax.MODEL, None)
    td = (ax.MLP_DATA, None)
    inst = types.SimpleNamespace(
        num_experts_per_tok=TOPK, num_local_experts=EXPERTS, num_expert_parallelism=ways(ax.ATTN_DATA_EXPERT),
        expert_axis_name=ax.ATTN_DATA_EXPERT, is_batch_sharded_by_expert=False, data_axis_name=td[0],
        hidden_size=MOE_D, tile_size=(128, 128, 128), moe_backend=MoEBackend.MEGABLX_GMM, dtype=bf,
        edf_sharding=edf, efd_sharding=efd, hidden_act="situ", situ_beta=4.0, situ_linear_beta=25.0,
    )  # fmt: skip
    assert act.situ_params(inst) == (4.0, 25.0)
    moe = jax.shard_map(
        lambda *xs: sm.sparse_moe_distributed_fwd(inst, *xs), mesh=mesh,
        in_specs=(P(*td), P(), P(), (P(*edf), P(*edf)), (P(*edf), P(*edf)), (P(*efd), P(*efd))),
        out_specs=P(*td), check_vma=False,
    )  # fmt: skip
    moe_w = dict(
        router=arg((D, EXPERTS), bf, rep), bias=arg((EXPERTS,), f32, rep), down_lat=arg((D, MOE_D), bf, rep),
        up_lat=arg((MOE_D, D), bf, rep),
        gate=(arg((EXPERTS, MOE_D, MOE_F), fp4, P(*edf)), arg((EXPERTS, MOE_D // GROUP, MOE_F), f32, P(*edf))),
        up=(arg((EXPERTS, MOE_D, MOE_F), fp4, P(*edf)), arg((EXPERTS, MOE_D // GROUP, MOE_F), f32, P(*edf))),
        down=(arg((EXPERTS, MOE_F, MOE_D), fp4, P(*efd)), arg((EXPERTS, MOE_F // GROUP, MOE_D), f32, P(*efd))),
        sh_gate=arg((D, MOE_F * SHARED), bf, P(None, head)), sh_up=arg((D, MOE_F * SHARED), bf, P(None, head)),
        sh_down=arg((MOE_F * SHARED, D), bf, P(head, None)),
    )  # fmt: skip
    dense_w = dict(gate=arg((D, INTER), bf, P(None, head)), up=arg((D, INTER), bf, P(None, head)),
                   down=arg((INTER, D), bf, P(head, None)))  # fmt: skip

    def gated(x, g, u, dn):
        return act.apply_gated_activation("situ", x @ g, x @ u, 4.0, 25.0) @ dn

    def moe_layer(x, w):
        scores = jax.nn.sigmoid((x @ w["router"]).astype(f32))
        _, ids = jax.lax.top_k(scores + w["bias"], TOPK)
        wts = jnp.take_along_axis(scores, ids, -1)
        wts = wts / wts.sum(-1, keepdims=True)
        y = moe(wsc(x @ w["down_lat"], P(*td)), wts, ids, w["gate"], w["up"], w["down"])
        return y @ w["up_lat"] + gated(x, w["sh_gate"], w["sh_up"], w["sh_down"])

    kinds = ["mla" if i + 1 in FULL_ATTN_LAYERS else "kda" for i in range(a.layers)]
    if a.kinds:
        kinds, a.layers = ["mla" if c == "M" else "kda" for c in a.kinds], len(a.kinds)
    caches = [cache if kind == "mla" else kda_state for kind in kinds]
    x = arg((t, D), bf, P(data, None))

    if a.own_weights:  # one set a layer (the same shapes and shardings: abstract arguments, a list of them)
        kda_w, mla_w, moe_w = ([w] * a.layers for w in (kda_w, mla_w, moe_w))

    # the loop's executable runs decode-only metadata (compilation_manager.py _precompile_continue_decode @6a1cb1cca:
    # decode_only_bucket = has_mamba_layers, the KDA decode path chosen at trace time, 5b04eb356); earlier commits'
    # kda_attention has no such argument
    decode_only = (
        {"decode_only_bucket": True}
        if a.loop and "decode_only_bucket" in kda.kda_attention.__code__.co_varnames
        else {}
    )

    def step(caches, x, kda_w, mla_w, moe_w, dense_w, kmeta, mmeta):
        out = []
        layer_w = (lambda w, i: w[i]) if a.own_weights else (lambda w, i: w)
        for i, (kind, c) in enumerate(zip(kinds, caches)):
            if kind == "kda":
                ps = kda.KDAParams(**{
                    name: v.astype(bf) if name.endswith("conv_weight") else v for name, v in layer_w(kda_w, i).items()
                })  # fmt: skip
                new, y = kda.kda_attention(
                    x, ps, kda.KDAState(*c), *kmeta[:2], kmeta[2], kmeta[3].astype(jnp.bool_), num_heads=HEADS,
                    head_dim=HEAD_DIM, kernel_size=CONV, gate_lower_bound=-5.0, mesh=mesh, **decode_only,
                )  # fmt: skip
                new = tuple(new)
            else:
                new, y = mla_layer(x, layer_w(mla_w, i), c, mmeta)
            x = (x + y).astype(bf)
            out.append(new)
            x = (
                x
                + (moe_layer(x, layer_w(moe_w, i)) if i else gated(x, dense_w["gate"], dense_w["up"], dense_w["down"]))
            ).astype(bf)
        return out, x

    kv_out = NamedSharding(mesh, P(batch, ax.KV_CONTEXT, ax.KV_HEAD))  # model_loader.py run_model: kv_cache_sharding
    out_sh = (kv_out if a.out_sharding == "runner" else [jax.tree.map(lambda v: v.sharding, c) for c in caches],
              NamedSharding(mesh, P(data, None)))  # fmt: skip
    if a.out_sharding == "none" or a.loop:  # 060ba1227 (podfix): propagation; decode_loop.py's jit has none either
        out_sh = None
    fn = step
    if a.loop:
        # decode_loop.py _decode_core: jax.lax.while_loop(cond_fn, body_fn, init_carry), i < max_decode_steps (a
        # traced bound), the caches in the carry, every weight a loop invariant of the body (the state argument);
        # the next step's input the last hidden state (the engine samples a token and embeds it: left out)
        def fn(caches, x, kda_w, mla_w, moe_w, dense_w, kmeta, mmeta, steps):
            def body(carry):
                i, cs, h = carry
                cs, h = step(cs, h, kda_w, mla_w, moe_w, dense_w, kmeta, mmeta)
                return i + 1, cs, h

            _, cs, h = jax.lax.while_loop(lambda c: c[0] < steps, body, (jnp.int32(0), caches, x))
            return cs, h

    args = (caches, x, kda_w, mla_w, moe_w, dense_w, kmeta, mmeta) + ((arg((), i32, rep),) if a.loop else ())
    t0 = time.time()
    with jax.set_mesh(mesh):
        compiled = jax.jit(fn, donate_argnums=(0,), out_shardings=out_sh).lower(*args).compile()
    m = compiled.memory_analysis()
    per_dev = [
        sum(int(np.prod(v.sharding.shard_shape(v.shape))) * jnp.dtype(v.dtype).itemsize for v in jax.tree.leaves(c))
        for c in caches
    ]
    print_record(
        a,
        devs,
        (
            "model",
            "tokens",
            "reqs",
            "blocks",
            "slots",
            "block",
            "max_model_len",
            "layers",
            "out_sharding",
            "kinds",
            "loop",
            "own_weights",
        ),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "alias_bytes", "code_bytes"),
        devices=n,
        mesh={k: int(v) for k, v in mesh.shape.items()},
        kinds="".join("M" if kind == "mla" else "K" for kind in kinds),
        cache_bytes=sum(per_dev),
    )


if __name__ == "__main__":
    main()
