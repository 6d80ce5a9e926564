"""Fixed costs of a decode step that no roofline sees, measured on whatever JAX device is present
(issue 38 item 2: "the lent TPU can profile a scaled step"). Writes one JSON to argv[1].

1. ``fusion_chain``: N dependent small fusions (x = tanh(x @ w_i), x [16, 256], w [256, 256] bf16),
   unrolled in one jitted program; the slope of time over N is the fixed cost of one dependent op
   (the chip's per-op issue/sync cost: no host involved, bytes and FLOPs negligible).
2. ``layer_scan``: a K3 decode layer at TP 32's per-device shard shapes, 16 padded rows (the nightly's
   decode bucket), scanned over L layers; time over L minus its bytes at the measured HBM rate is
   the fixed cost of one layer as XLA runs it.
3. ``host_sync``: one jitted step and its sampled token read back to the host, one after another
   (synchronous scheduling) against the same calls queued without reading back: the host's share.

Run on the lent TPU: ``python3 benchmarks/step_overheads_tpu.py $OUT/step_overheads.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np


def _time(fn, *args, reps: int = 15) -> float:
    out = fn(*args)
    jax.block_until_ready(out)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def fusion_chain() -> dict:
    key = jax.random.PRNGKey(0)
    out = {}
    for n in (32, 128, 512):
        ws = jax.random.normal(key, (n, 256, 256), jnp.bfloat16) * 0.05
        x = jnp.ones((16, 256), jnp.bfloat16)

        @jax.jit
        def chain(x, ws, n=n):
            for i in range(n):
                x = jnp.tanh(x @ ws[i])
            return x

        out[n] = _time(chain, x, ws)
    ns = sorted(out)
    slope = np.polyfit(ns, [out[k] for k in ns], 1)[0]
    return {"n_ops": ns, "seconds": [out[k] for k in ns], "s_per_dependent_op": float(slope)}


# K3 at TP 32, a device's shard of one layer (k3-facts §1-2): KDA projections 12288/32 = 384 wide,
# MLA q_b 18432/32 = 576, kv_b 24576/32 = 768, shared experts 6144/32 = 192, latent projections
# replicated (the engine's default, moe.py), one routed expert (3584 -> 3072 -> 3584).
H, P, L_ = 7168, 384, 3584


def _layer_weights(key, n):
    shapes = {
        "qkv": (n, H, 3 * P),
        "g": (n, H, P),
        "fa": (n, H, 128),
        "fb": (n, 128, P),
        "o": (n, P, H),
        "router": (n, H, 896),
        "down": (n, H, L_),
        "up": (n, L_, H),
        "sh13": (n, H, 2 * 192),
        "sh2": (n, 192, H),
        "e13": (n, L_, 2 * 3072),
        "e2": (n, 3072, L_),
    }
    ws = {k: (jax.random.normal(key, s, jnp.bfloat16) * 0.02) for k, s in shapes.items()}
    nbytes = sum(int(np.prod(s)) * 2 for s in shapes.values())
    return ws, nbytes


def _rms(x):
    return x * jax.lax.rsqrt(jnp.mean(x.astype(jnp.float32) ** 2, axis=-1, keepdims=True) + 1e-6).astype(x.dtype)


def _layer(carry, w):
    x, state = carry
    h = _rms(x)
    qkv = h @ w["qkv"]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    g = jax.nn.sigmoid(h @ w["g"])
    decay = jax.nn.sigmoid((h @ w["fa"]) @ w["fb"]).astype(jnp.float32)
    q = q.reshape(16, 3, 128).astype(jnp.float32)
    k = k.reshape(16, 3, 128).astype(jnp.float32)
    v = v.reshape(16, 3, 128).astype(jnp.float32)
    state = state * decay.reshape(16, 3, 128)[0][:, :, None] + jnp.einsum("hk,hv->hkv", k[0], v[0])
    o = jnp.einsum("thk,hkv->thv", q, state).reshape(16, P).astype(x.dtype) * g
    x = x + o @ w["o"]
    h = _rms(x)
    logits = (h @ w["router"]).astype(jnp.float32)
    _, idx = jax.lax.top_k(logits, 16)
    lat = _rms(h @ w["down"])
    e = lat @ w["e13"]
    a, b = jnp.split(e, 2, axis=-1)
    routed = (jax.nn.silu(a) * b) @ w["e2"]
    s = h @ w["sh13"]
    sa, sb = jnp.split(s, 2, axis=-1)
    x = x + routed @ w["up"] + (jax.nn.silu(sa) * sb) @ w["sh2"] + idx[:, :1].astype(x.dtype) * 0
    return (x, state), None


def layer_scan() -> dict:
    key = jax.random.PRNGKey(1)
    rows = []
    for n in (4, 8, 16):
        ws, nbytes = _layer_weights(key, n)
        x = jnp.ones((16, H), jnp.bfloat16)
        st = jnp.zeros((3, 128, 128), jnp.float32)

        @jax.jit
        def step(x, st, ws):
            (x, st), _ = jax.lax.scan(_layer, (x, st), ws)
            return x, st

        rows.append({"layers": n, "seconds": _time(step, x, st, ws), "weight_bytes": nbytes})
        del ws
    # the HBM rate of this chip on a large streaming read (a reduce over 1 GiB)
    big = jnp.ones((256, 1024, 1024), jnp.float32)
    red = jax.jit(lambda a: jnp.sum(a))
    t = _time(red, big)
    bw = big.size * 4 / t
    per_layer_bytes = rows[0]["weight_bytes"] / rows[0]["layers"]
    ls = [r["layers"] for r in rows]
    slope = float(np.polyfit(ls, [r["seconds"] for r in rows], 1)[0])
    return {
        "rows": rows,
        "hbm_bytes_per_s_measured": bw,
        "bytes_per_layer": per_layer_bytes,
        "s_per_layer": slope,
        "s_per_layer_bytes_at_measured_bw": per_layer_bytes / bw,
        "s_per_layer_fixed": slope - per_layer_bytes / bw,
    }


def host_sync() -> dict:
    w = jnp.ones((256, 256), jnp.bfloat16)

    @jax.jit
    def step(x, w):
        y = jnp.tanh(x @ w)
        return y, jnp.argmax(y[0])

    x = jnp.ones((16, 256), jnp.bfloat16)
    jax.block_until_ready(step(x, w))
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        x, tok = step(x, w)
        int(np.asarray(tok))  # the sampled token to the host before the next step (sync scheduling)
    sync = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        x, tok = step(x, w)
    jax.block_until_ready(x)
    queued = (time.perf_counter() - t0) / n
    return {"s_per_step_sync": sync, "s_per_step_queued": queued, "s_host_round_trip": sync - queued}


def main() -> None:
    res = {
        "device_kind": jax.devices()[0].device_kind,
        "jax_version": jax.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fusion_chain": fusion_chain(),
        "host_sync": host_sync(),
        "layer_scan": layer_scan(),
    }
    text = json.dumps(res, indent=1)
    print(text)
    with open(sys.argv[1], "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
