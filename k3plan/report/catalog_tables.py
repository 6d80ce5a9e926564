"""The terminal rendering of what k3plan knows before planning: the bundled models (`models`,
`models show`), the bundled hardware (`hardware list`) and a checkpoint's census (`census`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.tables import Column, build_table, figure
from k3plan.units import GiB, fmt_count, fmt_gib

if TYPE_CHECKING:
    from rich.console import Console

    from k3plan.hardware.spec import HardwareSpec
    from k3plan.models.census_result import CensusResult
    from k3plan.models.summary import ModelShow, ModelSummary


def render_models(rows: list[ModelSummary], console: Console) -> None:
    columns = [
        Column("name", overflow="fold"),  # fold, never truncate, the name: it is what `models show` takes
        Column("family"),
        *(figure(c) for c in ("layers", "total params", "active / token", "checkpoint")),
    ]
    cells = [
        (
            r.name,
            r.family,
            str(r.layers.total),
            fmt_count(r.total_params),
            fmt_count(r.active_params),
            fmt_gib(r.checkpoint_bytes),
        )
        for r in rows
    ]
    console.print(build_table(columns, cells, title="Bundled models"))


def render_model_show(r: ModelShow, console: Console) -> None:
    console.print(
        f"[bold]{r.name}[/]  family {r.family} ({r.architecture}), "
        f"{r.layers.total} layers: {r.layers.kda} KDA, {r.layers.mla} MLA, {r.layers.moe} MoE"
    )
    console.print(f"  total parameters   {r.total_params:>22,}  ({fmt_count(r.total_params)}, text model)")
    console.print(f"  active per token   {r.active_params:>22,}  ({fmt_count(r.active_params)})")
    if r.vision_params:
        console.print(f"  vision (separate)  {r.vision_params:>22,}")
    if r.mtp_params:
        console.print(f"  MTP (separate)     {r.mtp_params:>22,}")
    engram = next((g for g in r.breakdown if g.group == "engram"), None)  # DeepSeek-V4.1's n-gram memory
    if engram is not None:
        console.print(
            f"  Engram (separate)  {engram.params:>22,}  ({fmt_count(engram.params)}, n-gram memory, "
            f"{fmt_gib(engram.bytes)})"
        )
    console.print(f"  checkpoint bytes   {r.checkpoint_bytes:>22,}  ({fmt_gib(r.checkpoint_bytes)})")
    columns = [Column(r.breakdown_by), *(figure(c) for c in ("tensors", "params", "active / token", "bytes (GiB)"))]
    rows = [
        (g.group, f"{g.tensors:,}", f"{g.params:,}", f"{round(g.active_params):,}", f"{g.bytes / GiB:,.3f}")
        for g in sorted(r.breakdown, key=lambda g: -g.params)
    ]
    console.print(build_table(columns, rows, title=f"by {r.breakdown_by}"))
    for note in r.notes:
        console.print(f"[yellow]note:[/] {note}")


def render_hardware_list(specs: list[HardwareSpec], console: Console) -> None:
    """One line an accelerator, compact: it fits an 80-column terminal."""
    headers = ("name", "kind", "dev", "HBM", "usable", "TB/s", "bf16", "scale-up")
    rows = [
        (
            h.name,
            h.kind,
            str(h.devices_per_chip),
            f"{h.hbm_bytes_per_device / GiB:.1f}",
            f"{h.usable_bytes_per_device / GiB:.2f}".rstrip("0").rstrip("."),
            f"{h.hbm_bw_bytes_per_s_per_device / 1e12:.2f}",
            f"{h.flops_per_s_per_device('bf16') / 1e12:g}",
            f"{h.scale_up.name} {h.scale_up.bw_bytes_per_s / 1e9:.0f} x{h.scale_up.domain_chips}",
        )
        for h in specs
    ]
    columns = [
        Column(
            col,
            "left" if col in ("name", "kind", "scale-up") else "right",
            no_wrap=True,
            min_width=max(len(col), *(len(r[i]) for r in rows)),
        )
        for i, col in enumerate(headers)
    ]
    title = (
        "Bundled hardware: dev = JAX devices a chip; per device: HBM and usable HBM in GiB, "
        "HBM TB/s, bf16 dense TFLOP/s; scale-up: link, GB/s one-way a chip x domain chips"
    )
    console.print(build_table(columns, rows, title=title, compact=True))


def render_census(r: CensusResult, console: Console) -> None:
    columns = [Column("dtype"), figure("tensors"), figure("bytes"), figure("GiB")]
    rows = [
        (row.dtype, f"{row.tensors:,}", f"{row.bytes:,}", f"{row.bytes / GiB:,.3f}")
        for row in sorted(r.by_dtype, key=lambda e: e.dtype)
    ]
    title = f"{r.path}: {r.files} file(s), {r.tensors:,} tensors, {fmt_gib(r.bytes, 3)}"
    console.print(build_table(columns, rows, title=title))
    comp = r.comparison
    if comp is None:
        return
    verdict = "[green]matches the inventory[/]" if comp.ok else "[red]differs from the inventory[/]"
    console.print(f"{comp.matched:,} of {comp.expected_tensors:,} expected tensors found: {verdict}")
    for key, count, names in (("missing", comp.missing_count, comp.missing), ("extra", comp.extra_count, comp.extra)):
        if count:
            console.print(f"  {key}: {count:,}, e.g. " + ", ".join(names[:5]))
    mismatches: tuple[tuple[str, list], ...] = (
        ("shape_mismatch", comp.shape_mismatch),
        ("dtype_mismatch", comp.dtype_mismatch),
    )
    for key, mismatched in mismatches:
        for row in mismatched[:10]:
            console.print(f"  {key.replace('_', ' ')}: {row.name} expected {row.expected} found {row.found}")
