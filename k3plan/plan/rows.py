"""One ranked configuration as a plain dict (table row and JSON), with fit's per-device terms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from k3plan.plan.space import Space
from k3plan.step.decode import BINDING

GiB = 2**30
TEMP_EVIDENCE = ("analytic", "compiled", "measured")  # plan.evaluate.apply_evidence codes
PER_DEVICE = (
    "weights_bytes",
    "replicated_bytes",
    "kv_bytes",
    "state_bytes",
    "temp_bytes",
    "reserve_bytes",
    "free_bytes",
    "kv_bytes_per_token",
    "state_bytes_per_sequence",
    "sequences",
)


def layout_notes(*, space: Space, cols: dict[str, np.ndarray], i: int) -> list[str]:
    """Why a row crosses the scale-out network, in words: pipeline stages over hosts (the binding
    stage and the stage-to-stage sends) and an EP group wider than a scale-up domain (its
    collective over the scale-out link, bandwidth and latency from the hardware spec)."""
    hw = space.hardware[int(cols["hw"][i])]
    topo = space.topologies[int(cols["topo"][i])]
    st = space.stacks[int(cols["stack"][i])]
    pp, ep = int(cols["pp"][i]), int(cols["ep"][i])
    out = []
    if pp > 1 and st.pipeline is not None:
        link = hw.scale_out if topo.spans_slices else hw.scale_up
        a, b = int(cols["stage_first_layer"][i]), int(cols["stage_end_layer"][i])
        out.append(
            f"pp {pp}: each stage is {topo.devices // pp} devices ({topo.slices // pp} {hw.scale_up.name} domain(s)); "
            f"stage {int(cols['binding_stage'][i]) + 1}/{pp} binds (layers {a}-{b - 1}: "
            f"{int(cols['stage_mla_layers'][i])} MLA, {int(cols['stage_kda_layers'][i])} KDA; weights "
            f"{int(cols['weights_bytes'][i]) / GiB:.2f} GiB a device); {pp - 1} stage-to-stage send(s) a step over {link.name} "
            f"({link.bw_bytes_per_s / 1e9:g} GB/s a GPU, {link.latency_s * 1e6:g} us: "
            f"{float(cols['pipeline_s'][i]) * 1e3:.3f} ms of the TPOT)"
        )
    if bool(cols["spans_slices"][i]):
        op = "all-to-all" if st.collectives.experts == "all_to_all" else "all-reduce"
        out.append(
            f"cross-node EP: the EP group ({ep} devices) spans {topo.slices} {hw.scale_up.name} domains of "
            f"{topo.devices_per_slice}; the experts' {op} runs over {hw.scale_out.name} "
            f"({hw.scale_out.bw_bytes_per_s / 1e9:g} GB/s a GPU, {hw.scale_out.latency_s * 1e6:g} us a call, "
            f"{hw.name} spec)"
        )
    return out


def row(*, space: Space, cols: dict[str, np.ndarray], i: int, rank: int) -> dict[str, Any]:
    hw = space.hardware[int(cols["hw"][i])]
    topo = space.topologies[int(cols["topo"][i])]
    variant = space.variants[int(cols["variant"][i])]
    kv = space.kv_dtypes[int(cols["variant"][i]) % len(space.kv_dtypes)]
    cost = float(cols["cost_per_hour"][i])
    return {
        "rank": rank,
        "hardware": hw.name,
        "topology": topo.text,
        "chips": topo.chips,
        "devices": topo.devices,
        "tp": int(cols["tp"][i]),
        "ep": int(cols["ep"][i]),
        "dp": int(cols["dp"][i]),
        "pp": int(cols["pp"][i]),
        "stack": space.stacks[int(cols["stack"][i])].name,
        "kv_dtype": variant.kv_cache.dtype,
        "kv_dtype_override": kv,
        "chunk_tokens": int(cols["chunk"][i]),
        "free_gib_per_device": int(cols["free_bytes"][i]) / GiB,
        "weights_gib_per_device": int(cols["weights_bytes"][i]) / GiB,
        "max_sequences": int(cols["max_sequences"][i]),
        "tpot_ms": float(cols["tpot_s"][i]) * 1e3,
        "tokens_per_s_per_chip": float(cols["tokens_per_s_per_chip"][i]),
        "binding": BINDING[int(cols["binding"][i])],
        "cost_usd_per_hour": None if math.isnan(cost) else cost,
        "per_device": {k: int(cols[k][i]) for k in PER_DEVICE},
        "temp_evidence": TEMP_EVIDENCE[int(cols["temp_source"][i])],
        "layout_notes": layout_notes(space=space, cols=cols, i=i),
    }
