"""Compile tpu-inference's MLA attention (tpu_inference/kernels/mla/v2/kernel.py mla_ragged_paged_attention, the
Pallas kernel that writes the step's latents into the paged cache in place, input_output_aliases 11: 1) under the
shard_map layers/common/attention_interface.py mla_attention wraps it in, deviceless for a TPU topology, N layers in
one jit with each layer's cache donated as the runner donates its caches, and print XLA's memory analysis a device,
as JSON. The question it answers: does the compiled step hold a copy of a layer's KV cache (a temporary the size of
the pool's share), or only the kernel's activations. Run by hand; not a test. Needs libtpu and the engine's source:

    git --git-dir=<mirror of vllm-project/tpu-inference> archive 811f8e20 tpu_inference | tar x -C /tmp/ti
    python3 benchmarks/tpu_inference_mla_compile.py --src /tmp/ti --tokens 8192 --pages 8632

The mesh is the NEW_MODEL_DESIGN one with every device on attn_dp_expert; the specs are mla_attention's defaults
(q head-major P(None, MLP_TENSOR, None), q_rope / k / k_rope P(MLP_TENSOR, ...), the cache P(BATCH), the metadata
P(ATTN_DATA)), the tuned block sizes its own get_tuned_params lookups, MLA_TRANSPOSE_KV_CACHE off (envs.py
default). Defaults: Kimi-Linear-48B's MLA (32 heads, kv_lora_rank 512, rope 64), bf16 cache, 64 requests a rank of
2,048 tokens. --pages is a device's pages of one layer's cache, --page its tokens. Stubbed: the engine's logger,
envs and utils (as the other tpu-inference compiles).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_inference_harness import mesh_over, print_record, stub_package  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True)
    p.add_argument("--target", default="tpu7x:2x2x1")
    p.add_argument("--tokens", type=int, default=8192, help="the step's global token bucket")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--lkv", type=int, default=512, help="kv_lora_rank")
    p.add_argument("--rope", type=int, default=64, help="qk_rope_head_dim")
    p.add_argument("--pages", type=int, default=8632, help="a device's pages of one layer's cache")
    p.add_argument("--page", type=int, default=1024, help="tokens a page")
    p.add_argument("--reqs", type=int, default=64, help="requests a rank")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--layers", type=int, default=1)
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

    kern = importlib.import_module("tpu_inference.kernels.mla.v2.kernel")
    tp = importlib.import_module("tpu_inference.kernels.mla.v2.tuned_params")
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName
    devs, mesh = mesh_over(a.target, "attn_dp_expert")
    n = len(devs)

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    t, h, lkv, r = a.tokens, a.heads, a.lkv, a.rope
    cache_shape = kern.get_kv_cache_shape(a.pages * n, a.page, lkv + r, jnp.bfloat16)
    pages_per_seq = -(-a.max_model_len // a.page)
    mt = axis.MLP_TENSOR
    q = arg((h, t, lkv), jnp.bfloat16, P(None, mt, None))
    q_rope = arg((t, h, r), jnp.bfloat16, P(mt, None, None))
    k = arg((t, lkv), jnp.bfloat16, P(mt, None))
    k_rope = arg((t, r), jnp.bfloat16, P(mt, None))
    cache = arg(cache_shape, jnp.bfloat16, P(axis.BATCH))
    data = axis.ATTN_DATA
    meta = (
        arg((n * a.reqs,), jnp.int32, P(data)),  # seq_lens
        arg((n * a.reqs * pages_per_seq,), jnp.int32, P(data)),  # block_tables
        arg((n * (a.reqs + 1),), jnp.int32, P(data)),  # query_start_loc
        arg((n * 3,), jnp.int32, P(data)),  # request_distribution
    )

    def local(q, q_rope, k, k_rope, cache, *md):  # attention_interface.py mla_attention's _mla_ragged_paged_attention
        def key(case):
            return tp.TuningKey(
                case=case,
                max_num_tokens=q.shape[1],
                actual_num_q_heads=q.shape[0],
                actual_lkv_dim=q.shape[2],
                actual_r_dim=q_rope.shape[2],
                kv_dtype=cache.dtype.name,
                q_dtype=q.dtype.name,
                page_size_per_kv_packing=cache.shape[1],
                kv_packing=cache.shape[2],
                max_num_seqs=a.reqs,
                pages_per_seq=md[1].shape[0] // md[0].shape[0],
            )

        bd, mx = tp.get_tuned_params(key("batched_decode")), tp.get_tuned_params(key("mixed"))
        out, new_cache = kern.mla_ragged_paged_attention(
            q, q_rope, k, k_rope, cache, *md,
            sm_scale=1.0,
            num_kv_pages_per_block=(bd.num_kv_pages_per_block, mx.num_kv_pages_per_block, mx.num_kv_pages_per_block),
            num_queries_per_block=(bd.num_queries_per_block, mx.num_queries_per_block, mx.num_queries_per_block),
            decode_batch_size=bd.decode_batch_size, mixed_q_split=mx.q_split, transpose_kv_cache=False,
        )  # fmt: skip
        return new_cache, out

    attn = jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(None, mt, None), P(mt, None, None), P(mt, None), P(mt, None), P(axis.BATCH)) + (P(data),) * 4,
            out_specs=(P(axis.BATCH), P(None, mt, None)),
            check_vma=False,
        )
    )

    def step(caches, q, q_rope, k, k_rope, *md):
        out = []
        for c in caches:
            c, o = attn(q, q_rope, k, k_rope, c, *md)
            q = (q + o).astype(q.dtype)
            out.append(c)
        return out, q

    t0 = time.time()
    with jax.set_mesh(mesh):
        m = jax.jit(step, donate_argnums=(0,)).lower([cache] * a.layers, q, q_rope, k, k_rope, *meta).compile()
        m = m.memory_analysis()
    cache_bytes = int(np.prod(cache_shape)) * 2 // n
    print_record(
        a,
        devs,
        ("tokens", "heads", "pages", "page", "reqs", "layers"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "alias_bytes"),
        cache_bytes_a_layer=cache_bytes,
    )


if __name__ == "__main__":
    main()
