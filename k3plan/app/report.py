"""What `k3plan report` answers, typed: a ReportQuestion (the options cli/report.py parsed) to a ReportAnswer:
each platform's capacity report (k3plan.report.capacity_write.collect: the smallest viable topology and split
a context, headroom by term, capacity, bounds, cost, the chunk curve), with the stacks the deployment section
prices. cli/report.py parses, asks and writes the report's files (issue 33: one typed question and one typed
answer a command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from k3plan.structs import Frozen


class ReportQuestion(Frozen):
    """report's options as parsed: the platforms, the stacks asked by platform kind ({}: each machine's default,
    as fit and plan pick it), the contexts, concurrency, chip limit and evidence."""

    __coerce__ = False  # the options as given

    model: str
    platforms: list[str]
    stacks: dict[str, str]
    contexts: list[int]
    concurrency: int
    max_chips: Optional[int] = None
    probes: Optional[Path] = None
    allow_cpu_probes: bool = False
    engram: Optional[str] = None  # where DeepSeek-V4.1's Engram tables live (hbm / host); None: each engine's default


class ReportAnswer(Frozen):
    """The platforms' capacity reports (k3plan.report.capacity_model's), the efficiency they were priced at,
    and the deployment section's stacks (None: plan's default a machine)."""

    __coerce__ = False

    reports: list[Any]
    eff: Any  # k3plan.roofline.bounds.Efficiency
    deploy_stacks: Optional[list[str]] = None


def answer(q: ReportQuestion, progress: Callable[[str], None] = lambda m: None) -> ReportAnswer:
    """Each platform's capacity report at each context (``progress`` hears each step); the contexts and the
    concurrency as the CLI checked them (k3plan.budget.fit.check_workload)."""
    from k3plan.evidence.value import Evidence
    from k3plan.report.capacity_write import collect
    from k3plan.roofline.bounds import Efficiency

    eff = Efficiency()
    evidence = Evidence.build(q.probes)  # the shipped records plus --probes, read once (issue 46)
    reports = collect(
        model=q.model,
        hardware=q.platforms,
        stacks=q.stacks,
        contexts=q.contexts,
        concurrency=q.concurrency,
        max_chips=q.max_chips or 10**9,
        eff=eff,
        evidence=evidence,
        allow_cpu_probes=q.allow_cpu_probes,
        progress=progress,
        engram=q.engram,
    )
    return ReportAnswer(reports=reports, eff=eff, deploy_stacks=deploy_stacks(q.platforms, q.stacks))


def deploy_stacks(platforms: list[str], asked: dict[str, str]) -> list[str] | None:
    """The deployment section's stacks: None where none was asked (plan's default a machine), else the ones
    asked and, for a kind not named, its machines' defaults."""
    if not asked:
        return None
    from k3plan.engines.stack import default_stack_for
    from k3plan.hardware import load_hardware

    out = []
    for name in platforms:
        hw = load_hardware(name)
        out.append(asked.get(hw.kind) or default_stack_for(hw)[0])
    return list(dict.fromkeys(out))
