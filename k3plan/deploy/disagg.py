"""Disaggregated prefill/decode, the pure parts: the KV + KDA state a request hands from a prefill
instance to a decode instance, its time over a named link, and the prefill:decode pool ratio for a
target request rate.

Bytes per request = the MLA KV of the prompt (per-token bytes x ISL) + the KDA recurrent and conv
state (constant in context), whole model, one copy -- from k3plan.step.cache, so the figure is
the same one the memory budget uses. A stack whose TP ranks each hold the whole MLA latent still
needs only one copy on the wire if the decode side fans it out over its own fast link; sending one
copy per rank multiplies it (pass the multiple as ``copies``).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from k3plan.engines.stack import Stack
from k3plan.errors import K3PlanError
from k3plan.hardware.spec import HardwareSpec, Link
from k3plan.models.spec import ModelSpec
from k3plan.step.cache import stack_kv_bytes_per_token_layer, state_bytes_per_slot
from k3plan.step.memory import kv_sequence_bytes
from k3plan.structs import Frozen


def transfer_bytes_per_request(*, spec: ModelSpec, stack: Stack, isl_tokens, copies: int = 1):
    """KV of ``isl_tokens`` prompt tokens + one sequence's KDA state, x ``copies`` (int or column)."""
    if copies < 1:
        raise K3PlanError(f"copies {copies}: expected >= 1")
    isl = np.asarray(isl_tokens)
    if np.any(isl < 0):
        raise K3PlanError("ISL: expected a number of prompt tokens >= 0")
    kv = kv_sequence_bytes(  # unpaged: the prompt's entries, as a parked session's (the one formula)
        isl.astype(np.int64),
        block_tokens=1,
        layers=spec.n_mla,
        kv_bytes_per_token_layer=stack_kv_bytes_per_token_layer(spec, stack),
    )
    out = (kv + state_bytes_per_slot(spec, stack)) * copies
    return int(out) if out.ndim == 0 else out


def link_named(hw: HardwareSpec, which: str) -> Link:
    """``scale_up`` / ``scale_out``, or the link's own name from the spec (ICI, DCN, NVLink,
    InfiniBand ...; case-insensitive)."""
    key = which.strip().lower()
    if key in ("scale_up", "scale-up"):
        return hw.scale_up
    if key in ("scale_out", "scale-out"):
        return hw.scale_out
    for link in (hw.scale_up, hw.scale_out):
        if link.name.lower() == key:
            return link
    raise K3PlanError(
        f"link {which!r} on {hw.name}: expected scale_up ({hw.scale_up.name}) or scale_out ({hw.scale_out.name})"
    )


def transfer_time_s(*, transfer_bytes, link: Link, sending_chips: int = 1):
    """latency + bytes / (one-way bandwidth a chip x chips sending in parallel).

    ``sending_chips=1`` (default) is the bound where one chip's link carries the whole request; a
    prefill instance whose devices each send their own shard divides the bytes across its chips.
    """
    if sending_chips < 1:
        raise K3PlanError(f"sending chips {sending_chips}: expected >= 1")
    return link.latency_s + np.divide(transfer_bytes, link.bw_bytes_per_s * sending_chips, dtype=float)


class Transfer(Frozen):
    bytes_per_request: int
    link: str
    link_kind: Literal["torus3d", "torus2d", "switch", "fullmesh", "network"]
    bw_bytes_per_s_per_chip: float
    sending_chips: int
    transfer_s: float
    ttft_target_s: float | None = None
    share_of_ttft: float | None = None  # transfer_s / ttft_target_s


def request_transfer(
    *,
    spec: ModelSpec,
    stack: Stack,
    hw: HardwareSpec,
    isl_tokens: int,
    link: str,
    sending_chips: int = 1,
    ttft_target_s: float | None = None,
) -> Transfer:
    """One request's handoff: its bytes, the link, its time and (given a target) its share of TTFT."""
    nbytes = transfer_bytes_per_request(spec=spec, stack=stack, isl_tokens=isl_tokens)
    chosen = link_named(hw, link)
    t = float(transfer_time_s(transfer_bytes=nbytes, link=chosen, sending_chips=sending_chips))
    if ttft_target_s is not None and ttft_target_s <= 0:
        raise K3PlanError(f"TTFT target {ttft_target_s} s: expected > 0")
    return Transfer(
        bytes_per_request=nbytes,
        link=chosen.name,
        link_kind=chosen.kind,
        bw_bytes_per_s_per_chip=chosen.bw_bytes_per_s,
        sending_chips=sending_chips,
        transfer_s=t,
        ttft_target_s=ttft_target_s,
        share_of_ttft=None if ttft_target_s is None else t / ttft_target_s,
    )


def pool_loads(
    *, request_rate_per_s, isl_tokens, osl_tokens, prefill_tokens_per_s_per_instance, decode_tokens_per_s_per_instance
):
    """(prefill instances, decode instances) the rate keeps busy, exact (not rounded); columns ok.

    prefill = rate x ISL / prefill tokens/s an instance; decode = rate x OSL / output tokens/s an
    instance (at the batch that meets TPOT).
    """
    p = np.divide(np.multiply(request_rate_per_s, isl_tokens, dtype=float), prefill_tokens_per_s_per_instance)
    d = np.divide(np.multiply(request_rate_per_s, osl_tokens, dtype=float), decode_tokens_per_s_per_instance)
    return p, d


class PoolSizing(Frozen):
    request_rate_per_s: float
    isl_tokens: int
    osl_tokens: int
    prefill_instances_exact: float
    decode_instances_exact: float
    prefill_instances: int  # ceil, at least 1
    decode_instances: int
    ratio_prefill_to_decode: float  # exact loads: prefill / decode
    prefill_utilisation: float  # exact / provisioned
    decode_utilisation: float


def size_pools(
    *,
    request_rate_per_s: float,
    isl_tokens: int,
    osl_tokens: int,
    prefill_tokens_per_s_per_instance: float,
    decode_tokens_per_s_per_instance: float,
) -> PoolSizing:
    """Whole instances of each pool for a target request rate, and the exact ratio between them."""
    for name, v in (
        ("request rate", request_rate_per_s),
        ("prefill tokens/s an instance", prefill_tokens_per_s_per_instance),
        ("decode tokens/s an instance", decode_tokens_per_s_per_instance),
    ):
        if not math.isfinite(v) or v <= 0:
            raise K3PlanError(f"{name} {v!r}: expected a number > 0")
    if isl_tokens < 1 or osl_tokens < 1:
        raise K3PlanError(f"ISL {isl_tokens} / OSL {osl_tokens}: expected whole numbers of tokens >= 1")
    p, d = (
        float(x)
        for x in pool_loads(
            request_rate_per_s=request_rate_per_s,
            isl_tokens=isl_tokens,
            osl_tokens=osl_tokens,
            prefill_tokens_per_s_per_instance=prefill_tokens_per_s_per_instance,
            decode_tokens_per_s_per_instance=decode_tokens_per_s_per_instance,
        )
    )
    np_, nd = max(1, math.ceil(p - 1e-12)), max(1, math.ceil(d - 1e-12))
    return PoolSizing(
        request_rate_per_s=request_rate_per_s,
        isl_tokens=isl_tokens,
        osl_tokens=osl_tokens,
        prefill_instances_exact=p,
        decode_instances_exact=d,
        prefill_instances=np_,
        decode_instances=nd,
        ratio_prefill_to_decode=p / d,
        prefill_utilisation=p / np_,
        decode_utilisation=d / nd,
    )
