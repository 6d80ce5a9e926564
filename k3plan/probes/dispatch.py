"""Tokamax-style dispatch, with the fallback made visible.

A probe keeps an explicit ``IMPLEMENTATIONS`` dict: name -> factory. A factory returns something
runnable, or raises ``NotImplementedError(reason)`` when its backend cannot run here (no TPU, no
tokamax, no Pallas lowering for this platform). ``dispatch`` tries them in order and returns the
first that works together with every attempt and its reason; the caller puts both in the record, so
a silent fallback (pallas -> xla, kernel -> reference) cannot happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Mapping, Sequence, TypeVar

from k3plan.evidence.probe_record import Attempt

T = TypeVar("T")


class NoImplementation(Exception):
    """Every implementation failed; carries each one's reason."""

    def __init__(self, attempts: list[Attempt]):
        self.attempts = attempts
        super().__init__("; ".join(f"{a.implementation}: {a.reason}" for a in attempts) or "no implementation")


@dataclass(frozen=True)
class Dispatched(Generic[T]):
    name: str
    value: T
    attempts: list[Attempt]

    @property
    def fallback(self) -> bool:
        return len(self.attempts) > 1

    @property
    def fallback_reasons(self) -> list[str]:
        return [f"{a.implementation}: {a.reason}" for a in self.attempts if not a.ok]


def dispatch(*, implementations: Mapping[str, Callable[[], T]], order: Sequence[str]) -> Dispatched[T]:
    """Try `order` (names in `implementations`) in turn; first success wins."""
    attempts: list[Attempt] = []
    for name in order:
        factory = implementations.get(name)
        if factory is None:
            attempts.append(Attempt(implementation=name, ok=False, reason="no such implementation"))
            continue
        try:
            value = factory()
        except NotImplementedError as err:
            attempts.append(Attempt(implementation=name, ok=False, reason=str(err) or "not implemented here"))
            continue
        except Exception as err:  # a backend that fails to lower/compile is a failed backend, not a crash
            first = (str(err).strip().splitlines() or [""])[0][:300]
            attempts.append(Attempt(implementation=name, ok=False, reason=f"{type(err).__name__}: {first}"))
            continue
        attempts.append(Attempt(implementation=name, ok=True))
        return Dispatched(name=name, value=value, attempts=attempts)
    raise NoImplementation(attempts)
