"""The device mesh: named axes ``dp`` x ``tp`` over a pipeline stage's devices, and the expert group ``ep``.

``pp`` pipeline stages each hold a share of the layers on devices / pp devices (step/stages.py says
which); inside a stage the split is the one below, so the mesh (and every ShardSpec) is a stage's.

``tp`` splits attention heads and dense widths inside a data-parallel group; ``dp`` replicates
attention and splits sequences; ``ep`` spreads the routed experts, either inside a DP group
(ep = tp, mesh axes ("tp",)) or over every device (ep = dp x tp, mesh axes ("dp", "tp")). ``tp_x_dp``
(``WHOLE_TP``) is a rule target over every device of a stage whatever ep is: an engine's whole TP group under
DP attention (SGLang's tp_size = attention TP x dp), which cuts the LM head there (``Stack.lm_head_whole_tp``).
"""

from __future__ import annotations

from k3plan.engines.stack import WHOLE_TP  # the rule target's name, where the stack sets it
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen


class Parallel(Frozen):
    tp: int
    ep: int
    dp: int
    pp: int = 1

    @property
    def devices(self) -> int:
        """Devices of one pipeline stage (the mesh the ShardSpecs cut)."""
        return self.tp * self.dp

    @property
    def total_devices(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def label(self) -> str:
        """The split as every title prints it: ``tp=8 ep=8 dp=1``, with `` pp=2`` when there is a pipeline."""
        return f"tp={self.tp} ep={self.ep} dp={self.dp}" + (f" pp={self.pp}" if self.pp > 1 else "")

    def _dump_extra(self, out: dict) -> dict:  # pp only when there is a pipeline: the JSON of pp = 1 is unchanged
        if self.pp <= 1:
            out.pop("pp")
        return out


class Mesh(Frozen):
    """The named mesh axes of one ``Parallel``: ``dp`` x ``tp`` over all devices, and the alias
    ``ep`` for the mesh axes the experts span. It holds no number of its own (the split lives in
    ``Parallel`` only); its JSON stays {"axes": ..., "aliases": ...}."""

    parallel: Parallel

    @property
    def axes(self) -> dict[str, int]:  # ordered: {"dp": dp, "tp": tp}
        return {"dp": self.parallel.dp, "tp": self.parallel.tp}

    @property
    def aliases(self) -> dict[str, tuple[str, ...]]:  # "ep" -> mesh axes it spans
        p = self.parallel
        return {"ep": ("dp", "tp") if p.ep == p.devices else ("tp",)}

    def _dump_extra(self, out: dict) -> dict:
        return {"axes": self.axes, "aliases": {k: list(v) for k, v in self.aliases.items()}}

    def size(self, axes: tuple[str, ...]) -> int:
        n = 1
        for a in axes:
            n *= self.axes[a]
        return n

    def expand(self, name: str | None) -> tuple[str, ...]:
        """A rule's target ("tp", "ep", "dp" or None) -> the mesh axes it stands for."""
        if name is None:
            return ()
        if name in self.aliases:
            return self.aliases[name]
        if name == WHOLE_TP:
            return ("dp", "tp")
        if name in self.axes:
            return (name,)
        raise K3PlanError(
            f"sharding rule names mesh axis {name!r}; known: {', '.join([*self.axes, *self.aliases, WHOLE_TP])}"
        )


def make_mesh(
    *, devices: int, tp: int | None = None, ep: int | None = None, dp: int | None = None, pp: int = 1
) -> tuple[Mesh, Parallel]:
    """Complete and check a (tp, ep, dp) split over a stage's devices (``devices`` / ``pp``).
    Defaults: tp = stage devices / dp, dp = 1, ep = all of a stage's devices."""
    for flag, v in (("--tp", tp), ("--ep", ep), ("--dp", dp), ("--pp", pp)):
        if v is not None and v < 1:
            raise K3PlanError(f"{flag} {v}: expected a positive integer")
    if devices % pp:
        raise K3PlanError(f"--pp {pp} does not divide the {devices} devices of the topology")
    total, devices = devices, devices // pp
    where = f"the {total} devices of the topology" + (f" / pp {pp}" if pp > 1 else "")
    if dp is None:
        dp = devices // tp if tp else 1
    if tp is None:
        if devices % dp:
            raise K3PlanError(f"--dp {dp} does not divide {where}")
        tp = devices // dp
    if tp * dp != devices:
        raise K3PlanError(f"--tp {tp} x --dp {dp} = {tp * dp}, but {where} = {devices}; expected tp x dp = {devices}")
    ep = devices if ep is None else ep
    if ep not in (devices, tp):
        raise K3PlanError(f"--ep {ep}: expected the TP group ({tp}) or all devices of a stage ({devices})")
    parallel = Parallel(tp=tp, ep=ep, dp=dp, pp=pp)
    return Mesh(parallel=parallel), parallel
