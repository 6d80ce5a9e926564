"""Advice: what to do when a budget fails or is thin, each suggestion computed from the numbers."""

from k3plan.advice.inputs import (
    AdviceInputs,
    BatchOption,
    KvDtypeOption,
    PartTime,
    SpecDecodeOption,
    TopologyOption,
)
from k3plan.advice.rules import HEADROOM_MIN_FRACTION, Advice, Suggestion, advise

__all__ = [
    "HEADROOM_MIN_FRACTION",
    "Advice",
    "AdviceInputs",
    "BatchOption",
    "KvDtypeOption",
    "PartTime",
    "SpecDecodeOption",
    "Suggestion",
    "TopologyOption",
    "advise",
]
