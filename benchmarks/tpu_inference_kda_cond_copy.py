"""Compile the memory test tpu-inference 5b04eb356 added with its fix ("KDA/conv: select the decode path per executable,
not per lax.cond": tests/layers/common/test_kda_decode_only_bucket.py test_compiled_temporaries_stay_bounded_at_many_slots,
its shapes and its jit: kda_attention with the state donated, no mesh, 256 slots of 4 heads x 128 x 128 fp32, 64
one-token requests) deviceless for a TPU, against a source tree given, and print XLA's memory analysis as JSON next
to the test's bound (one state pool). The fix's message says that before it the recurrent pool crossed a lax.cond
and XLA "budgeted a pool-sized copy per KDA layer in HLO temporaries", and the test says "the old cond overhead alone
exceeded the bound asserted here"; this runs the same body on the pre-fix code (811f8e20, or 5b04eb356's parent) to
see that copy. Run by hand (~1 min a point); not a test. Needs libtpu (pip install -e ".[tpu]") and the sources:

    git --git-dir=<mirror> archive 811f8e20 tpu_inference | tar x -C /tmp/ti811
    python3 benchmarks/tpu_inference_kda_cond_copy.py --src /tmp/ti811                   # the lax.cond, as read
    python3 benchmarks/tpu_inference_kda_cond_copy.py --src /tmp/ti5b04 --decode-only-bucket 0   # the fix's variants

--layers N chains N sublayers in one jit, each with its own donated state (the per-layer question).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_inference_harness import stub_package  # noqa: E402

HID, H, K, W = 32, 4, 128, 4  # the test's module constants


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--target", default="tpu7x:2x2x1", help="a topology libtpu compiles for; device 0 is used")
    p.add_argument("--slots", type=int, default=256)
    p.add_argument("--reqs", type=int, default=64, help="requests, one token each (the test's num_reqs)")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument(
        "--decode-only-bucket",
        type=int,
        choices=(0, 1),
        help="the fix's static selector (a source that has it); omit for the pre-fix lax.cond",
    )
    a = p.parse_args()
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    stub_package(a.src)

    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    dev = topologies.get_topology_desc(platform="tpu", topology_name=a.target).devices[0]
    sh = SingleDeviceSharding(dev)
    kda = importlib.import_module("tpu_inference.layers.common.kda_attention")
    has_selector = "decode_only_bucket" in inspect.signature(kda.kda_attention).parameters
    if (a.decode_only_bucket is not None) != has_selector:
        raise SystemExit(f"{a.src}: decode_only_bucket {'in' if has_selector else 'not in'} kda_attention's signature")

    def arg(*shape, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sh)

    names = kda.KDAParams._fields
    shapes = {
        "q_proj": (H * K, HID),
        "k_proj": (H * K, HID),
        "v_proj": (H * K, HID),
        "q_conv_weight": (H * K, 1, W),
        "k_conv_weight": (H * K, 1, W),
        "v_conv_weight": (H * K, 1, W),
        "A_log": (H,),
        "dt_bias": (H * K,),
        "f_a_proj": (K, HID),
        "f_b_proj": (H * K, K),
        "b_proj": (H, HID),
        "o_norm_weight": (K,),
        "o_proj": (HID, H * K),
        "g_proj": (H * K, HID),
    }
    params = kda.KDAParams(**{n: arg(*shapes[n]) for n in names if n in shapes})
    s = a.slots
    state = kda.KDAState(
        conv_q=arg(s, W - 1, H * K), conv_k=arg(s, W - 1, H * K), conv_v=arg(s, W - 1, H * K), recurrent=arg(s, H, K, K)
    )
    r = a.reqs
    x = arg(r, HID)
    meta = (arg(r, dtype=jnp.int32), arg(r + 1, dtype=jnp.int32), arg(3, dtype=jnp.int32), arg(r, dtype=jnp.int32))
    extra = {} if a.decode_only_bucket is None else {"decode_only_bucket": bool(a.decode_only_bucket)}

    def step(states, x, params, sidx, qsl, dist, has_init):
        out = []
        for st in states:
            new, y = kda.kda_attention(
                x, params, st, sidx, qsl, dist, has_init, num_heads=H, head_dim=K, gate_lower_bound=-5.0, **extra
            )
            x = x + y
            out.append(new)
        return out, x

    t0 = time.time()
    compiled = jax.jit(step, donate_argnums=(0,)).lower([state] * a.layers, x, params, *meta).compile()
    m = compiled.memory_analysis()
    pool = s * H * K * K * 4  # the test's bound: one recurrent pool
    print(
        json.dumps(
            {
                "src": a.src,
                "target": a.target,
                "device_kind": dev.device_kind,
                "jax": jax.__version__,
                "point": {"slots": s, "reqs": r, "layers": a.layers, "decode_only_bucket": a.decode_only_bucket},
                "pool_bytes": pool,
                "temp_bytes": m.temp_size_in_bytes,
                "temp_under_one_pool": m.temp_size_in_bytes < pool,
                "argument_bytes": m.argument_size_in_bytes,
                "output_bytes": m.output_size_in_bytes,
                "alias_bytes": m.alias_size_in_bytes,
                "compile_s": round(time.time() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
