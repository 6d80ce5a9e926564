"""Every per-configuration figure of the search, as columns.

Weights depend only on (stack, tp, dp, ep): they are computed once per unique mesh and stack (a
few hundred to ~1,700 meshes) and gathered; everything else is numpy over all configurations.
"""

from __future__ import annotations

import numpy as np

from k3plan.models import Model
from k3plan.plan.memory import cache_arrays, fit_arrays, temp_arrays
from k3plan.plan.space import Space
from k3plan.plan.speed import comm_arrays, decode_arrays
from k3plan.plan.weights import mesh_weights, tensor_classes
from k3plan.roofline.bounds import Efficiency


def hardware_columns(*, space: Space, eff: Efficiency) -> dict[str, np.ndarray]:
    """Per configuration: the hardware and topology figures the formulas need."""
    c = space.cols
    hws = space.hardware

    def per_hw(fn, dtype=float):
        return np.array([fn(h) for h in hws], dtype=dtype)[c["hw"]]

    topo = space.topologies
    out = {
        "usable": per_hw(lambda h: h.usable_bytes_per_device, np.int64),
        "hbm_bw": per_hw(lambda h: h.hbm_bw_bytes_per_s_per_device),
        "flops": per_hw(lambda h: h.flops_per_s_per_device(eff.compute_dtype)),
        "devices_per_chip": per_hw(lambda h: h.devices_per_chip, np.int64),
        "scale_up_bw": per_hw(lambda h: h.scale_up.bw_bytes_per_s),
        "scale_up_latency": per_hw(lambda h: h.scale_up.latency_s),
        "scale_out_bw": per_hw(lambda h: h.scale_out.bw_bytes_per_s),
        "scale_out_latency": per_hw(lambda h: h.scale_out.latency_s),
        "price": per_hw(lambda h: np.nan if h.price_usd_per_chip_hour is None else h.price_usd_per_chip_hour),
        "chips": np.array([t.chips for t in topo], dtype=np.int64)[c["topo"]],
    }
    per_slice = np.array([t.devices_per_slice for t in topo], dtype=np.int64)[c["topo"]]
    multi = np.array([t.spans_slices for t in topo], dtype=bool)[c["topo"]]
    out["spans_slices"] = multi & (c["ep"] > per_slice)  # roofline.comm.ep_spans_slices
    return out


def weight_columns(*, space: Space, model: Model) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(per-configuration weight figures, fallback kind -> bool per configuration)."""
    c = space.cols
    key = (c["tp"] * (c["dp"].max(initial=1) + 1) + c["dp"]) * 2 + c["ep_all"]
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    classes = tensor_classes(model.inventory)
    per_stack = [mesh_weights(classes=classes, stack=s, tp=c["tp"][first], dp=c["dp"][first],
                              ep_all=c["ep_all"][first]) for s in space.stacks]
    names = ("weights_bytes", "replicated_bytes", "fallbacks", "dense_bytes", "expert_bytes", "dense_params",
             "expert_params")
    out = {n: np.stack([getattr(w, n) for w in per_stack])[c["stack"], inverse] for n in names}
    kinds: dict[str, np.ndarray] = {}
    for i, w in enumerate(per_stack):
        for k, mask in w.fallback_kinds.items():
            hit = mask[inverse] & (c["stack"] == i)
            kinds[k] = kinds[k] | hit if k in kinds else hit
    return out, kinds


def evaluate(*, space: Space, model: Model, context: int, batch: int, eff: Efficiency) -> tuple[dict, dict]:
    """All columns for ``batch`` sequences at ``context`` tokens; (columns, fallback kinds)."""
    spec = model.spec
    c = space.cols
    expert_fmt = next((t.fmt for t in model.inventory.text if t.role == "expert"), "bf16")
    cols = dict(c)
    cols.update(hardware_columns(space=space, eff=eff))
    weights, kinds = weight_columns(space=space, model=model)
    cols.update(weights)
    cache = cache_arrays(spec=spec, variants=space.variants, v=c["variant"], tp=c["tp"])
    temp = temp_arrays(spec=spec, variants=space.variants, expert_fmt=expert_fmt, v=c["variant"], tp=c["tp"],
                       ep=c["ep"], dp=c["dp"], chunk=c["chunk"], context=context, batch=batch)
    cols.update(cache)
    cols.update(temp)
    cols["temp_bytes"] = np.maximum(temp["prefill_temp_bytes"], temp["decode_temp_bytes"])
    cols.update(fit_arrays(spec=spec, variants=space.variants, v=c["variant"], tp=c["tp"], dp=c["dp"],
                           usable=cols["usable"], weights=cols["weights_bytes"], temp=cols["temp_bytes"],
                           cache=cache, context=context, batch=batch))
    comm = comm_arrays(spec=spec, variants=space.variants, v=c["variant"], tp=c["tp"], dp=c["dp"], ep=c["ep"],
                       hw=cols, spans=cols["spans_slices"], tokens=batch)
    cols.update(comm)
    cols.update(decode_arrays(spec=spec, weights=cols, cache=cols, tp=c["tp"], dp=c["dp"], ep=c["ep"], hw=cols,
                              comm_s=comm["comm_s"], context=context, batch=batch, eff=eff))
    cols["tokens_per_s_per_chip"] = batch / cols["tpot_s"] / cols["chips"]
    cols["cost_per_hour"] = cols["price"] * cols["chips"]
    return cols, kinds
