"""Compile tpu-inference's MEGABLX_GMM MoE (tpu_inference/layers/jax/moe/sparse_moe.py sparse_moe_distributed_fwd: the
global permute, the local permute of the shard's experts, three megablox gmm calls, the ragged_all_to_all back and
the unpermute) deviceless for a TPU topology and print XLA's memory analysis a device, as JSON. It is the backend
the JAX Kimi-Linear / K3 model takes when the expert axis is split (models/jax/kimi_k3.py
KimiLinearForCausalLM._select_moe_backend at 811f8e20). Run by hand (~1 min a point); not a test. Needs libtpu and
the engine's source at the commit read:

    git --git-dir=<mirror of vllm-project/tpu-inference> archive 811f8e20 tpu_inference | tar x -C /tmp/ti
    python3 benchmarks/tpu_inference_sparse_moe_compile.py --src /tmp/ti --tokens 8192

The mesh is the NEW_MODEL_DESIGN one with every device on attn_dp_expert (tensor_parallelism 1 x
expert_parallelism N under enable_dp_attention). As sparse_moe_func shards it: the tokens in by activation_ffw_td
P(MLP_DATA = 'data', None), so every device holds the whole --tokens bucket (the data axis is 1); the router's
weights and ids replicated; the kernels by kimi_k3.py routed_expert_shardings (E over ATTN_DATA_EXPERT, F over
MODEL); is_batch_sharded_by_expert False (moe.py JaxMoE: the expert axis is not the data axis), so the
local_permute_fn(is_offset=True) branch and the ragged_all_to_all of the shard's rows back. The instance sparse_moe
reads is a namespace of the attributes it uses; the kernels' own code runs. Stubbed: the engine's logger, envs and
utils (as the KDA / GMM_EP compiles), and the imports sparse_moe.py and moe/utils.py make of flax, qwix, vLLM and the
nnx layer stack, which the forward does not call (the activation's ACT2FN, read here as jax.nn.silu).
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

from tpu_inference_harness import mesh_over, print_record, stub, stub_package  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--target", default="tpu7x:2x2x1")
    p.add_argument("--tokens", type=int, default=8192, help="the step's global token bucket")
    p.add_argument("--hidden", type=int, default=2304)
    p.add_argument("--inter", type=int, default=1024, help="moe_intermediate_size")
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--layers", type=int, default=1)
    a = p.parse_args()
    os.environ.setdefault("NEW_MODEL_DESIGN", "1")
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    stub_package(a.src)

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    class MoEBackend(Enum):  # tpu_inference/layers/common/moe.py MoEBackend, the member the forward compares
        MEGABLX_GMM = "megablox_gmm"

    stub("tpu_inference.layers.common.moe", MoEBackend=MoEBackend)
    stub("tpu_inference.layers.jax.layers", FlaxUtils=object, modeling_flax_utils=types.SimpleNamespace(
        ACT2FN={"silu": jax.nn.silu}))  # fmt: skip
    stub("flax", nnx=types.SimpleNamespace(Param=object))
    stub("qwix")
    stub("qwix._src")
    stub("qwix._src.providers", ptq=types.SimpleNamespace(WithAux=object))
    stub("vllm")
    stub("vllm.model_executor")
    stub("vllm.model_executor.layers")
    stub("vllm.model_executor.layers.fused_moe", RoutedExperts=object)
    stub("tpu_inference.layers.common.process_weights.moe_weights", UnfusedMoEWeights=object)
    stub("tpu_inference.models.jax.utils.qwix.qwix_utils", manually_quantize_qwix_weight=None)
    for pkg in ("layers/jax", "layers/jax/moe"):  # their __init__ builds the nnx layer stack: skipped, the folder kept
        name = "tpu_inference." + pkg.replace("/", ".")
        stub(name, __path__=[os.path.join(a.src, "tpu_inference", pkg)])
    sm = importlib.import_module("tpu_inference.layers.jax.moe.sparse_moe")
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName

    devs, mesh = mesh_over(a.target, "attn_dp_expert")
    n = len(devs)
    edf = (axis.ATTN_DATA_EXPERT, None, axis.MODEL)  # kimi_k3.py routed_expert_shardings
    efd = (axis.ATTN_DATA_EXPERT, axis.MODEL, None)
    td = (axis.MLP_DATA, None)  # KimiSparseMoeBlock: activation_ffw_td
    inst = types.SimpleNamespace(
        num_experts_per_tok=a.topk,
        num_local_experts=a.experts,
        num_expert_parallelism=n,
        expert_axis_name=axis.ATTN_DATA_EXPERT,
        is_batch_sharded_by_expert=False,
        data_axis_name=td[0],
        hidden_size=a.hidden,
        tile_size=(128, 128, 128),  # JaxMoE.tile_size's default
        moe_backend=MoEBackend.MEGABLX_GMM,
        dtype=jnp.bfloat16,
        edf_sharding=edf,
        efd_sharding=efd,
        hidden_act="silu",
    )

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    t, d, f, e = a.tokens, a.hidden, a.inter, a.experts
    x = arg((t, d), jnp.bfloat16, P(*td))
    w = arg((t, a.topk), jnp.float32, P())
    ids = arg((t, a.topk), jnp.int32, P())
    gate = arg((e, d, f), jnp.bfloat16, P(*edf))
    up = arg((e, d, f), jnp.bfloat16, P(*edf))
    down = arg((e, f, d), jnp.bfloat16, P(*efd))

    fwd = jax.shard_map(
        lambda *xs: sm.sparse_moe_distributed_fwd(inst, *xs),
        mesh=mesh,
        in_specs=(P(*td), P(), P(), P(*edf), P(*edf), P(*efd)),
        out_specs=P(*td),
        check_vma=False,
    )  # sparse_moe_func's shard_map, the instance closed over (its in_spec P() for it)

    def step(x, w, ids, gate, up, down):
        for _ in range(a.layers):
            x = fwd(x, w, ids, gate, up, down) + x
        return x

    t0 = time.time()
    with jax.set_mesh(mesh):
        m = jax.jit(step).lower(x, w, ids, gate, up, down).compile().memory_analysis()
    print_record(
        a,
        devs,
        ("tokens", "hidden", "inter", "experts", "topk", "layers"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes"),
    )


if __name__ == "__main__":
    main()
