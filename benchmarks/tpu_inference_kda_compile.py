"""Compile tpu-inference's own KDA sublayer (tpu_inference/layers/common/kda_attention.py kda_attention: the
projections, the ragged convs and the chunked recurrent scan under the attention-DP shard_map, the state written
back) deviceless for a TPU topology, N layers in one step with the state pools donated as the runner donates its
caches, and print XLA's memory analysis a device, as JSON. Run by hand (a point takes ~1-3 min on a 2-core machine);
not a test. Needs libtpu (pip install -e ".[tpu]") and the engine's source at the commit read, e.g.

    git --git-dir=<mirror of vllm-project/tpu-inference> archive 811f8e20 tpu_inference | tar x -C /tmp/ti
    python3 benchmarks/tpu_inference_kda_compile.py --src /tmp/ti --tokens 8192 --slots 520 --layers 20

The mesh is the NEW_MODEL_DESIGN one (data, attn_dp, attn_dp_expert, expert, model, dcp, pcp) with every device on
attn_dp_expert (sharding_strategy tensor_parallelism 1 x expert_parallelism N under enable_dp_attention): the tokens,
the ragged metadata and the state pools split over ATTN_DATA, the KDA parameters replicated (kimi_k3.py
KimiDeltaAttention). The default shapes are Kimi-Linear-48B's (hidden 2,304, 32 heads of 128, conv kernel 4, the
low-rank output gate, the softplus decay: kda_gate_lower_bound unset). --tokens is the step's global token bucket
(tpu_runner.py _init_inputs: the largest is max_num_batched_tokens x the DP size); --slots the state pool's global
slots (kv_cache_manager.py _maybe_set_compact_mamba_num_blocks_override: max_num_reqs + 1 rounded up to the
ATTN_DATA size); --reqs the requests a rank. Only the engine's logger, envs and tpu_inference.utils are stubbed; the
KDA code is its own. The figure to compare: the pools' bytes a device (printed as state_pool_bytes).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_inference_harness import mesh_of, mesh_over, print_record, stub_package  # noqa: E402

_COND = """    new_recurrent, o = jax.lax.cond(is_decode_only, decode_branch,
                                    mixed_branch, None)
