"""`k3plan hardware`: list the bundled accelerators; `hardware show`: every figure with its source."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from k3plan.cli.common import JsonOpt, console, print_json
from k3plan.units import counted

app = typer.Typer(
    help="""List the bundled accelerators, or show one with every figure's source.

\b
Examples:
  k3plan hardware                                the bundled accelerators
  k3plan hardware list --json
  k3plan hardware show tpu-v7x --topology 2x2x4  v7x figures, and what 2x2x4 means in chips/devices/hosts
  k3plan hardware show ./my-gpu.yaml --json      a spec file of your own (same keys as hardware_specs/*.yaml)
""",
    invoke_without_command=True,
    no_args_is_help=False,
)

TopologyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--topology",
        "-t",
        help="TPU chip grid '2x2x4' / '4x4' (N*AxBxC = N slices over DCN), or GPUs '8' / hosts x GPUs '2x8'.",
    ),
]


def _do_list(json_out: bool) -> None:
    from k3plan.hardware import list_hardware, load_hardware

    specs = [load_hardware(n) for n in list_hardware()]
    if json_out:
        from k3plan.hardware.summary import hardware_summary

        print_json([hardware_summary(h) for h in specs])
        return
    from k3plan.report.catalog_tables import render_hardware_list

    render_hardware_list(specs, console)


@app.callback()
def _default(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the bundled accelerators (same as `hardware list`)."""
    if ctx.invoked_subcommand is None:
        _do_list(json_out)


@app.command("list")
def list_(json_out: JsonOpt = False) -> None:
    """Name, kind, devices a chip, HBM and usable HBM (GiB), HBM TB/s, bf16 TFLOP/s a device, scale-up.

    \b
    Examples:
      k3plan hardware list
      k3plan hardware list --json
    """
    _do_list(json_out)


@app.command("show")
def show(
    hardware: Annotated[str, typer.Argument(help="Bundled name (see `hardware list`) or a YAML path.")] = "tpu-v7x",
    topology: TopologyOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Every figure of one accelerator with its source; with --topology, chips/devices/hosts/slices.

    \b
    Examples:
      k3plan hardware show tpu-v7x
      k3plan hardware show tpu-v7x --topology 2x2x4     16 chips, 32 devices, 4 hosts
      k3plan hardware show nvidia-h200 -t 2x8 --json    16 GPUs over 2 NVLink domains
    """
    from k3plan.hardware import load_hardware, parse_topology

    hw = load_hardware(hardware)
    topo = parse_topology(hw, topology) if topology is not None else None
    if json_out:
        from k3plan.hardware.summary import hardware_show

        print_json(hardware_show(hw, topo))
        return
    _render(hw, topo)


def _resolved(hw) -> dict[str, str]:
    """field path -> the figure k3plan computes with, in the unit its name says."""
    from k3plan.units import GiB

    out = {
        "hbm_per_device": f"{hw.hbm_bytes_per_device:,} B = {hw.hbm_bytes_per_device / GiB:,.2f} GiB",
        "usable_hbm_per_device": f"{hw.usable_bytes_per_device:,} B = {hw.usable_bytes_per_device / GiB:,.2f} GiB",
        "hbm_bw_per_device": f"{hw.hbm_bw_bytes_per_s_per_device / 1e12:,.3f} TB/s",
    }
    for dtype, flops in hw.flops_table().items():
        out[f"flops_per_device.{dtype}"] = "unsupported" if flops is None else f"{flops / 1e12:,.1f} TFLOP/s"
    for name in ("scale_up", "scale_out"):
        link = getattr(hw, name)
        out[f"{name}.bw_per_chip"] = f"{link.bw_bytes_per_s / 1e9:,.2f} GB/s one-way ({link.name}, {link.kind})"
        out[f"{name}.latency"] = f"{link.latency_s * 1e6:,.2f} us"
    return out


def _sourced(hw, path: str):
    obj = hw.file
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _render(hw, topo) -> None:
    """One block a field: as written -> used, then its source, note and alternatives (not used)."""
    console.print(f"[bold]{hw.name}[/]  {hw.file.description}\n  file: {hw.path}")
    console.print("  figures are per JAX device; links one-way per chip\n")
    resolved = _resolved(hw)
    for path, source in hw.sources().items():
        item = _sourced(hw, path)
        if path == "topology":
            written = f"{item.form}: {', '.join(item.standard)}"
        elif path == "price":
            written = f"{item.usd_per_chip_hour} USD a chip-hour"
        else:
            written = (
                "no gain (bf16 rate)"
                if getattr(item, "no_gain", False)
                else "unsupported"
                if getattr(item, "unsupported", False)
                else str(item.value)
            )
        used = f"  ->  {resolved[path]}" if path in resolved else ""
        console.print(f"[bold]{path:<24}[/] {written}{used}")
        console.print(f"    [dim]source:[/] {source}")
        if getattr(item, "note", None):
            console.print(f"    [dim]note:[/] {item.note}")
        for alt in getattr(item, "alternatives", ()):
            console.print(
                f"    [dim]alternative, not used:[/] {alt.value}  {alt.source}" + (f" ({alt.note})" if alt.note else "")
            )
    for note in hw.file.notes:
        console.print(f"[yellow]note:[/] {note}")
    if topo is not None:
        console.print(
            f"[bold]topology {topo.text}[/]: {counted(topo.chips, 'chip')}, {counted(topo.devices, 'device')}, "
            f"{counted(topo.hosts, 'host')}, {counted(topo.slices, 'slice')} of {counted(topo.chips_per_slice, 'chip')}"
            f" / {counted(topo.devices_per_slice, 'device')}; dims {'x'.join(map(str, topo.dims))}; "
            f"wraparound {'yes' if topo.wraparound else 'no'}; "
            f"{'within one scale-up domain' if topo.within_scale_up_domain else 'spans scale-up domains'}"
        )
