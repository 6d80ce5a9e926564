"""The one rule that turns a command's setup options into a Setup, and the default topology a fitting
command (fit, roofline) picks when none is given: the smallest standard one where the workload fits. Every
command asks here (cli/ only parses), so they pick alike (issue 33: one rule picks the defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.workload.specdecode import SpecDecode


class PointQuestion(Frozen):
    """What fit and roofline are both asked: the setup options (``setup_from``'s keywords), a workload at one
    point (context, batch, chunk), the probe records, and the extensions both price (speculative decoding, the
    prefix cache). Each command's question adds its own options."""

    __coerce__ = False  # the options as given

    setup_options: dict[str, Any]
    context: int
    batch: int = 1
    chunk: Optional[int] = None
    probes: Optional[Path] = None
    allow_cpu_probes: bool = False
    spec_tokens: Optional[int] = None
    acceptance: Optional[str] = None
    draft_bytes: Optional[str] = None
    draft_kv_bytes_per_token: Optional[int] = None
    prefix_hit: Optional[float] = None
    prefix_tier: str = "hbm"


def setup_from(
    *,
    model,
    hardware,
    topology,
    tp,
    ep,
    dp,
    stack,
    kv_dtype=None,
    shardspecs=None,
    pp=None,
    spec_verify_tokens=None,
    in_flight=None,
    engine_release=None,
    engine_block=None,
    engine_env=None,
    expert_pad=None,
    expert_copies=None,
    expert_format=None,
    moe_runner=None,
    engine_swa_ratio=None,
    engine_state_bytes=None,
    fraction_scale=None,
    vision_whole=False,
    extra_weights=None,
    lm_head_whole_tp=None,
    shared_expert_whole=None,
    dense_mlp_whole=None,
    mlp_whole_tp=None,
    decode_graph=None,
    prefill_graph=None,
    engram=None,
    engram_host_copies=None,
    model_overrides=(),
):
    """The one place a command turns its shared options into a Setup (``spec_verify_tokens``: fit and
    roofline with --spec-tokens put it in their options, make_setup)."""
    from k3plan.errors import K3PlanError
    from k3plan.plan.defaults import make_default_setup as make_setup

    for flag, value in (("--topology", topology), ("--shardspecs", shardspecs), ("--kv-dtype", kv_dtype)):
        if value is not None and not str(value).strip():  # `--shardspecs=` is not "no shardspecs"
            raise K3PlanError(f"{flag} is empty; leave it out for the default, or give a value")

    return make_setup(
        model=model,
        hardware=hardware,
        topology=topology,
        tp=tp,
        ep=ep,
        dp=dp,
        stack=stack,
        kv_dtype=kv_dtype,
        shardspecs=shardspecs,
        pp=pp,
        spec_verify_tokens=spec_verify_tokens,
        in_flight=in_flight,
        engine_release=engine_release,
        engine_block=engine_block,
        engine_env=engine_env,
        expert_pad=expert_pad,
        expert_copies=expert_copies,
        expert_format=expert_format,
        moe_runner=moe_runner,
        engine_swa_ratio=engine_swa_ratio,
        engine_state_bytes=engine_state_bytes,
        fraction_scale=fraction_scale,
        vision_whole=vision_whole,
        extra_weights=extra_weights,
        lm_head_whole_tp=lm_head_whole_tp,
        shared_expert_whole=shared_expert_whole,
        dense_mlp_whole=dense_mlp_whole,
        mlp_whole_tp=mlp_whole_tp,
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
        engram=engram,
        engram_host_copies=engram_host_copies,
        model_overrides=model_overrides,
    )


# how many larger standard topologies fit tries, past the first whose weights leave room, before it
# reports the smallest one's failure: a fit is ~0.1 s, and a workload that fits none of the next
# four fits only a much larger slice, which `k3plan plan` finds with its reasons
MAX_DEFAULT_TOPOLOGY_TRIES = 5
R = TypeVar("R")


def fitting_setup(setup_options: dict, run_fit: Callable[[Any], R], fits: Callable[[R], bool]) -> tuple[dict, Any, R]:
    """The Setup of the options and ``run_fit`` of it (``fits`` reads the verdict). Without --topology: the smallest standard
    topology (of those whose weights leave room, setup.default_topologies) where the workload fits,
    named in the notes with the smaller ones it does not fit; if none of the first
    MAX_DEFAULT_TOPOLOGY_TRIES does, the smallest one and its failure. Returns (options with the
    topology chosen, setup, result)."""
    import dataclasses

    from k3plan.errors import K3PlanError
    from k3plan.plan.defaults import default_topologies

    setup = setup_from(**setup_options)
    result = run_fit(setup)
    if setup_options.get("topology") is not None or fits(result):
        return setup_options, setup, result
    o = setup_options
    hw = setup.hardware
    candidates = default_topologies(hw, setup.model, setup.stack, o.get("tp"), o.get("ep"), o.get("dp"))
    missed = [setup.topology.text]
    for topo in candidates[1:MAX_DEFAULT_TOPOLOGY_TRIES]:
        options = {**setup_options, "topology": topo.text}
        try:
            s = setup_from(**options)
        except K3PlanError:  # a split the larger topology cannot take: not a candidate
            continue
        note = (
            f"topology {topo.text}: default, the smallest standard {hw.name} topology where this workload fits "
            f"({', '.join(missed)}: weights leave room, the workload does not fit)"
        )
        s = dataclasses.replace(s, notes=(note,) + s.notes)
        r = run_fit(s)
        if fits(r):
            return options, s, r
        missed.append(topo.text)
    return setup_options, setup, result


def spec_decode_from(
    spec_tokens: Optional[int],
    acceptance: Optional[str],
    draft_bytes: Optional[str],
    draft_kv_bytes_per_token: Optional[int] = None,
) -> Optional[SpecDecode]:
    """The speculative-decoding options above checked together: a SpecDecode, or None without
    speculative decoding (then no draft option may be given)."""
    from k3plan.errors import K3PlanError
    from k3plan.workload.specdecode import parse_spec_decode

    if (spec_tokens is None) != (acceptance is None):
        raise K3PlanError("--spec-tokens and --acceptance go together: e.g. --spec-tokens 3 --acceptance 0.8")
    for flag, v in (("--draft-bytes", draft_bytes), ("--draft-kv-bytes-per-token", draft_kv_bytes_per_token)):
        if v is not None and spec_tokens is None:
            raise K3PlanError(f"{flag}: only with --spec-tokens K --acceptance A")
    if spec_tokens is None or acceptance is None:
        return None
    return parse_spec_decode(spec_tokens=spec_tokens, acceptance=acceptance)
