"""Pallas kernels proven for a TPU without one: lower and compile k3plan's Pallas probes through
Mosaic for a real TPU topology, deviceless (libtpu's compiler, as `validate --target` does), and
read back what the compiler made of them (issue 17 item 6).

    check_kernels(target="tpu7x:2x2x4", kernels=("hbm", "kda-decode")) -> MosaicCheck

For each kernel: the custom calls in the compiled HLO (a Mosaic kernel is a `tpu_custom_call`;
finding none means the Pallas path did not survive to the TPU program), the scoped VMEM the
kernel asked for and the compiler reports it used (from the custom call's backend_config), and
the compiled program's code/argument/output/temp bytes. Interpret mode on CPU proves arithmetic;
this proves the kernel lowers, fits VMEM and compiles for the target.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from k3plan.errors import K3PlanError
from k3plan.evidence.probe_record import Verification
from k3plan.structs import Frozen
from k3plan.validate.targets import libtpu_version, parse_target

KERNELS = ("hbm", "kda-decode")
TPU_CUSTOM_CALL = "tpu_custom_call"


class CustomCall(Frozen):
    target: str  # custom_call_target
    op_name: str | None  # from the HLO metadata
    scoped_memory_limit_bytes: int | None  # scoped_memory_configs: what the kernel may use
    scoped_memory_used_bytes: int | None  # used_scoped_memory_configs: what the compiler says it uses


class KernelCheck(Frozen):
    kernel: str
    shape: dict[str, Any]
    ok: bool  # at least one tpu_custom_call in the compiled HLO
    custom_calls: tuple[CustomCall, ...]
    generated_code_bytes: int | None
    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None
    compile_s: float
    detail: str

    def verification(self) -> Verification:
        """The check as a probe record's Verification entry."""
        found = {c.target: sum(1 for x in self.custom_calls if x.target == c.target) for c in self.custom_calls}
        return Verification(
            check="mosaic-compile", ok=self.ok, expected_op=TPU_CUSTOM_CALL, found_ops=found, detail=self.detail
        )


class MosaicCheck(Frozen):
    target: str
    device_kind: str
    device_count: int
    jax_version: str
    libtpu_version: str | None
    date: str
    kernels: tuple[KernelCheck, ...]
    label: str


def custom_calls(hlo_text: str) -> list[CustomCall]:
    """Every custom call of the compiled HLO text with what its backend_config says about VMEM."""
    out = []
    for line in hlo_text.splitlines():
        m = re.search(r'custom_call_target="([^"]+)"', line)
        if not m or "custom-call(" not in line:
            continue
        cfg = _backend_config(line)
        name = re.search(r'op_name="([^"]+)"', line)
        out.append(
            CustomCall(
                target=m.group(1),
                op_name=name.group(1) if name else None,
                scoped_memory_limit_bytes=_sum_sizes(cfg.get("scoped_memory_configs")),
                scoped_memory_used_bytes=_sum_sizes(cfg.get("used_scoped_memory_configs")),
            )
        )
    return out


def _backend_config(line: str) -> dict:
    start = line.find("backend_config={")
    if start < 0:
        return {}
    i = start + len("backend_config=")
    depth, in_str, esc = 0, False, False
    for j in range(i, len(line)):  # the JSON object, braces balanced outside strings
        ch = line[j]
        if in_str:
            esc, in_str = (not esc and ch == "\\"), (in_str if esc or ch != '"' else False)
            continue
        if ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                try:
                    return json.loads(line[i : j + 1])
                except ValueError:
                    return {}
    return {}


def _sum_sizes(configs) -> int | None:
    if not configs:
        return None
    return sum(int(c.get("size", 0)) for c in configs)


def _topology(name: str):
    from jax.experimental import topologies

    try:
        return topologies.get_topology_desc(platform="tpu", topology_name=name)
    except Exception as err:  # noqa: BLE001 -- the compiler's own verdict, any type
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if "lockfile" in first:
            raise K3PlanError(
                f"--target {name}: another process is using libtpu ({first}); wait for it, or set "
                "ALLOW_MULTIPLE_LIBTPU_LOAD=1 for a compile-only run"
            ) from None
        raise K3PlanError(f"--target {name}: the TPU compiler does not know this topology ({first})") from None


