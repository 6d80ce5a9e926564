"""Compile tpu-inference's own MoE layer on its GMM_TP backend (the path vLLM's model code takes without
--enable-expert-parallel: layers/vllm/interface/moe.py select_moe_backend_from_fused_moe_config logs "[MoE]: Using GMM
TP kernel" when FusedMoEConfig.use_ep is False) deviceless for a TPU topology and print XLA's memory analysis a device,
as JSON. Run by hand (a point takes ~1-3 min on a 2-core machine); not a test. Needs libtpu (pip install -e ".[tpu]")
and the engine's source at the commit read, e.g. main of 2026-04-30 (56b1e079), the code Jacob Platin's Kimi-K2.6
lm_eval runs logged (nohup.out @0998d381: its moe_weights.py:193 / moe.py:56 lines are that commit's):

    git --git-dir=<mirror of vllm-project/tpu-inference> archive 56b1e079 tpu_inference | tar x -C /tmp/ti
    python3 benchmarks/tpu_inference_moe_tp_compile.py --src /tmp/ti --tokens 8192 --experts 384

It calls tpu_inference/layers/common/fused_moe_gmm.py fused_moe_func as layers/common/moe.py moe_apply does for
GMM_TP (use_ep False, sigmoid scoring, renormalized top-k, the SC_KERNEL_* defaults of envs.py), on the
NEW_MODEL_DESIGN mesh with every device on attn_dp (tensor_parallelism 8 with enable_dp_attention and MLA): the tokens
arrive split over ATTN_DATA, the experts' width over MLP_TENSOR (fused_moe_gmm.py tensor_parallel_gmm's in_specs).
The weights are as that commit's VllmCompressedTensorsW4A8MoEMethod.process_weights_after_loading leaves Kimi-K2.6's
int4 group-32 experts: int4 codes ((w - 8).astype(jnp.int4)) with their group-32 scales cast to float32
(process_weights/moe_weights.py process_moe_weights: w13 scale [E, hidden / 32, 1, 2 x inter], w2 scale
[E, inter / 32, 1, hidden]), MOE_REQUANTIZE_* unset. --tokens is the step's global token bucket (tpu_runner.py
_init_inputs: the largest is max_num_batched_tokens x the DP size). Only the engine's vllm / torch imports (its logger,
tpu_inference.utils) are stubbed; the MoE code is its own.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpu_inference_harness import deviceless_tpu_info, mesh_over, moe_parser, print_record, stub_package  # noqa: E402


def main() -> None:
    p = moe_parser(__doc__)
    p.add_argument("--group", type=int, default=32, help="the checkpoint's int4 scale group")
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
    envs = importlib.import_module("tpu_inference.envs")
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    t, h, i, e, g = a.tokens, a.hidden, a.inter, a.experts, a.group
    tp = axis.MLP_TENSOR
    # moe_weights.py _get_moe_weight_shardings GMM_TP (w2's scale split on its blocks: more than one)
    args = (
        arg((t, h), jnp.bfloat16, P(axis.ATTN_DATA, None)),  # the hidden states, split by attention DP
        arg((t, e), jnp.float32, P(axis.ATTN_DATA, None)),  # the router logits
        arg((e, h, 2 * i), jnp.int4, P(None, None, tp)),
        arg((e, i, h), jnp.int4, P(None, tp, None)),
        arg((e, h // g, 1, 2 * i), jnp.float32, P(None, None, None, tp)),
        arg((e, i // g, 1, h), jnp.float32, P(None, tp, None, None)),
    )

    def step(x, logits, w1, w2, s1, s2):
        for _ in range(a.layers):
            y = fm.fused_moe_func(
                x, w1, w2, s1, s2, None, None, logits, topk=a.topk, renormalize=True, mesh=mesh, use_ep=False,
                activation="silu", scoring_fn="sigmoid", sc_kernel_threshold=envs.SC_KERNEL_THRESHOLD,
                sc_kernel_col_chunk_size=envs.SC_KERNEL_COL_CHUNK_SIZE,
            )  # fmt: skip
            x = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(axis.ATTN_DATA, None))) + x
        return x

    t0 = time.time()
    with jax.set_mesh(mesh):
        m = jax.jit(step).lower(*args).compile().memory_analysis()
    print_record(
        a,
        devs,
        ("tokens", "hidden", "inter", "experts", "topk", "group", "layers"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "code_bytes"),
    )


if __name__ == "__main__":
    main()
