"""What plan's later passes (plan/wire.py) add to a PlanResult beyond the ranked rows: typed, so
plan() reads fields, never a string-keyed bag."""

from __future__ import annotations

from typing import Optional

from k3plan.deploy.coldstart import ColdStart
from k3plan.deploy.pareto import ParetoPoint
from k3plan.plan.deployment import Disaggregated, Launch
from k3plan.plan.sla import SlaTargets
from k3plan.structs import Frozen


class PickExtras(Frozen):
    """The chosen row's launch command and (given --load-gbps) its cold start."""

    launch: Launch
    cold_start: Optional[ColdStart] = None


class PlanExtras(Frozen):
    """The passes' results (each None / empty when its pass did not run) and their assumptions,
    which plan() appends to its own."""

    sla: Optional[SlaTargets] = None
    pareto: tuple[ParetoPoint, ...] = ()
    disaggregated: Optional[Disaggregated] = None
    pick: Optional[PickExtras] = None
    assumptions: tuple[str, ...] = ()

    @property
    def launch(self) -> Optional[Launch]:
        return None if self.pick is None else self.pick.launch

    @property
    def cold_start(self) -> Optional[ColdStart]:
        return None if self.pick is None else self.pick.cold_start