def _compile(
    kernel: str,
    *,
    device,
    hbm_rows: int,
    hbm_cols: int,
    block_rows: int,
    heads: int,
    head_dim: int,
    heads_per_block: int,
):
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    sh = SingleDeviceSharding(device)
    f32 = jnp.float32
    if kernel == "hbm":
        from k3plan.probes.hbm import pallas as hbm

        x = jax.ShapeDtypeStruct((hbm_rows, hbm_cols), f32, sharding=sh)
        shape = {"rows": hbm_rows, "cols": hbm_cols, "block_rows": block_rows, "dtype": "float32"}
        fn = lambda a: hbm.stream_copy(a, block_rows=block_rows, interpret=False)
        return shape, jax.jit(fn).lower(x).compile()
    if kernel == "kda-decode":
        from k3plan.probes.kda_decode import pallas as kda

        shapes = [
            (heads, head_dim, head_dim),
            (heads, head_dim),
            (heads, head_dim),
            (heads, head_dim),
            (heads, head_dim),
            (heads,),
        ]
        args = [jax.ShapeDtypeStruct(s, f32, sharding=sh) for s in shapes]
        shape = {"heads": heads, "head_dim": head_dim, "heads_per_block": heads_per_block, "state_dtype": "float32"}
        fn = lambda *a: kda.decode_step(*a, scale=head_dim**-0.5, heads_per_block=heads_per_block, interpret=False)
        return shape, jax.jit(fn).lower(*args).compile()
    raise K3PlanError(f"kernel {kernel!r}: expected one of {', '.join(KERNELS)}")


def check_kernels(
    *,
    target: str = "tpu7x:2x2x4",
    kernels: tuple[str, ...] = KERNELS,
    hbm_rows: int = 1024,
    hbm_cols: int = 512,
    block_rows: int = 256,
    heads: int = 16,
    head_dim: int = 128,
    heads_per_block: int = 8,
) -> MosaicCheck:
    """Compile each Pallas kernel natively (not interpret) for one device of `target`, deviceless."""
    import time

    import jax

    tgt = parse_target(target)
    if tgt.platform != "tpu":
        raise K3PlanError(f"--target {target}: a Mosaic check needs a TPU target such as tpu7x:2x2x4")
    lib = libtpu_version()
    if lib is None:
        raise K3PlanError(f"--target {target}: the Mosaic check compiles with libtpu, which is not installed")
    for k in kernels:
        if k not in KERNELS:
            raise K3PlanError(f"kernel {k!r}: expected one of {', '.join(KERNELS)}")
    topo = _topology(tgt.name)
    device = topo.devices[0]
    done = []
    for k in kernels:
        t0 = time.perf_counter()
        shape, compiled = _compile(
            k,
            device=device,
            hbm_rows=hbm_rows,
            hbm_cols=hbm_cols,
            block_rows=block_rows,
            heads=heads,
            head_dim=head_dim,
            heads_per_block=heads_per_block,
        )
        seconds = time.perf_counter() - t0
        calls = custom_calls(compiled.as_text())
        tpu = [c for c in calls if c.target == TPU_CUSTOM_CALL]
        mem = compiled.memory_analysis()
        used = [c.scoped_memory_used_bytes for c in tpu if c.scoped_memory_used_bytes is not None]
        detail = (
            f"{len(tpu)} {TPU_CUSTOM_CALL} in the compiled HLO"
            + (f"; scoped VMEM used {max(used):,} B" if used else "; no scoped-memory use reported")
            if tpu
            else f"no {TPU_CUSTOM_CALL} in the compiled HLO: the Pallas kernel did not reach the TPU program"
        )
        done.append(
            KernelCheck(
                kernel=k,
                shape=shape,
                ok=bool(tpu),
                custom_calls=tuple(calls),
                generated_code_bytes=getattr(mem, "generated_code_size_in_bytes", None),
                argument_bytes=getattr(mem, "argument_size_in_bytes", None),
                output_bytes=getattr(mem, "output_size_in_bytes", None),
                temp_bytes=getattr(mem, "temp_size_in_bytes", None),
                compile_s=round(seconds, 3),
                detail=detail,
            )
        )
    return MosaicCheck(
        target=tgt.name,
        device_kind=str(getattr(device, "device_kind", "?")),
        device_count=len(topo.devices),
        jax_version=jax.__version__,
        libtpu_version=lib,
        date=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        kernels=tuple(done),
        label=f"deviceless Mosaic compile for {tgt.name} (libtpu {lib}): compiled, not run",
    )
