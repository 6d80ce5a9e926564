"""Compile tpu-inference's own MoE layer (GMM_EP: the SparseCore ragged_gather_v2 / ragged_gather_reduce_v2 kernels
and gmm_v2 on fp4 experts) deviceless for a TPU topology and print XLA's memory analysis a device, as JSON. Run by
hand (a point takes ~0.5-2 min on a 2-core machine); not a test. Needs libtpu (pip install -e ".[tpu]") and the
engine's source at the commit read, e.g.

    git --git-dir=<mirror of vllm-project/tpu-inference> archive e0e04e95 tpu_inference | tar x -C /tmp/ti
    python3 benchmarks/tpu_inference_moe_compile.py --src /tmp/ti --tokens 8192 --experts 384

It calls tpu_inference/layers/common/fused_moe_gmm.py fused_moe_func as vllm_moe_apply does for vLLM's model code
under DP attention (use_ep, scatter_results = attention DP > 1, moe_chunk_size 0, sigmoid scoring with the score
correction bias, renormalized top-k), on the NEW_MODEL_DESIGN mesh (data, attn_dp, attn_dp_expert, expert, model,
dcp, pcp) with every device on attn_dp: the tokens arrive split over ATTN_DATA, the experts over EXPERT, the weights
fp4 E2M1 with an f32 scale a 512-block (MOE_REQUANTIZE_WEIGHT_DTYPE=fp4, MOE_REQUANTIZE_BLOCK_SIZE=512). --tokens
is the step's global token bucket (tpu_runner.py _init_inputs: the largest is max_num_batched_tokens x the DP size).
Only the engine's vllm / torch imports (its logger, tpu_inference.utils) are stubbed; the MoE code is its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpu_inference_harness import deviceless_tpu_info, mesh_over, moe_parser, print_record, stub_package  # noqa: E402


def main() -> None:
    p = moe_parser(__doc__)
    p.add_argument("--block", type=int, default=512, help="the requantized experts' scale block")
    a = p.parse_args()
    os.environ.setdefault("NEW_MODEL_DESIGN", "1")
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    stub_package(a.src)

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    devs, mesh = mesh_over(a.target, "attn_dp")
    deviceless_tpu_info(devs)
    fm = importlib.import_module("tpu_inference.layers.common.fused_moe_gmm")
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    t, h, i, e, blk = a.tokens, a.hidden, a.inter, a.experts, a.block
    args = (
        arg((t, h), jnp.bfloat16, P(axis.ATTN_DATA, None)),  # the hidden states, split by attention DP
        arg((t, e), jnp.float32, P(axis.ATTN_DATA, None)),  # the router logits
        arg((e, h, 2 * i), jnp.float4_e2m1fn, P(axis.EXPERT)),
        arg((e, i, h), jnp.float4_e2m1fn, P(axis.EXPERT)),
        arg((e, h // blk, 1, 2 * i), jnp.float32, P(axis.EXPERT)),
        arg((e, i // blk, 1, h), jnp.float32, P(axis.EXPERT)),
        arg((e,), jnp.float32, P()),
    )

    def step(x, logits, w1, w2, s1, s2, bias):
        for _ in range(a.layers):
            y = fm.fused_moe_func(
                x, w1, w2, s1, s2, None, None, logits, topk=a.topk, renormalize=True, mesh=mesh, use_ep=True,
                activation="silu", scoring_fn="sigmoid", expert_score_correction_bias=bias, scatter_results=True,
            )  # fmt: skip
            x = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(axis.ATTN_DATA, None))) + x
        return x

    t0 = time.time()
    with jax.set_mesh(mesh):
        m = jax.jit(step).lower(*args).compile().memory_analysis()
    print_record(
        a,
        devs,
        ("tokens", "hidden", "inter", "experts", "topk", "block", "layers"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "code_bytes"),
    )


if __name__ == "__main__":
    main()
