"""The fit: every per-device term, the verdict, the capacity, and where each number came from."""

from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from k3plan.budget.cache import cache_layout, kv_bytes_per_token, kv_state_crossover_tokens, state_bytes_per_sequence
from k3plan.budget.calibration import Calibration, envelope
from k3plan.budget.temp import decode_temp, prefill_temp
from k3plan.errors import K3PlanError
from k3plan.setup import Setup

# vLLM V1's default max_num_batched_tokens for online serving: the prefill chunk when none is given.
DEFAULT_PREFILL_CHUNK_TOKENS = 8192
MAX_TOKENS = 1 << 30  # beyond a billion tokens a context or chunk is a typo, not a plan


class Workload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    context_tokens: int = 131072
    batch: int = 1
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS


def check_workload(*, context_tokens: int, batch: int, prefill_chunk_tokens: Optional[int]) -> Workload:
    for flag, v in (("--context", context_tokens), ("--batch", batch), ("--chunk", prefill_chunk_tokens)):
        if v is not None and v < 1:
            raise K3PlanError(f"{flag} {v}: expected a positive integer")
        if v is not None and v > MAX_TOKENS:
            raise K3PlanError(f"{flag} {v}: absurdly large; expected at most {MAX_TOKENS:,}")
    return Workload(context_tokens=context_tokens, batch=batch,
                    prefill_chunk_tokens=prefill_chunk_tokens or min(DEFAULT_PREFILL_CHUNK_TOKENS, context_tokens))


class FitResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: dict[str, Any]
    hardware: dict[str, Any]
    parallel: dict[str, int]
    stack: str
    workload: dict[str, int]
    model_state: dict[str, Any]
    per_device: dict[str, int]
    capacity: dict[str, Any]
    fits: bool
    weights_fit: bool
    replicated: list[dict[str, Any]]
    warnings: list[str]
    notes: list[str]
    provenance: dict[str, str]
    temp: dict[str, Any] = Field(default_factory=dict)
    weights_by_role: dict[str, int] = Field(default_factory=dict)
    cache_layout: dict[str, Any] = Field(default_factory=dict)
    speed: dict[str, Any] = Field(default_factory=dict)  # filled by the CLI: decode bound at this workload


def _temp(setup: Setup, w: Workload, cal: Optional[Calibration], warnings: list[str], expert_fmt: str):
    kw = dict(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel, expert_fmt=expert_fmt)
    pre = prefill_temp(chunk_tokens=w.prefill_chunk_tokens, context_tokens=w.context_tokens, **kw)
    dec = decode_temp(batch=w.batch, context_tokens=w.context_tokens, **kw)
    info = {"prefill_terms": pre.terms, "decode_terms": dec.terms, "prefill_bytes": pre.total, "decode_bytes": dec.total}
    analytic = ("analytic temp model (k3plan.budget.temp): live buffers of one layer, a lower bound; compiled "
                "graphs need more (reports/validation/README.md), pass --calibration for measured temp")
    source = {"prefill": analytic, "decode": analytic}
    if cal is not None:
        _check_calibration_matches(setup, cal, warnings)
        for stage, points, x in (
            ("prefill", [(p.tokens, p.temp_gib, p.fits) for p in cal.prefill], w.prefill_chunk_tokens),
            ("decode", [(p.context, p.temp_gib, p.fits) for p in cal.decode], w.context_tokens),
        ):
            if not points:
                continue
            env = envelope(points, x, what="chunk" if stage == "prefill" else "context")
            if env.status == "measured":
                info[f"{stage}_bytes"] = env.temp_bytes
                source[stage] = f"calibration {cal.path} ({cal.backend}, {env.detail})"
            elif env.status == "refused":
                info[f"{stage}_bytes"] = None
                info[f"{stage}_refused"] = env.detail
                source[stage] = f"calibration {cal.path}: refused"
                warnings.append(f"prefill chunk refused by calibration: {env.detail}" if stage == "prefill" else env.detail)
            else:
                measured_max = int(max(p[1] for p in points) * 2**30)
                info[f"{stage}_bytes"] = max(info[f"{stage}_bytes"], measured_max)
                info[f"{stage}_outside"] = env.detail
                source[stage] = f"max(analytic, largest measured) — {env.detail}; not extrapolated"
                warnings.append(f"{stage} temp: {env.detail}; using max(analytic, largest measured), not extrapolated")
    return info, source


def _check_calibration_matches(setup: Setup, cal: Calibration, warnings: list[str]) -> None:
    have = {"model": setup.model.name, "hardware": setup.hardware.name, "topology": setup.topology.text,
            "tp": setup.parallel.tp, "stack": setup.stack.name}
    want = {"model": cal.model, "hardware": cal.hardware, "topology": cal.topology, "tp": cal.tp, "stack": cal.stack}
    diff = [f"{k} {want[k]} (here {have[k]})" for k in have if str(have[k]) != str(want[k])]
    if diff:
        warnings.append(f"calibration {cal.path} was measured for a different configuration: " + ", ".join(diff))
    if cal.backend.lower() == "cpu":
        warnings.append(f"calibration {cal.path} comes from the CPU backend: its temp is not representative of {setup.hardware.kind.upper()}")


