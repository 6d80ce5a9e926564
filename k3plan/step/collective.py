"""The collectives a step issues, with one spelling, and where a call's latency comes from.

``latency`` is the one place a per-call latency is chosen: a probe record of *this* collective on
the scale-up link when one matches, else the hardware spec's link latency. ``fit``, ``roofline``,
``report`` and ``plan`` all call it, so a record of one collective never stands in for another.
``SEND`` is the pipeline's stage-to-stage send (k3plan/step/p2p.py): no probe measures one, so it
has no ``probe_op`` and always runs at the spec's link latency and bandwidth (its ceiling).
``REDUCE_SCATTER`` is the combine of vLLM's default all2all backend (allgather_reducescatter,
``Collective.of_pattern``): no probe measures one either, so a step of that pattern runs at the spec's
latency (an all-gather record does not stand in for it).
"""

from __future__ import annotations

from enum import Enum

from k3plan.columns import maximum, where


class Collective(str, Enum):
    ALL_TO_ALL = "all-to-all"
    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    SEND = "send"  # pipeline stage to stage (vLLM send_tensor_dict): point to point, no probe of it
    REDUCE_SCATTER = "reduce-scatter"  # vLLM AgRsAll2AllManager.combine (reduce_scatterv): no probe of it

    @property
    def probe_op(self) -> str | None:
        """The ``op`` a collectives probe record names (k3plan.probes.collectives); None: no probe
        measures this collective (its efficiency is the ceiling, labelled so)."""
        return {"all-to-all": "a2a", "all-reduce": "allreduce", "all-gather": "allgather"}.get(self.value)

    @classmethod
    def of_pattern(cls, pattern: str) -> Collective:
        """The collective whose latency a step of a stack's expert pattern (``collectives.experts``) is
        costed at: all_to_all -> all-to-all, all_reduce -> all-reduce, allgather_reducescatter ->
        reduce-scatter (no probe of it: the spec's latency, ``latency``)."""
        return {"all_to_all": cls.ALL_TO_ALL, "allgather_reducescatter": cls.REDUCE_SCATTER}.get(
            pattern, cls.ALL_REDUCE
        )

    @staticmethod
    def pattern_text(pattern: str) -> str:
        """The expert pattern's collectives in words (warnings): 'all-to-all', 'all-reduce' or
        'all-gather + reduce-scatter'."""
        return (
            "all-gather + reduce-scatter"
            if pattern == "allgather_reducescatter"
            else str(Collective.of_pattern(pattern))
        )

    def __str__(self) -> str:
        return self.value


def cross_node_ep_warning(hw, topo, *, ep: int, op: Collective | str) -> str:
    """The one wording, in fit's warnings and plan's layout notes, of an EP group wider than a scale-up
    domain: its ``op`` (the stack's expert collectives, ``Collective.pattern_text``) crosses the scale-out
    link, with that link's bandwidth and latency from the hardware spec."""
    return (
        f"cross-node EP: the EP group ({ep} devices) spans {topo.slices} {hw.scale_up.name} domains of "
        f"{topo.devices_per_slice}; the experts' {op} runs over {hw.scale_out.name} "
        f"({hw.scale_out.bw_bytes_per_s / 1e9:g} GB/s a GPU, {hw.scale_out.latency_s * 1e6:g} us a call, "
        f"{hw.name} spec)"
    )


def scale_out_note(hw, topo, *, crossing) -> str:
    """The one wording, in fit's warnings and plan's layout notes, of which collectives cross the scale-out
    link: ``crossing``, the ops whose group is wider than a scale-up domain or straddles the edge of one
    (``k3plan.step.ops.crosses``);
    every other collective stays on the scale-up link."""
    return (
        f"collectives over {hw.scale_out.name} ({hw.scale_out.bw_bytes_per_s / 1e9:g} GB/s a chip, "
        f"{hw.scale_out.latency_s * 1e6:g} us a call, {hw.name} spec): {', '.join(crossing)} (their group is wider "
        f"than a {hw.scale_up.name} domain of {topo.devices_per_slice} devices, or straddles the edge of one); every other collective stays "
        f"on {hw.scale_up.name}"
    )


def ring_bytes_per_chip(n, message, devices_per_chip):
    """Ring all-reduce: each device sends 2 (n-1)/n of the message; a chip hosts dpc devices."""
    return where(n > 1, devices_per_chip * 2 * (n - 1) / maximum(n, 1) * message, 0.0)
