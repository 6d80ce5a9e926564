"""Collectives a step issues, by the stack's expert pattern, and what they cost.

time = calls x per-call latency + bytes a chip / link bandwidth (one-way, a chip).
- ``all_to_all`` (EP dispatch/combine): per MoE layer one dispatch and one combine, each moving
  the ``expert_in``-wide activation of every token to its k experts (docs/k3-facts.md §5: fp8 latent,
  57.3 KB a token a layer each way), a chip sending its share of the tokens.
- ``all_reduce`` (local experts + one all-reduce a MoE layer, as vLLM TPU does): no all-to-all;
  the hidden states of the batch (a LatentMoE: with the routed latent, one call) are all-reduced
  over the EP group (ring: 2 (n-1)/n of the message a chip), plus one attention all-reduce a layer
  when TP > 1, and the embedding's, the dense MLP's and the logits' collectives over TP
  (``k3plan.step.ops.tp_edge_ops``).
- ``allgather_reducescatter`` (vLLM's default all2all backend on GPUs): with DP > 1 one all-gather of
  the expert inputs and one reduce-scatter of the outputs over the DP group a MoE layer, then the TP
  all-reduce (``k3plan.step.ops.moe_ops``); a reduce-scatter has no probe: the spec's latency.
Each collective runs on its own link: ICI/NVLink while its group stays in one slice (scale-up domain),
else DCN/scale-out (``k3plan.step.ops.group_spans``: a TP group is ``tp`` consecutive devices, an EP
group ``ep``, the DP group strided by tp ``tp x dp``). So on two 8-GPU nodes with EP over both, the TP
all-reduces stay on NVLink and only the expert collectives whose group spans the nodes cross InfiniBand;
``CommCost.links`` is that split, one entry a link that carries calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

from k3plan.setup import Setup
from k3plan.step.collective import Collective
from k3plan.step.dtypes import BYTES
from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.step.p2p import P2PTerms


class LinkComm(Frozen):
    """The step's collectives on one link (``CommCost.links``)."""

    link: Literal["scale_up", "scale_out"]
    link_name: str
    link_bw_bytes_per_s: float
    latency_s_per_call: float  # the experts' collective's on this link (``roofline.latency.latency``)
    latency_source: str
    calls_per_step: int
    bytes_per_chip_per_step: int  # rounded to the byte (the times use the exact figure)
    latency_time_s: float
    bandwidth_time_s: float
    collectives: tuple[str, ...]  # the ops on this link that issue calls (``k3plan.step.ops.collective_ops``)


class CommCost(Frozen):
    pattern: str
    op: Collective  # the experts' collective whose latency the step takes (``Collective.of_pattern``)
    calls_per_step: int  # all collectives a step, both links
    expert_calls_per_step: int
    attention_calls_per_step: int
    bytes_per_token_per_layer: int  # expert traffic a token a MoE layer (dispatch + combine)
    bytes_per_chip_per_step: int  # rounded to the byte: a ring's 2 (n-1)/n share of a message is a fraction
    # the experts' collectives' link ("scale_up" or "scale_out"), its bandwidth and latency a call
    link: str
    link_name: str
    link_bw_bytes_per_s: float
    latency_s_per_call: float
    latency_source: str
    latency_time_s: float  # both links: the sum over ``links``
    bandwidth_time_s: float  # both links
    # pipeline parallelism (step/p2p.py p2p_terms): pp - 1 stage-to-stage sends a step
    pipeline_calls_per_step: int = 0
    pipeline_bytes_per_chip_per_step: int = 0  # rounded to the byte (a device's 1/tp of a boundary)
    pipeline_link: str = ""
    pipeline_time_s: float = 0.0
    links: tuple[LinkComm, ...] = ()  # the collectives by link, each link that carries calls

    @property
    def scale_out(self) -> LinkComm | None:
        """The collectives that cross the scale-out link, if any."""
        return next((x for x in self.links if x.link == "scale_out"), None)

    @property
    def time_s(self) -> float:
        return self.latency_time_s + self.bandwidth_time_s + self.pipeline_time_s


def expert_bytes_per_token_layer(setup: Setup) -> int:
    """All-to-all payload a token a MoE layer, dispatch + combine (57.3 KB x 2 for K3 in fp8)."""
    moe, st = setup.model.spec.moe, setup.stack
    return 2 * moe.top_k * moe.expert_in * BYTES[st.collectives.dispatch_dtype]


