"""vllm-project/tpu-inference's DeepSeek-V4 compress_norm_rope_store kernel compiled deviceless for a TPU topology at a
state block table's size, to see whether Mosaic fits its scalar-prefetched operands in SMEM
(k3plan/engines/tpu_inference/dsv4_smem.py). ``--src`` holds tpu_inference/kernels/experimental/deepseek_v4/
compress_and_store at the commit read (``git archive <commit> tpu_inference/kernels/experimental/deepseek_v4/
compress_and_store``; the package is self-contained). One JSON line a point: compiled, or the compiler's error.

  python3 benchmarks/tpu_inference_dsv4_smem_compile.py --src /tmp/src_b8692ff0 --mode csa --pages 576 4608
  python3 benchmarks/tpu_inference_dsv4_smem_compile.py --src /tmp/src_8ead48e6 --mode hca-own --pages 4608 576

Modes, at the 1,024-token KV block the platform sets (config.py physical_page_size): csa (b8692ff0: the flattened
[rows x pages] table, block_table_stride, the CSA array's 256-row page and its rope array), hca-own (8ead48e6: the 2-D
[rows, pages] table, HCA's own 16-row page, no rope array)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

KERNEL = "tpu_inference.kernels.experimental.deepseek_v4.compress_and_store.kernel"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--commit", default="", help="the commit --src was taken at (recorded)")
    p.add_argument("--mode", choices=("csa", "hca-own"), required=True)
    p.add_argument("--pages", type=int, nargs="+", required=True, help="block table pages a request")
    p.add_argument("--rows", type=int, default=64, help="requests a DP rank (max_num_seqs)")
    p.add_argument("--tokens", type=int, default=64, help="the token bucket a DP rank")
    p.add_argument("--target", default="tpu7x:2x2x1")
    a = p.parse_args()

    import jax
    import jax.numpy as jnp
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental import topologies
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import SingleDeviceSharding

    devs = topologies.get_topology_desc(platform="tpu", topology_name=a.target).devices
    info = tpu_info.get_tpu_info_for_chip(tpu_info.chip_version_from_device_kind(devs[0].device_kind), 1)
    pltpu.get_tpu_info = lambda: info  # deviceless: the chip's table, not a live device's
    tpu_info.get_tpu_info = lambda: info
    sh = SingleDeviceSharding(devs[0])
    sys.path.insert(0, a.src)
    kernel = importlib.import_module(KERNEL)

    def shape(dims, dtype):
        return jax.ShapeDtypeStruct(dims, dtype, sharding=sh)

    n, pool = a.tokens, 4096
    i32, u8, f32 = jnp.int32, jnp.uint8, jnp.float32
    for pages in a.pages:
        if a.mode == "csa":

            def f(cache, pos, bt, t2r, kvs, w, rope, cs, pages=pages):
                return kernel.compress_norm_rope_store(
                    cache, pos, bt, t2r, kvs, w, block_table_stride=pages, rope_cache=rope, cos_sin_cache=cs,
                    compress_ratio=4, overlap=True, quant_block=64,
                )  # fmt: skip

            args = [shape((pool, 256, 4, 128), u8), shape((n,), i32), shape((a.rows * pages,), i32)]
            args += [shape((n,), i32), shape((n,), i32), shape((512,), f32), shape((pool, 64, 4, 128), u8)]
        else:

            def f(cache, pos, bt, t2r, kvs, w, cs):
                return kernel.compress_norm_rope_store(
                    cache, pos, bt, t2r, kvs, w, cos_sin_cache=cs, compress_ratio=128, overlap=False, quant_block=0
                )

            args = [shape((pool, 16, 4, 128), u8), shape((n,), i32), shape((a.rows, pages), i32)]
            args += [shape((n,), i32), shape((n,), i32), shape((512,), f32)]
        args.append(shape((9216, 64), f32))
        t0 = time.time()
        try:
            jax.jit(f).lower(*args).compile()
            outcome = "compiled"
        except Exception as e:  # the compiler's error is the record
            msg = str(e)
            at = max(msg.find("Allocation ("), msg.find("Ran out of memory"))
            outcome = msg[at : at + 300] if at >= 0 else msg[:300]
        record = {
            "target": a.target, "jax": jax.__version__, "commit": a.commit, "mode": a.mode, "rows": a.rows,
            "pages": pages, "table_bytes": a.rows * pages * 4, "tokens": n, "outcome": outcome,
            "seconds": round(time.time() - t0, 1),
        }  # fmt: skip
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
