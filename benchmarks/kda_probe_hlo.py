"""Issue 50: the optimized HLO of ``probe kda --impl validate``'s program (k3plan/probes/kda/probe.py
``validate_chunked``: validate's gdr_chunked on f32 [1, tokens, 96, 128] q, k, v, g and [1, tokens, 96] beta, chunk 64),
compiled deviceless for the v5e with the installed libtpu: what the ``kda.chunked_scan`` curve's time runs, against
which step/graph.py counts the KDA preparation passes of validate's step (module doc ``KDA preparation``). No chip:

    ALLOW_MULTIPLE_LIBTPU_LOAD=1 python3 benchmarks/kda_probe_hlo.py OUT.hlo.txt [--tokens 1024]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEADS, HEAD_DIM, CHUNK = 96, 128, 64  # the K3-width KDA of the grid's scaled model


def main(argv: list[str]) -> int:
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    from k3plan.validate.layers import gdr_chunked

    out = Path(argv[0])
    tokens = int(argv[argv.index("--tokens") + 1]) if "--tokens" in argv else 1024
    dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    sh = SingleDeviceSharding(dev)
    scale = HEAD_DIM**-0.5

    def arg(*shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sh)

    def fn(q, k, v, g, beta):  # as the probe's validate_chunked
        b, _, h, d = q.shape
        return gdr_chunked(q * scale, k, v, g, beta, jnp.zeros((b, h, d, v.shape[-1]), jnp.float32), chunk=CHUNK)[0]

    qkvg = [arg(1, tokens, HEADS, HEAD_DIM) for _ in range(4)]
    compiled = jax.jit(fn).lower(*qkvg, arg(1, tokens, HEADS)).compile()
    out.write_text(compiled.as_text())
    print(f"{out}: {dev.device_kind}, jax {jax.__version__}, {tokens} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
