"""What the deviceless compiles of vllm-project/tpu-inference's own code share (benchmarks/tpu_inference_*.py): the
package stubs that let its layers import without vLLM or torch, the NEW_MODEL_DESIGN mesh over a topology's devices,
and the one JSON record each prints (the point, XLA's memory analysis a device, the compile time)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import time
import types

# the NEW_MODEL_DESIGN mesh's axes (tpu_inference/layers/common/sharding.py), in order
MESH_AXES = ("data", "attn_dp", "attn_dp_expert", "expert", "model", "dcp", "pcp")
# XLA's CompiledMemoryStats fields a record may carry, by the record's key
ANALYSIS = {
    "temp_bytes": "temp_size_in_bytes",
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "code_bytes": "generated_code_size_in_bytes",
}


def stub(name: str, **attrs: object) -> None:
    """A module ``name`` holding ``attrs``, in place of one the engine imports that the compile does not need."""
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod


def stub_package(src: str) -> None:
    """tpu_inference from ``src`` (a folder holding tpu_inference/ at the commit read) with its logger, its
    tpu_inference.utils helper and its envs module, none of which pulls in vLLM or torch."""
    pkg = types.ModuleType("tpu_inference")
    pkg.__path__ = [os.path.join(src, "tpu_inference")]
    sys.modules["tpu_inference"] = pkg
    stub("tpu_inference.logger", init_logger=logging.getLogger)

    def get_mesh_shape_product(mesh, axes):  # tpu_inference/utils.py get_mesh_shape_product, as written there
        if axes is None:
            return 1
        product = 1
        for axis in [axes] if isinstance(axes, str) else axes:
            product *= mesh.shape.get(axis, 1)
        return product

    stub("tpu_inference.utils", get_mesh_shape_product=get_mesh_shape_product)
    spec = importlib.util.spec_from_file_location("tpu_inference.envs", os.path.join(src, "tpu_inference", "envs.py"))
    assert spec is not None and spec.loader is not None
    envs = importlib.util.module_from_spec(spec)
    sys.modules["tpu_inference.envs"] = envs
    spec.loader.exec_module(envs)


def mesh_over(target: str, axis: str):
    """(the topology's devices, the NEW_MODEL_DESIGN mesh with every device on ``axis``), for a topology libtpu
    compiles for without a TPU (e.g. 'tpu7x:2x2x1')."""
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh

    devs = topologies.get_topology_desc(platform="tpu", topology_name=target).devices
    shape = [len(devs) if name == axis else 1 for name in MESH_AXES]
    return devs, Mesh(np.array(devs).reshape(shape), MESH_AXES)


def mesh_of(target: str, sizes: dict[str, int]):
    """(the topology's devices, the NEW_MODEL_DESIGN mesh with the axes ``sizes`` names at those sizes, the others 1;
    one size 0 takes the devices the others leave): e.g. {'model': 8, 'expert': 0} on 'tpu7x:2x2x4' is the mesh
    sharding_strategy tensor_parallelism 8 x expert_parallelism 4 builds without DP attention."""
    import math

    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh

    devs = topologies.get_topology_desc(platform="tpu", topology_name=target).devices
    fixed = math.prod(v for v in sizes.values() if v)
    shape = [sizes.get(name, 1) or len(devs) // fixed for name in MESH_AXES]
    if math.prod(shape) != len(devs):
        raise SystemExit(f"mesh {dict(zip(MESH_AXES, shape))} does not cover the {len(devs)} devices of {target}")
    return devs, Mesh(np.array(devs).reshape(shape), MESH_AXES)


def moe_parser(doc: str):
    """The arguments the MoE compiles of fused_moe_func share (benchmarks/tpu_inference_moe_compile.py, its GMM_TP
    twin): the engine's source, the topology, the point's tokens and the model's MoE shape; each adds its own."""
    import argparse

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--target", default="tpu7x:2x2x1", help="a topology libtpu compiles for (default %(default)s)")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--inter", type=int, default=2048, help="moe_intermediate_size")
    p.add_argument("--experts", type=int, default=384)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--layers", type=int, default=1, help="MoE layers in a row (their temporaries are reused)")
    return p


def deviceless_tpu_info(devs) -> None:
    """The kernels ask pltpu for the default device's TPU (its SparseCore); deviceless, that is the target's, whose
    first device ``devs[0]`` names the chip: both lookups answer it."""
    import jax.experimental.pallas.tpu as pltpu
    from jax._src.pallas.mosaic import tpu_info

    info = tpu_info.get_tpu_info_for_chip(tpu_info.chip_version_from_device_kind(devs[0].device_kind), 1)
    pltpu.get_tpu_info = lambda: info
    tpu_info.get_tpu_info = lambda: info


def mla_attention_local(kern, tp, *, max_num_seqs: int, transpose_kv_cache: bool):
    """The per-shard body of tpu-inference's attention_interface.py mla_attention: the tuned block sizes for the
    batched-decode and mixed cases looked up by their TuningKey (``tp``: the kernel's tuned_params module), then
    ``kern``.mla_ragged_paged_attention; returns (the new cache, the output)."""

    def mla_local(q, q_rope, kk, k_rope, c, *md):
        def key(case):
            return tp.TuningKey(
                case=case, max_num_tokens=q.shape[1], actual_num_q_heads=q.shape[0], actual_lkv_dim=q.shape[2],
                actual_r_dim=q_rope.shape[2], kv_dtype=c.dtype.name, q_dtype=q.dtype.name,
                page_size_per_kv_packing=c.shape[1], kv_packing=c.shape[2], max_num_seqs=max_num_seqs,
                pages_per_seq=md[1].shape[0] // md[0].shape[0],
            )  # fmt: skip

        bd, mx = tp.get_tuned_params(key("batched_decode")), tp.get_tuned_params(key("mixed"))
        o, nc = kern.mla_ragged_paged_attention(
            q, q_rope, kk, k_rope, c, *md, sm_scale=1.0,
            num_kv_pages_per_block=(bd.num_kv_pages_per_block, mx.num_kv_pages_per_block, mx.num_kv_pages_per_block),
            num_queries_per_block=(bd.num_queries_per_block, mx.num_queries_per_block, mx.num_queries_per_block),
            decode_batch_size=bd.decode_batch_size, mixed_q_split=mx.q_split, transpose_kv_cache=transpose_kv_cache,
        )  # fmt: skip
        return nc, o

    return mla_local


def print_record(a, devs, point: tuple[str, ...], m, t0: float, fields: tuple[str, ...], **extra: object) -> None:
    """One JSON line: the topology and jax, the point (``point``: the argparse names), ``extra`` (the pools' or caches'
    bytes), XLA's memory analysis ``m`` (``fields``: keys of ANALYSIS, in order) and the seconds since ``t0``."""
    import jax

    record: dict[str, object] = {
        "target": a.target,
        "device_kind": devs[0].device_kind,
        "jax": jax.__version__,
        "point": {k: getattr(a, k) for k in point},
        **extra,
    }
    record.update({f: getattr(m, ANALYSIS[f]) for f in fields})
    record["compile_s"] = round(time.time() - t0, 1)
    print(json.dumps(record))
