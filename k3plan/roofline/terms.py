"""A decode step's named terms a device: bytes by what is read (weights, routed experts, KV, KDA
state) and FLOPs by kind (linear, attention). Field order is the roofline JSON's key order."""

from __future__ import annotations

from k3plan.structs import Frozen, fields


class _Terms(Frozen):
    def items(self) -> list[tuple[str, float]]:
        """(term, value) in field order."""
        return [(k, getattr(self, k)) for k in fields(self)]

    def total(self) -> float:
        return sum(v for _, v in self.items())


class StepBytes(_Terms):
    """Bytes one decode step moves: dense weights, the routed experts touched, KV read, KDA state read+write.
    Ints, as every byte count (``of_step``)."""

    weights: int
    experts: int
    kv: int
    state: int

    @classmethod
    def of_step(cls, *, weights, experts, kv, state) -> StepBytes:
        """From the step's sums (floats: a tensor's share a device is bytes / shards): rounded to the nearest
        byte. Weights, KV and state are whole bytes already; the routed experts touched are an expectation
        (E (1 - (1 - k/E)^B) / E of their bytes), so the rounding is < 1 B of some 10^8."""
        return cls(weights=round(weights), experts=round(experts), kv=round(kv), state=round(state))


class StepFlops(_Terms):
    """FLOPs one decode step does: linear (2 x params applied) and attention (absorbed MLA + KDA)."""

    linear: float
    attention: float


class WeightSums(Frozen):
    """Dense and routed-expert bytes and params a device (embeddings excluded), and each one's whole-model bytes."""

    dense_bytes: float = 0.0
    expert_bytes: float = 0.0
    dense_params: float = 0.0
    expert_params: float = 0.0
    dense_total_bytes: float = 0.0
    expert_total_bytes: float = 0.0
