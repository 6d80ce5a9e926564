"""`fit --json`: the typed fit, then the advice on it and the prefix-cache TTFT (k3plan.cli.fit dumps it)."""

from __future__ import annotations

from typing import Optional

from k3plan.advice.wiring import FitAdvice
from k3plan.budget.fit import FitResult
from k3plan.tiers.prefix import PrefixHit


class FitOutput(FitResult):
    """FitResult's fields (same order, same JSON), then ``advice`` and ``prefix_hit`` (None without
    --prefix-hit, or for a workload that does not fit)."""

    advice: FitAdvice
    prefix_hit: Optional[PrefixHit] = None
    # the engine's own KV-pool sizing (k3plan.engines.vllm_memory.EngineSizing.as_json); None where the stack's
    # engine sizes its pool some other way
    engine: Optional[dict] = None

    @classmethod
    def of(
        cls, result: FitResult, *, advice: FitAdvice, prefix_hit: Optional[PrefixHit], engine: Optional[dict] = None
    ) -> FitOutput:
        return cls(
            **{k: getattr(result, k) for k in FitResult.model_fields},
            advice=advice,
            prefix_hit=prefix_hit,
            engine=engine,
        )