"""


def _select_branch(kda, branch: str) -> None:
    """Re-execute the module's source with the recurrent update's lax.cond replaced by one branch called at trace
    time: what 5b04eb356 ("KDA/conv: select the decode path per executable, not per lax.cond") does to
    _kda_ragged_core with its static decode_only_bucket, nothing else changed."""
    path = kda.__file__
    with open(path) as f:
        src = f.read()
    if src.count(_COND) != 1:
        raise SystemExit(f"{path}: the lax.cond over the recurrent branches is not the one read at 811f8e20")
    call = "decode_branch(None)" if branch == "decode" else "mixed_branch(None)"
    exec(compile(src.replace(_COND, f"    new_recurrent, o = {call}\n"), path, "exec"), kda.__dict__)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--target", default="tpu7x:2x2x1", help="a topology libtpu compiles for (default %(default)s)")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--slots", type=int, default=520)
    p.add_argument("--reqs", type=int, default=64, help="requests a rank (max_num_seqs)")
    p.add_argument("--hidden", type=int, default=2304)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--kernel", type=int, default=4)
    p.add_argument("--layers", type=int, default=1, help="KDA layers in a row, each with its own state pool")
    p.add_argument(
        "--no-conv",
        action="store_true",
        help="replace ragged_conv1d by the identity (its conv state returned as given): the recurrent scan alone, for "
        "a libtpu whose compile of the conv's gather runs out of VMEM (jax 0.10.2's, where the engine pins 0.11.0)",
    )
    p.add_argument(
        "--branch",
        choices=("cond", "mixed", "decode"),
        default="cond",
        help="cond: the recurrent update as read, a lax.cond over the decode / mixed branches with the pool an "
        "operand; mixed / decode: that one branch traced alone, as tpu-inference 5b04eb356 selects it per executable "
        "(its _kda_ragged_core hunk applied to the source read)",
    )
    p.add_argument(
        "--no-dp",
        metavar="MODEL",
        type=int,
        help="the mesh without DP attention: 'model' MODEL x 'expert' the rest (sharding_strategy tensor_parallelism x "
        "expert_parallelism, enable_dp_attention false), and the state pools split by heads over ATTN_HEAD as the "
        "runner allocates them (kv_cache_manager.py: conv P(ATTN_DATA, None, ATTN_HEAD), recurrent P(ATTN_DATA, "
        "ATTN_HEAD, None, None)); the KDA core's own specs are the source read's",
    )
    p.add_argument("--hlo", help="write the compiled HLO here (to find the pool-shaped copies)")
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

    devs, mesh = (
        mesh_of(a.target, {"model": a.no_dp, "expert": 0}) if a.no_dp else mesh_over(a.target, "attn_dp_expert")
    )
    kda = importlib.import_module("tpu_inference.layers.common.kda_attention")
    if a.branch != "cond":
        _select_branch(kda, a.branch)
    if a.no_conv:
        kda.ragged_conv1d = lambda x, conv_state, *_, **__: (x, conv_state)
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName
    n = len(devs)

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    t, d, h, k, w, s = a.tokens, a.hidden, a.heads, a.head_dim, a.kernel, a.slots
    hk = h * k
    rep = P()
    params = kda.KDAParams(
        q_proj=arg((hk, d), jnp.bfloat16, rep),
        k_proj=arg((hk, d), jnp.bfloat16, rep),
        v_proj=arg((hk, d), jnp.bfloat16, rep),
        q_conv_weight=arg((hk, 1, w), jnp.bfloat16, rep),
        k_conv_weight=arg((hk, 1, w), jnp.bfloat16, rep),
        v_conv_weight=arg((hk, 1, w), jnp.bfloat16, rep),
        A_log=arg((h,), jnp.float32, rep),
        dt_bias=arg((hk,), jnp.float32, rep),
        f_a_proj=arg((k, d), jnp.bfloat16, rep),
        f_b_proj=arg((hk, k), jnp.bfloat16, rep),
        b_proj=arg((h, d), jnp.bfloat16, rep),
        o_norm_weight=arg((k,), jnp.bfloat16, rep),
        o_proj=arg((d, hk), jnp.bfloat16, rep),
        g_a_proj=arg((k, d), jnp.bfloat16, rep),
        g_b_proj=arg((hk, k), jnp.bfloat16, rep),
    )
    data = axis.ATTN_DATA
    head = axis.ATTN_HEAD if a.no_dp else None
    state = kda.KDAState(
        conv_q=arg((s, w - 1, hk), jnp.bfloat16, P(data, None, head)),
        conv_k=arg((s, w - 1, hk), jnp.bfloat16, P(data, None, head)),
        conv_v=arg((s, w - 1, hk), jnp.bfloat16, P(data, None, head)),
        recurrent=arg((s, h, k, k), jnp.float32, P(data, head, None, None)),
    )
    ranks = 1 if a.no_dp else n  # the ATTN_DATA ranks: every device under DP attention, one without it
    meta = (
        arg((ranks * a.reqs,), jnp.int32, P(data)),  # state_indices
        arg((ranks * (a.reqs + 1),), jnp.int32, P(data)),  # query_start_loc, a rank's (reqs + 1) entries
        arg((ranks * 3,), jnp.int32, P(data)),  # distribution
        arg((ranks * a.reqs,), jnp.bool_, P(data)),  # has_initial_state
    )
    x = arg((t, d), jnp.bfloat16, P(data, None))

    out_shardings = None
    if a.no_dp:  # the runner's jit returns the new pools in the shardings it allocated (donated in place)
        out_shardings = ([jax.tree.map(lambda v: v.sharding, state)] * a.layers, NamedSharding(mesh, P(data, None)))

    def step(states, x, params, idx, qsl, dist, init):
        out = []
        for st in states:
            new, y = kda.kda_attention(
                x, params, st, idx, qsl, dist, init, num_heads=h, head_dim=k, kernel_size=w, mesh=mesh
            )
            x = (x + y).astype(x.dtype)
            out.append(new)
        return out, x

    states = [state] * a.layers
    t0 = time.time()
    with jax.set_mesh(mesh):
        jitted = jax.jit(step, donate_argnums=(0,), out_shardings=out_shardings)
        compiled = jitted.lower(states, x, params, *meta).compile()
    m = compiled.memory_analysis()
    if a.hlo:
        with open(a.hlo, "w") as f:
            f.write(compiled.as_text())
    pool = sum(
        int(np.prod(v.shape)) * jnp.dtype(v.dtype).itemsize // n for st in states for v in st
    )  # the pools' bytes a device
    print_record(
        a,
        devs,
        ("tokens", "slots", "reqs", "hidden", "heads", "layers", "no_conv", "branch", "no_dp"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "alias_bytes"),
        state_pool_bytes=pool,
    )


if __name__ == "__main__":
    main()