def fit(setup: Setup, workload: Workload, *, calibration: Optional[Calibration] = None) -> FitResult:
    spec, inv, hw, stack, par = setup.model.spec, setup.model.inventory, setup.hardware, setup.stack, setup.parallel
    warnings: list[str] = []
    wb = setup.weights
    layout = cache_layout(spec=spec, stack=stack, parallel=par)
    expert_fmt = next((t.fmt for t in inv.text if t.role == "expert"), "bf16")
    temp_info, temp_source = _temp(setup, workload, calibration, warnings, expert_fmt)
    refused = temp_info["prefill_bytes"] is None or temp_info["decode_bytes"] is None
    temp_bytes = max(v for v in (temp_info["prefill_bytes"], temp_info["decode_bytes"]) if v is not None) if not (
        temp_info["prefill_bytes"] is None and temp_info["decode_bytes"] is None) else 0
    temp_info["binding"] = "prefill" if (temp_info["prefill_bytes"] or 0) >= (temp_info["decode_bytes"] or 0) else "decode"

    usable = hw.usable_bytes_per_device
    reserve = int(stack.reserve.fraction_of_usable_hbm * usable)
    seqs = math.ceil(workload.batch / par.dp) if stack.kv_cache.split_across_dp else workload.batch
    kv = seqs * layout.kv_bytes(workload.context_tokens)
    state = seqs * layout.state_bytes_per_sequence
    used = wb.weights_bytes + kv + state + temp_bytes + reserve
    free = usable - used
    fixed = wb.weights_bytes + temp_bytes + reserve
    room = usable - fixed
    per_seq = layout.sequence_bytes(workload.context_tokens)
    max_seqs_group = max(0, int(room // per_seq)) if per_seq else 0
    max_sequences = max_seqs_group * (par.dp if stack.kv_cache.split_across_dp else 1)
    max_context = layout.max_context(room / seqs) if room > 0 else 0
    if refused:  # a graph the compiler could not fit serves nothing
        max_sequences = max_context = 0
    fits = free >= 0 and not refused
    if wb.fallbacks:
        warnings.append(f"{len(wb.fallbacks)} tensor dimension(s) fell back to replication "
                        f"(+{sum(f.bytes_replicated for f in wb.fallbacks) / 2**30:.2f} GiB a device)")
    if spec.max_context and workload.context_tokens > spec.max_context:
        warnings.append(f"--context {workload.context_tokens:,} exceeds the model's max_position_embeddings {spec.max_context:,}")
    topo = setup.topology
    if topo.spans_slices and par.ep > topo.devices_per_slice:
        warnings.append(f"the EP group ({par.ep} devices) spans {topo.slices} slices: expert traffic crosses "
                        f"{hw.scale_out.name}, infeasible for prefill (k3-facts.md §4); keep EP inside a slice (--ep {par.tp})"
                        if par.tp <= topo.devices_per_slice else
                        f"the EP group ({par.ep} devices) spans {topo.slices} slices over {hw.scale_out.name}")
    crossover = kv_state_crossover_tokens(spec, stack)
    return FitResult(
        model={"name": spec.name, "total_params": inv.total_params, "active_params": inv.active_params,
               "checkpoint_bytes": inv.checkpoint_bytes, "runtime_weight_bytes": wb.runtime_weight_bytes},
        hardware={"name": hw.name, "topology": setup.topology.text, "chips": setup.topology.chips,
                  "devices": setup.topology.devices, "hosts": setup.topology.hosts, "slices": setup.topology.slices,
                  "hbm_bytes_per_device": hw.hbm_bytes_per_device, "usable_bytes_per_device": usable},
        parallel={"tp": par.tp, "ep": par.ep, "dp": par.dp},
        stack=stack.name,
        workload=workload.model_dump(),
        model_state={"kv_bytes_per_token": kv_bytes_per_token(spec, stack.kv_cache.dtype),
                     "state_bytes_per_sequence": state_bytes_per_sequence(spec, stack),
                     "kv_dtype": stack.kv_cache.dtype, "recurrent_dtype": stack.state.recurrent_dtype,
                     "conv_dtype": stack.state.conv_dtype},
        per_device={"weights_bytes": wb.weights_bytes, "replicated_weights_bytes": wb.replicated_weights_bytes,
                    "kv_bytes": kv, "state_bytes": state, "temp_bytes": temp_bytes, "reserve_bytes": reserve,
                    "free_bytes": free, "kv_bytes_per_token": layout.kv_bytes_per_token,
                    "state_bytes_per_sequence": layout.state_bytes_per_sequence, "sequences": seqs},
        capacity={"max_context_tokens": min(max_context, spec.max_context or max_context),
                  "memory_context_tokens": max_context, "max_sequences": max_sequences,
                  "kv_state_crossover_tokens": crossover, "model_max_context_tokens": spec.max_context},
        fits=fits,
        weights_fit=wb.weights_bytes <= usable,
        replicated=[f.model_dump() for f in wb.fallbacks],
        warnings=warnings,
        notes=list(setup.notes) + list(spec.notes),
        provenance={
            "weights": f"analytic: inventory x {stack.name} runtime formats x ShardSpecs ({setup.plan.source})",
            "kv": (f"analytic: {spec.n_mla} MLA layers x {spec.mla.cache_values_per_token} values, {stack.kv_cache.dtype}"
                   + (", whole latent on every TP rank" if stack.kv_cache.replicate_across_tp else ", split over TP")
                   + f", {layout.paging} paging, blocks of {layout.block_tokens} tokens"),
            "state": (f"analytic: {spec.n_kda} KDA layers, recurrent {stack.state.recurrent_dtype} + conv "
                      f"{stack.state.conv_dtype}" + (", split by heads over TP" if stack.state.shard_by_heads else "")),
            "temp_prefill": temp_source["prefill"],
            "temp_decode": temp_source["decode"],
            "reserve": f"stack {stack.name}: {stack.reserve.fraction_of_usable_hbm:.0%} of usable HBM ({stack.reserve.source})",
            "hbm": hw.sources().get("usable_hbm_per_device", hw.path),
            "stack_sources": f"kv: {stack.kv_cache.source}; state: {stack.state.source}; paging: {stack.paging.source}",
        },
        temp=temp_info,
        weights_by_role=wb.by_role,
        cache_layout=layout.model_dump(),
    )