def ep_spans_slices(setup: Setup) -> bool:
    topo = setup.topology
    group_devices = setup.parallel.ep
    return topo.spans_slices and group_devices > topo.devices_per_slice


def pipeline_link(setup: Setup) -> Literal["scale_up", "scale_out"]:
    """Where the stage-to-stage sends run: the scale-out link when the topology spans scale-up domains
    (plan's stages are whole domains: plan/space.py), else the scale-up link."""
    return "scale_out" if setup.topology.spans_slices else "scale_up"


def pipeline_sends(setup: Setup, *, tokens: int) -> P2PTerms | None:
    """``step.p2p.p2p_terms`` of one step over ``tokens`` tokens (decode: a microbatch; prefill: the
    chunk) at one Setup, a DP group's share of them; None without pipeline parallelism."""
    par, st = setup.parallel, setup.stack
    if par.pp == 1:
        return None
    from k3plan.step.p2p import p2p_terms

    return p2p_terms(
        setup.model.spec,
        pp=par.pp,
        tokens=-(-tokens // par.dp),
        act=BYTES[st.activation_dtype],
        tp=par.tp,
        sends=len(st.pipeline.sends) if st.pipeline else 2,
        devices_per_chip=setup.hardware.devices_per_chip,
    )


def latent_reduce_calls(stack, spec) -> int:
    """Calls of a MoE layer's all-reduce: 2 where the stack reduces a LatentMoE's routed latent apart from its
    hidden-wide output (``Collectives.latent_reduce``), else 1."""
    latent = spec.moe is not None and bool(spec.moe.latent)
    return 2 if latent and stack.collectives.latent_reduce == "apart" else 1


def stack_comm_inputs(stack, spec) -> dict[str, Any]:
    """What the step's collectives (``step.comm.comm_terms``) read of a stack as it runs at its DP
    (``Stack.for_dp``) and a model: the experts' pattern, the activation and dispatch bytes, how logits gather (and
    over which group), the latent reduce calls. One Setup's (``collective_args``) and plan's columns (gathered over its stack
    variants) are read by this one function."""
    return {
        "all_to_all": stack.collectives.experts == "all_to_all",
        "ag_rs": stack.collectives.experts == "allgather_reducescatter",
        "act": BYTES[stack.activation_dtype],
        "dispatch": BYTES[stack.collectives.dispatch_dtype],
        "logits_all_gather": stack.logits.gather == "all_gather",
        "latent_calls": latent_reduce_calls(stack, spec),
        # the LM head over the whole TP group (Stack.lm_head_whole_tp): its logits gather over tp x dp
        "logits_whole_tp": stack.lm_head_whole_tp,
    }


def collective_args(setup) -> dict:
    """The step collectives' arguments of one Setup (``k3plan.step.ops.collective_ops``, ``comm_terms``):
    the stack's patterns and dtypes (``stack_comm_inputs``), the split, the chips; ``spec`` beside them."""
    spec, st, par, hw, topo = setup.model.spec, setup.stack, setup.parallel, setup.hardware, setup.topology
    return {
        **stack_comm_inputs(st, spec),
        "tp": par.tp,
        "dp": par.dp,
        "ep": par.ep,
        "devices_per_chip": hw.devices_per_chip,
        "chips": topo.chips,
        # a group wider than this crosses a scale-up domain (step.ops.crosses); None: one domain
        "domain_devices": topo.devices_per_slice if topo.spans_slices else None,
        "spec": spec,
    }


def comm_cost(
    setup: Setup,
    *,
    tokens: int,
    sequences: int | None = None,
    latency: Optional[tuple[float, str]] = None,
    send_tokens: int | None = None,
) -> CommCost:
    """Collectives of one step over ``tokens`` tokens (decode: the batch; prefill: the chunk) of
    ``sequences`` sequences sampled (default ``tokens``; a prefill chunk: 1): ``k3plan.step.comm``
    at one Setup, each collective on its own link. ``latency``: (seconds, source) a call on the scale-up
    link (a probe record: ``roofline.latency.collective_latency``), else the spec's; the scale-out link's
    is always the spec's (probes run inside one slice). ``send_tokens``: the tokens the stage-to-stage sends
    carry (default ``tokens``; a decode step's real rows where ``tokens`` are the engine's padded ones: the
    padding of a pipeline's intermediate tensors was not read)."""
    from k3plan.step.comm import comm_terms, comm_time

    a = collective_args(setup)
    st, hw, spec = setup.stack, setup.hardware, a.pop("spec")
    up, out = hw.scale_up, hw.scale_out
    up_lat, up_src = latency or (up.latency_s, f"{hw.name} spec: {up.name} latency a call")
    out_lat, out_src = out.latency_s, f"{hw.name} spec: {out.name} latency a call"
    t = comm_terms(spec, **a, tokens=tokens, sequences=sequences)
    lt = comm_time(
        t,
        latency_s=up_lat,
        bw_bytes_per_s=up.bw_bytes_per_s,
        scale_out_latency_s=out_lat,
        scale_out_bw_bytes_per_s=out.bw_bytes_per_s,
    )
    issued = [op for op in t.ops if op.calls]
    # the experts' link: where the MoE layers' collectives run (a model without them: any collective's)
    experts = [op for op in issued if op.layer_kind == "moe"] or issued
    spans = any(op.scale_out for op in experts)
    link = out if spans else up
    links = []
    name: Literal["scale_up", "scale_out"]
    for name, spec_link, lat, src, calls, nbytes, lat_t, bw_t, crossing in (
        ("scale_up", up, up_lat, up_src, t.scale_up_calls, t.scale_up_bytes_per_chip, lt.scale_up_latency_s,
         lt.scale_up_bandwidth_s, False),
        ("scale_out", out, out_lat, out_src, t.scale_out_calls, t.scale_out_bytes_per_chip, lt.scale_out_latency_s,
         lt.scale_out_bandwidth_s, True),
    ):  # fmt: skip
        if calls:
            links.append(
                LinkComm(
                    link=name,
                    link_name=spec_link.name,
                    link_bw_bytes_per_s=float(spec_link.bw_bytes_per_s),
                    latency_s_per_call=float(lat),
                    latency_source=str(src),
                    calls_per_step=int(calls),
                    bytes_per_chip_per_step=round(float(nbytes)),
                    latency_time_s=float(lat_t),
                    bandwidth_time_s=float(bw_t),
                    collectives=tuple(op.name for op in issued if bool(op.scale_out) == crossing),
                )
            )
    pipe_calls, pipe_bytes, pipe_link, pipe_s = 0, 0, "", 0.0  # no pipeline: CommCost's defaults
    p2p = pipeline_sends(setup, tokens=tokens if send_tokens is None else send_tokens)
    if p2p is not None:
        from k3plan.step.p2p import p2p_time

        plink = hw.scale_out if pipeline_link(setup) == "scale_out" else hw.scale_up
        pipe_calls, pipe_bytes, pipe_link = int(p2p.calls), round(float(p2p.bytes_per_chip)), plink.name
        pipe_s = float(p2p_time(p2p, latency_s=plink.latency_s, bw_bytes_per_s=plink.bw_bytes_per_s))
    return CommCost(
        pattern=st.collectives.experts,
        op=Collective.of_pattern(st.collectives.experts),
        calls_per_step=int(t.calls),
        expert_calls_per_step=int(t.expert_calls),
        attention_calls_per_step=int(t.attention_calls),
        bytes_per_token_per_layer=int(t.bytes_per_token_per_layer),
        bytes_per_chip_per_step=round(float(t.bytes_per_chip)),  # the times above use the exact figure
        link="scale_out" if spans else "scale_up",
        link_name=link.name,
        link_bw_bytes_per_s=float(link.bw_bytes_per_s),
        latency_s_per_call=float(out_lat if spans else up_lat),
        latency_source=str(out_src if spans else up_src),
        latency_time_s=float(lt.latency_s),
        bandwidth_time_s=float(lt.bandwidth_s),
        pipeline_calls_per_step=pipe_calls,
        pipeline_bytes_per_chip_per_step=pipe_bytes,
        pipeline_link=pipe_link,
        pipeline_time_s=pipe_s,
        links=tuple(links),
    )


def scale_out_collectives(setup: Setup) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the collectives that cross the scale-out link, those that stay on the scale-up link) of one Setup's
    step: the ops that issue calls (``collective_ops`` at one token: calls do not depend on the tokens)."""
    from k3plan.step.ops import collective_ops

    a = collective_args(setup)
    ops = [op for op in collective_ops(a.pop("spec"), **a, tokens=1) if op.calls]
    return tuple(op.name for op in ops if op.scale_out), tuple(op.name for op in ops if not op.scale_out)
