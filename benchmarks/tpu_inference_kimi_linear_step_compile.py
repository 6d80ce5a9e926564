"""Compile a reduced Kimi-Linear-48B step of tpu-inference @811f8e20 deviceless for a TPU topology: its 27 layers in
order (linear_attn_config: KDA at 1-3, 5-7, ..., MLA at 4, 8, ..., 24, 27), each KDA layer the engine's own
kda_attention with its four state pools, each MLA layer the engine's MLA v2 kernel on its own paged cache, and the
MEGABLX_GMM MoE (sparse_moe_distributed_fwd) after every layer but the first (first_k_dense_replace 1; its dense MLP
left out), the router a matmul and top-k of the hidden state; every pool and cache donated as the runner donates its
caches; and print XLA's memory analysis a device as JSON. Left out (small beside the pieces): the norms, the
projections that feed MLA (its q / k stand in as slices of the hidden state), the shared expert, the dense MLP.
Setups as in tpu_inference_kda_compile.py, tpu_inference_sparse_moe_compile.py and tpu_inference_mla_compile.py
(same stubs, mesh and specs). Run by hand (minutes); not a test:

    python3 benchmarks/tpu_inference_kimi_linear_step_compile.py --src /tmp/ti --tokens 8192 --slots 520 --pages 8632
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_inference_harness import mesh_over, mla_attention_local, print_record, stub, stub_package  # noqa: E402

KDA_LAYERS = (1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26)  # Kimi-Linear-48B's config
NUM_LAYERS = 27


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True)
    p.add_argument("--target", default="tpu7x:2x2x1")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--slots", type=int, default=520, help="the KDA state pool's global slots")
    p.add_argument("--reqs", type=int, default=64)
    p.add_argument("--pages", type=int, default=8632, help="a device's pages of one MLA layer's cache")
    p.add_argument("--page", type=int, default=1024)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--layers", type=int, default=NUM_LAYERS, help="the first N layers")
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

    class MoEBackend(__import__("enum").Enum):
        MEGABLX_GMM = "megablox_gmm"

    stub("tpu_inference.layers.common.moe", MoEBackend=MoEBackend)
    stub("tpu_inference.layers.jax.layers", FlaxUtils=object, modeling_flax_utils=types.SimpleNamespace(
        ACT2FN={"silu": jax.nn.silu}))  # fmt: skip
    stub("flax", nnx=types.SimpleNamespace(Param=object))
    for name in ("qwix", "qwix._src", "vllm", "vllm.model_executor", "vllm.model_executor.layers"):
        stub(name)
    stub("qwix._src.providers", ptq=types.SimpleNamespace(WithAux=object))
    stub("vllm.model_executor.layers.fused_moe", RoutedExperts=object)
    stub("tpu_inference.layers.common.process_weights.moe_weights", UnfusedMoEWeights=object)
    stub("tpu_inference.models.jax.utils.qwix.qwix_utils", manually_quantize_qwix_weight=None)
    for pkg in ("layers/jax", "layers/jax/moe"):
        stub("tpu_inference." + pkg.replace("/", "."), __path__=[os.path.join(a.src, "tpu_inference", pkg)])
    sm = importlib.import_module("tpu_inference.layers.jax.moe.sparse_moe")
    kda = importlib.import_module("tpu_inference.layers.common.kda_attention")
    kern = importlib.import_module("tpu_inference.kernels.mla.v2.kernel")
    tp = importlib.import_module("tpu_inference.kernels.mla.v2.tuned_params")
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName

    devs, mesh = mesh_over(a.target, "attn_dp_expert")
    n = len(devs)

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    t, d, h, k, w, s, r = a.tokens, 2304, 32, 128, 4, a.slots, a.reqs
    hk, data, rep = h * k, axis.ATTN_DATA, P()
    bf, f32, i32 = jnp.bfloat16, jnp.float32, jnp.int32
    kp = kda.KDAParams(
        q_proj=arg((hk, d), bf, rep), k_proj=arg((hk, d), bf, rep), v_proj=arg((hk, d), bf, rep),
        q_conv_weight=arg((hk, 1, w), bf, rep), k_conv_weight=arg((hk, 1, w), bf, rep),
        v_conv_weight=arg((hk, 1, w), bf, rep), A_log=arg((h,), f32, rep), dt_bias=arg((hk,), f32, rep),
        f_a_proj=arg((k, d), bf, rep), f_b_proj=arg((hk, k), bf, rep), b_proj=arg((h, d), bf, rep),
        o_norm_weight=arg((k,), bf, rep), o_proj=arg((d, hk), bf, rep), g_a_proj=arg((k, d), bf, rep),
        g_b_proj=arg((hk, k), bf, rep),
    )  # fmt: skip
    kstate = kda.KDAState(
        conv_q=arg((s, w - 1, hk), bf, P(data, None, None)), conv_k=arg((s, w - 1, hk), bf, P(data, None, None)),
        conv_v=arg((s, w - 1, hk), bf, P(data, None, None)), recurrent=arg((s, h, k, k), f32, P(data, None, None, None)),
    )  # fmt: skip
    kmeta = (arg((n * r,), i32, P(data)), arg((n * (r + 1),), i32, P(data)), arg((n * 3,), i32, P(data)),
             arg((n * r,), jnp.bool_, P(data)))  # fmt: skip
    lkv, rope = 512, 64
    cache = arg(kern.get_kv_cache_shape(a.pages * n, a.page, lkv + rope, bf), bf, P(axis.BATCH))
    pps = -(-a.max_model_len // a.page)
    mmeta = (arg((n * r,), i32, P(data)), arg((n * r * pps,), i32, P(data)), kmeta[1], kmeta[2])
    mt = axis.MLP_TENSOR

    # attention_interface.py mla_attention's body
    mla_local = mla_attention_local(kern, tp, max_num_seqs=r, transpose_kv_cache=False)

    mla = jax.jit(
        jax.shard_map(
            mla_local, mesh=mesh,
            in_specs=(P(None, mt, None), P(mt, None, None), P(mt, None), P(mt, None), P(axis.BATCH)) + (P(data),) * 4,
            out_specs=(P(axis.BATCH), P(None, mt, None)), check_vma=False,
        )
    )  # fmt: skip
    edf = (axis.ATTN_DATA_EXPERT, None, axis.MODEL)
    efd = (axis.ATTN_DATA_EXPERT, axis.MODEL, None)
    td = (axis.MLP_DATA, None)
    inst = types.SimpleNamespace(
        num_experts_per_tok=8, num_local_experts=256, num_expert_parallelism=n, expert_axis_name=axis.ATTN_DATA_EXPERT,
        is_batch_sharded_by_expert=False, data_axis_name=td[0], hidden_size=d, tile_size=(128, 128, 128),
        moe_backend=MoEBackend.MEGABLX_GMM, dtype=bf, edf_sharding=edf, efd_sharding=efd, hidden_act="silu",
    )  # fmt: skip
    moe = jax.shard_map(
        lambda *xs: sm.sparse_moe_distributed_fwd(inst, *xs), mesh=mesh,
        in_specs=(P(*td), P(), P(), P(*edf), P(*edf), P(*efd)), out_specs=P(*td), check_vma=False,
    )  # fmt: skip
    experts = (arg((256, d, 1024), bf, P(*edf)), arg((256, d, 1024), bf, P(*edf)), arg((256, 1024, d), bf, P(*efd)))
    router = arg((d, 256), bf, rep)
    x = arg((t, d), bf, P(data, None))
    kinds = ["kda" if i in KDA_LAYERS else "mla" for i in range(1, NUM_LAYERS + 1)][: a.layers]
    pools = [kstate if kind == "kda" else cache for kind in kinds]

    def step(pools, x, kp, experts, router, kmeta, mmeta):
        out = []
        for i, (kind, pool) in enumerate(zip(kinds, pools)):
            if kind == "kda":
                new, y = kda.kda_attention(
                    x, kp, pool, *kmeta, num_heads=h, head_dim=k, kernel_size=w, mesh=mesh
                )  # fmt: skip
            else:
                q = jnp.broadcast_to(x[None, :, :lkv], (h, t, lkv))
                new, o = mla(q, x[:, lkv : lkv + rope][:, None].repeat(h, 1), x[:, :lkv], x[:, :rope], pool, *mmeta)
                y = jnp.pad(o.sum(0).astype(bf), ((0, 0), (0, d - lkv)))
            x = (x + y).astype(bf)
            out.append(new)
            if i:  # every layer but the first: the MoE (first_k_dense_replace 1)
                wts, ids = jax.lax.top_k(jax.nn.sigmoid((x @ router).astype(f32)), 8)
                x = (moe(x, wts, ids, *experts) + x).astype(bf)
        return out, x

    t0 = time.time()
    with jax.set_mesh(mesh):
        c = jax.jit(step, donate_argnums=(0,)).lower(pools, x, kp, experts, router, kmeta, mmeta).compile()
    m = c.memory_analysis()
    pool_bytes = sum(int(np.prod(v.shape)) * jnp.dtype(v.dtype).itemsize // n for v in jax.tree.leaves(pools))
    print_record(
        a,
        devs,
        ("tokens", "slots", "reqs", "pages", "page", "layers"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "alias_bytes"),
        pool_bytes=pool_bytes,
    )


if __name__ == "__main__":
    main()
