"""`fit --json`: the typed fit, then the advice on it and the prefix-cache TTFT (k3plan.cli.fit dumps it)."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.advice.wiring import FitAdvice
from k3plan.budget.fit import FitResult
from k3plan.step.verdict import fit_reason
from k3plan.structs import fields
from k3plan.tiers.prefix import PrefixHit


class FitOutput(FitResult):
    """FitResult's fields (same order, same JSON), with ``reason`` and ``reason_code`` after ``fits``
    (issue 36: a CI job reads why without parsing the text), then ``advice`` and ``prefix_hit`` (None
    without --prefix-hit, or for a workload that does not fit)."""

    advice: FitAdvice
    prefix_hit: Optional[PrefixHit] = None
    # the engine's own KV-pool sizing (k3plan.engines.vllm.memory.EngineSizing.as_json); None where the stack's
    # engine sizes its pool some other way
    engine: Optional[dict] = None

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        out = super()._dump_extra(out)
        verdict = (self.engine or {}).get("verdict")
        if verdict is not None:  # fit --serve: one verdict, the engine's start check (k3plan's budget: engine.budget)
            out["fits"] = verdict["starts"]
            return _after(out, "fits", {"reason": verdict["reason"], "reason_code": verdict["reason_code"]})
        code, text = fit_reason(
            fits=self.fits, code=self.reason, unverified_max_temp_bytes=self.unverified_max_temp_bytes
        )
        return _after(out, "fits", {"reason": text, "reason_code": code.value})

    @classmethod
    def of(
        cls, result: FitResult, *, advice: FitAdvice, prefix_hit: Optional[PrefixHit], engine: Optional[dict] = None
    ) -> FitOutput:
        return cls(
            **{k: getattr(result, k) for k in fields(FitResult)},
            advice=advice,
            prefix_hit=prefix_hit,
            engine=engine,
        )


def _after(out: dict[str, Any], key: str, extra: dict[str, Any]) -> dict[str, Any]:
    """``out`` with ``extra``'s keys inserted right after ``key``."""
    res: dict[str, Any] = {}
    for k, v in out.items():
        res[k] = v
        if k == key:
            res.update(extra)
    return res
