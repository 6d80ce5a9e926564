"""The capacity report's three plots: memory a device by term, chunk vs context, decode roofline.

matplotlib is imported only here (through plots._pyplot) and only when a report is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from k3plan.io_safe import save_figure
from k3plan.report.capacity_findings import Viable
from k3plan.report.capacity_model import PlatformReport
from k3plan.report.plots import _pyplot, legend_or_note
from k3plan.units import GiB, fmt_tokens, tokens_k, tokens_k_axis

TERM_COLORS = {
    "weights_bytes": ("weights", "#4c72b0"),
    "kv_bytes": ("KV cache", "#dd8452"),
    "state_bytes": ("KDA state", "#55a868"),
    "temp_bytes": ("temporaries", "#c44e52"),
    "reserve_bytes": ("engine reserve", "#8172b3"),
    "free_bytes": ("free", "#d9d9d9"),
}


NOTHING_FITS = "no platform holds the model at these contexts (see the report's tables)"


def plot_memory(reports: Sequence[PlatformReport], *, path: Path) -> None:
    """Stacked horizontal bars: GiB a device by term, one bar per platform and context."""
    plt = _pyplot()
    rows = [(r, row) for r in reports for row in r.rows]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) + 1.8))
    labels = []
    # a term too thin to see beside the widest bar says its largest value in the legend (issue 36: KDA state,
    # 0.02 GiB beside 277 GiB, was a legend entry with no visible bar)
    fitted = [v for _, row in rows if (v := Viable.of(row)) is not None]
    widest = max((sum(max(0, b) for _, b in v.terms.items()) for v in fitted), default=0)
    largest = {k: max((max(0, getattr(v.terms, k)) for v in fitted), default=0) for k in TERM_COLORS}
    for i, (r, row) in enumerate(rows):
        y = len(rows) - 1 - i
        v = Viable.of(row)
        if v is None:
            labels.append(f"{r.hardware} @ {fmt_tokens(row.context_tokens)} tokens")
            ax.text(0.5, y, "does not fit at any allowed size", va="center", fontsize=8, color="#a00000")
            continue
        labels.append(
            f"{r.hardware} {v.setup.topology} tp={v.setup.tp}{f' pp={v.setup.pp}' if v.setup.pp > 1 else ''} @ {fmt_tokens(row.context_tokens)} tokens"
        )
        left = 0.0
        for key, nbytes in v.terms.items():
            name, color = TERM_COLORS[key]
            gib = max(0, nbytes) / GiB
            ax.barh(
                y,
                gib,
                left=left,
                color=color,
                edgecolor="white",
                linewidth=0.5,
                label=(
                    (
                        f"{name} (at most {largest[key] / GiB:.2g} GiB: too thin to see)"
                        if largest[key] < 0.01 * widest
                        else name
                    )
                    if i == next(j for j, (_, rr) in enumerate(rows) if rr.fits)
                    else None
                ),
            )
            left += gib
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=8)
    ax.set_xlabel("GiB a device (usable HBM = bar length)")
    ax.set_title("Memory a device, by term (smallest viable topology, the requested concurrency)", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    legend_or_note(
        ax,
        NOTHING_FITS,
        fontsize=8,
        ncol=3,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.25 / max(1, len(rows))),
        frameon=False,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_curves(reports: Sequence[PlatformReport], *, path: Path) -> None:
    """Longest context vs prefill chunk, one line per platform (at its smallest viable topology)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in reports:
        ok = [p for p in r.curve if p.status in ("ok", "outside calibration")]
        if ok:
            ax.plot(
                [p.chunk_tokens for p in ok],
                [tokens_k(p.max_context_tokens) for p in ok],
                "o-",
                label=f"{r.hardware} ({r.curve_setup.split(',')[0]})",
            )
    ax.set_xscale("log", base=2)
    one_m = tokens_k(2**20)  # the 1M-token context, 2^20 = 1,048,576 tokens, at its true height on the K = 1,000 axis
    ax.axhline(one_m, color="grey", ls="--", lw=0.8)
    label = f"{fmt_tokens(2**20)} tokens (1M context)"
    ax.text(0.01, one_m, label, transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="grey")
    ax.set_xlabel("prefill chunk (tokens)")
    ax.set_ylabel(tokens_k_axis("longest context, one sequence"))
    ax.set_title("Prefill chunk vs the longest context the rest of the budget leaves", fontsize=10)
    ax.grid(True, alpha=0.3)
    legend_or_note(ax, NOTHING_FITS, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_roofline(reports: Sequence[PlatformReport], *, path: Path) -> None:
    """Per-device roofline (attained FLOP/s vs FLOP/byte) with decode steps at growing batch."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>"  # issue 36: two platforms' points at the same spot hid one another; shapes and sizes differ
    lo, hi = 0.5, 2000.0
    for i, r in enumerate(reports):
        color = colors[i % len(colors)]
        peak, bw = r.roof.flops_per_s, r.roof.hbm_bytes_per_s
        xs = [lo, peak / bw, hi]
        pts = r.roofline_points
        ax.plot(
            xs,
            [min(peak, bw * x) / 1e12 for x in xs],
            "-",
            color=color,
            lw=1.2,
            label=f"{r.hardware} roof (MFU-scaled peak, HBM)" + ("" if pts else "; no point: nothing fits"),
        )
        if pts:
            ax.plot(
                [p.intensity for p in pts],
                [p.flops_per_s / 1e12 for p in pts],
                markers[i % len(markers)],
                # issue 48: every figure says its source; these steps are the roofline's bound, never a measurement
                label=f"{r.hardware} decode steps (source: ceiling)",
                color=color,
                ms=7 - i % 3,
                markerfacecolor="none" if i % 2 else color,
                markeredgewidth=1.2,
            )
            last = pts[-1]
            ax.annotate(  # each platform's label on its own line under the point, so two never overprint
                f"B={last.batch} ({r.hardware})",
                (last.intensity, last.flops_per_s / 1e12),
                fontsize=7,
                color=color,
                xytext=(6, -10 - 9 * i),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte, a device)")
    ax.set_ylabel("TFLOP/s a device")
    ax.set_title(
        "Decode roofline: points are decode steps at batch 1, 2, 4, ... up to the most sequences that fit\n"
        "(attained = FLOPs / step time, collectives included; source: the ceiling, the roofline's bound)",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.25)
    legend_or_note(ax, NOTHING_FITS, fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
