"""Does an XLA:TPU executable's generated code count against HBM? Run on a real TPU (not deviceless), two checks,
printed as JSON lines:

1. residency: a jit of 120 matmul / sort / cumsum blocks is compiled and run once; the device's bytes_in_use before
   the compile and after the run (its output dropped) differ by what memory_analysis calls
   generated_code_size_in_bytes, or not.
2. the compile-time check: the largest f32[rows, 32768] argument whose sort (plus, with --blocks 120, the code of
   the blocks of 1.) still compiles, found by bisection over rows in steps of --step; at the last one that compiles,
   arguments + outputs + temporaries, with and without the generated code, against bytes_limit, and the message of
   the first that does not. A step adds 2 x step x 128 KiB (the argument and the sort's output): where the slack
   without the code would take one more step but the slack with it would not, the compile counts the code.

Run by hand on a TPU (about 3 minutes on a v5e); not a test:

    python3 benchmarks/tpu_compile_code_in_hbm.py
"""

from __future__ import annotations

import argparse
import gc
import json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step", type=int, default=16, help="the bisection's resolution in rows of 128 KiB")
    a = p.parse_args()
    import jax
    import jax.numpy as jnp

    d = jax.devices()[0]
    limit = d.memory_stats()["bytes_limit"]

    def in_use() -> int:
        return d.memory_stats()["bytes_in_use"]

    def blocks(x, ws):
        for w in ws:
            x = jnp.tanh(x @ w) * 1.0001 + jnp.sin(x)
            x = jax.lax.sort(x, dimension=-1) + jnp.cumsum(x, axis=-1)
        return x

    ws = [jnp.full((512, 512), 0.01 * (i + 1)) for i in range(120)]
    x = jnp.ones((512, 512))
    jax.block_until_ready((x, ws))
    before = in_use()
    c = jax.jit(blocks).lower(x, ws).compile()
    code = c.memory_analysis().generated_code_size_in_bytes
    compiled = in_use()
    jax.block_until_ready(c(x, ws))
    gc.collect()
    ran = in_use()
    print(json.dumps({"check": "residency", "device_kind": d.device_kind, "jax": jax.__version__,
                      "bytes_limit": limit, "code_bytes": code, "in_use_delta_after_compile": compiled - before,
                      "in_use_delta_after_run": ran - before}))  # fmt: skip
    del c, ws, x
    gc.collect()

    def f(arr, x, ws):
        return jnp.sort(arr * 2, axis=-1).sum(axis=-1), blocks(x, ws)

    for nw in (0, 120):
        ws = [jax.ShapeDtypeStruct((512, 512), jnp.float32)] * nw
        x = jax.ShapeDtypeStruct((512, 512), jnp.float32)
        lo, hi, best, msg = 1024, 131072, None, ""
        while hi - lo > a.step:
            r = (lo + hi) // 2
            try:
                m = jax.jit(f).lower(jax.ShapeDtypeStruct((r, 32768), jnp.float32), x, ws).compile().memory_analysis()
            except Exception as e:  # the compile-time OOM
                hi, msg = r, str(e)[:600]
                continue
            lo = r
            best = (r, m.argument_size_in_bytes, m.temp_size_in_bytes, m.output_size_in_bytes,
                    m.generated_code_size_in_bytes)  # fmt: skip
        assert best is not None
        r, arg, temp, out, code = best
        print(json.dumps({"check": "compile_time_oom", "blocks": nw, "rows_compiled": r, "rows_failed": hi,
                          "argument_bytes": arg, "temp_bytes": temp, "output_bytes": out, "code_bytes": code,
                          "bytes_limit": limit, "slack_without_code": limit - (arg + temp + out),
                          "slack_with_code": limit - (arg + temp + out + code),
                          "bytes_a_step": 2 * a.step * 32768 * 4, "first_failure": msg}))  # fmt: skip


if __name__ == "__main__":
    main()
