"""The search space as columns: one entry per configuration, no object per configuration.

A configuration is (hardware, standard topology, pp, tp, ep, stack, KV dtype, prefill chunk), with
dp = devices / (pp x tp) and ep either the TP group (ep = tp) or every device of a stage, as
``sharding.mesh.make_mesh`` accepts, less the one a stack's engine does not run at DP > 1
(``Stack.dp_experts``: vLLM always spreads the experts over TP x DP, SGLang's DP replicas each hold
them over their own TP group). Pipeline stages are whole scale-up domains: pp divides the
topology's slices (hosts of an HGX box, NVL72 racks), so a stage's TP/EP collectives stay on
NVLink and only the stage-to-stage sends cross the scale-out network; pp > 1 only for stacks with
a pipeline rule (``Stack.pipeline``). Python loops run over hardware and topologies (~150), the
rest is numpy repeat/tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

import numpy as np

from k3plan.engines.flags import engine_offers_kv
from k3plan.engines.stack import Stack
from k3plan.errors import K3PlanError
from k3plan.hardware import HardwareSpec, Topology, topologies_up_to


@dataclass(frozen=True, slots=True, eq=False)  # eq: numpy fields have no truth value
class SpaceCols:
    """One entry a configuration of the search space (int64 unless said)."""

    hw: np.ndarray  # index into Space.hardware
    topo: np.ndarray  # index into Space.topologies
    pp: np.ndarray
    tp: np.ndarray
    ep_all: np.ndarray  # bool: experts over every device of a stage (else over the TP group)
    dp: np.ndarray
    stack: np.ndarray  # index into Space.stacks
    variant: np.ndarray  # index into Space.variants (stack x KV dtype)
    chunk: np.ndarray  # prefill chunk, tokens
    ep: np.ndarray
    family: np.ndarray  # (hardware, stack): hw x len(stacks) + stack

    @classmethod
    def empty(cls) -> SpaceCols:
        return cls(**{f.name: np.zeros(0, dtype=np.int64) for f in fields(cls)})


@dataclass(frozen=True)
class Space:
    hardware: list[HardwareSpec]
    stacks: list[Stack]  # each bound to a kind of machine (Stack.bindings); a family is (hardware, stack)
    kv_dtypes: list[Optional[str]]  # None: the stack's own
    variants: list[Stack]  # stack x KV dtype, index = stack * len(kv_dtypes) + kv
    topologies: list[Topology]
    cols: SpaceCols
    skipped: dict[int, str] = field(default_factory=dict)  # family -> why it has no configurations
    experts: int = 0  # the model's routed experts (a row names an uneven placement of them); 0: not said
    # the sharding plan of each (model, stack variant, devices, tp, ep, dp, pp) a row's setup was built with, resolved
    # once for this space (plan.expected.row_setup): the rows of one variant and split on several machines share it
    shardings: dict[tuple, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def size(self) -> int:
        return int(self.cols.tp.shape[0])

    def family(self, index: int) -> tuple[str, str]:
        return self.hardware[index // len(self.stacks)].name, self.stacks[index % len(self.stacks)].name


def splits(devices: int) -> tuple[np.ndarray, np.ndarray]:
    """(tp, ep_all) of every valid split of ``devices``: tp | devices, ep in {tp, devices}."""
    d = np.arange(1, devices + 1, dtype=np.int64)
    tp = d[devices % d == 0]
    inner = tp[tp < devices]  # ep = tp differs from ep = devices only while dp > 1
    return np.concatenate([tp, inner]), np.concatenate([np.ones(tp.shape, bool), np.zeros(inner.shape, bool)])


MAX_PP = 8  # the largest pipeline searched: K3's 93 layers at pp 8 are 11-12 a stage


def pipeline_splits(topo: Topology, max_pp: int = MAX_PP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pp, tp, ep_all) of every split of a topology: pp | slices (a stage is whole scale-up
    domains), pp <= ``max_pp``, then ``splits`` of a stage's devices."""
    out = []
    for pp in (p for p in range(1, min(topo.slices, max_pp) + 1) if topo.slices % p == 0):
        tp, ep_all = splits(topo.devices // pp)
        out.append((np.full(tp.shape, pp, dtype=np.int64), tp, ep_all))
    return tuple(np.concatenate(x) for x in zip(*out))  # type: ignore[return-value]


def _unbound(stack: Stack, hw: HardwareSpec) -> str:
    """Why a stack that runs on ``hw`` has no binding there: an option given that only another kind's engine has
    (``Stack.bind`` says which)."""
    try:
        stack.bind(hw)
    except K3PlanError as err:
        return str(err)
    return f"stack {stack.label}: no binding for {hw.name}"


def build_space(
    *,
    hardware: list[HardwareSpec],
    stacks: list[Stack],
    kv_dtypes: list[Optional[str]],
    chunks: list[int],
    max_chips: int,
    stacks_given: bool,
    any_platform: bool = False,
    max_pp: int = MAX_PP,
    experts: int = 0,
    expert_width: int = 0,
) -> Space:
    """``any_platform``: keep a stack on hardware of another kind (an explicit --stack in fit);
    ``max_pp``: the largest pipeline searched (1: none); ``experts``: the model's routed experts;
    ``expert_width``: their FFN width (a stack's ``splits`` rule reads it; 0: not said)."""
    if max_pp < 1:  # else no split at all, and the unpacking below failed with a traceback
        raise K3PlanError(f"--max-pp {max_pp}: expected a positive integer (1: no pipeline)")
    # a stack whose engine differs by kind of machine is one stack a kind, bound to it (Stack.bindings): its
    # rows price what that kind's engine runs (dp-attention: SGLang's pools on GPUs, tpu-inference's on TPUs)
    origin = [s for s in stacks for _ in s.bindings()]
    stacks = [b for s in stacks for b in s.bindings()]
    variants = [s.with_kv_dtype(k) for s in stacks for k in kv_dtypes]
    topologies: list[Topology] = []
    parts: list[dict[str, np.ndarray]] = []
    skipped: dict[int, str] = {}
    nk, nc = len(kv_dtypes), len(chunks)
    for h, hw in enumerate(hardware):
        allowed = [i for i, s in enumerate(stacks) if any_platform or s.runs_on(hw)]
        told = {origin[i].label for i in allowed}  # a stack one of whose bindings runs here is not skipped
        for i, s in enumerate(stacks):
            if i not in allowed and stacks_given and origin[i].label not in told:
                told.add(origin[i].label)
                o = origin[i]
                skipped[h * len(stacks) + i] = (
                    _unbound(o, hw)
                    if o.runs_on(hw)  # only an option given keeps it off (Stack.bindings)
                    else f"stack {o.name} runs on {', '.join(o.platforms) or o.platform}, not {hw.name}"
                )
        topos = topologies_up_to(hw, max_chips)
        if not topos:
            for i in allowed:
                skipped[h * len(stacks) + i] = (
                    f"no standard {hw.name} topology has at most {max_chips} chips "
                    f"(smallest: {hw.standard_topologies[0]})"
                )
            continue
        if not allowed:
            continue
        base_topo, base_pp, base_tp, base_all = [], [], [], []
        for topo in topos:
            pp, tp, ep_all = pipeline_splits(topo, max_pp)
            base_topo.append(np.full(tp.shape, len(topologies)))
            base_pp.append(pp)
            base_tp.append(tp)
            base_all.append(ep_all)
            topologies.append(topo)
        topo_i, pp, tp, ep_all = (np.concatenate(x) for x in (base_topo, base_pp, base_tp, base_all))
        stack_i = np.repeat(np.array(allowed), nk * nc)
        kv_i = np.tile(np.repeat(np.arange(nk), nc), len(allowed))
        chunk = np.tile(np.array(chunks, dtype=np.int64), len(allowed) * nk)
        m = stack_i.shape[0]
        b = tp.shape[0]
        devices = np.array([t.devices for t in topologies])[topo_i]
        part = {
            "topo": np.repeat(topo_i, m),
            "pp": np.repeat(pp, m),
            "tp": np.repeat(tp, m),
            "ep_all": np.repeat(ep_all, m),
            "dp": np.repeat(devices // (pp * tp), m),
            "stack": np.tile(stack_i, b),
            "variant": np.tile(stack_i * nk + kv_i, b),
            "chunk": np.tile(chunk, b),
        }
        part["ep"] = np.where(part["ep_all"], part["tp"] * part["dp"], part["tp"])
        part["hw"] = np.full(b * m, h)
        part["family"] = h * len(stacks) + part["stack"]
        piped = np.array([s.pipeline is not None for s in stacks], dtype=bool)
        keep = (part["pp"] == 1) | piped[part["stack"]]  # no pipeline rule: pp 1 only
        # at DP > 1 an engine may run one of ep = tp x dp and ep = tp only (Stack.dp_experts; at TP 1 its tp1_over)
        over = np.array([s.dp_experts.over for s in stacks])[part["stack"]]
        tp1 = np.array([s.dp_experts.over_at(1) for s in stacks])[part["stack"]]
        over = np.where(part["tp"] == 1, tp1, over)
        keep &= (part["dp"] == 1) | (over == "either") | ((over == "tp_x_dp") == part["ep_all"])
        # a KV dtype the stack's engine does not take on this machine (tpu-inference has no fp8_ds_mla)
        kv_ok = np.array([engine_offers_kv(v.name, v.kv_cache.dtype, hw.kind) for v in variants], dtype=bool)
        keep &= kv_ok[part["variant"]]
        # the splits a stack's engine refuses (Stack.splits): fit names why, plan leaves them out
        for i, s in enumerate(stacks):
            if s.splits is not None:
                rows = np.flatnonzero(keep & (part["stack"] == i))
                bad = [
                    r
                    for r in rows
                    if s.splits.refusal(tp=int(part["tp"][r]), dp=int(part["dp"][r]), expert_width=expert_width)
                ]
                keep[bad] = False
        parts.append({k: v[keep] for k, v in part.items()})
    cols = SpaceCols(**{k: np.concatenate([p[k] for p in parts]) for k in parts[0]}) if parts else SpaceCols.empty()
    return Space(
        hardware=hardware,
        stacks=stacks,
        kv_dtypes=kv_dtypes,
        variants=variants,
        topologies=topologies,
        cols=cols,
        skipped=skipped,
        experts=experts,
    )
