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
    }
