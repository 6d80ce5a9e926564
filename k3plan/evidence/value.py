"""Evidence: the one value that carries every measured record a question may read (issue 46 item 1, issue 51).

    Evidence.build(probes=None)     the records k3plan ships (k3plan/evidence/probes, package data) plus the
                                    ``--probes DIR`` folders a user adds; built once by the app layer
    evidence.records                every valid record, (record, its name), oldest first (read on first use)
    evidence.sources                where they came from ("k3plan/evidence/probes", "--probes DIR")
    evidence.added                  the user's folders
    measures_hardware(evidence)     whether --probes was given: then the measured HBM bandwidth and collective
                                    latency (of the shipped records or the user's) replace the spec's
                                    (roofline.latency), as they did before the records shipped
    evidence.benchmarks             the serving benchmarks k3plan ships (evidence/benchmarks)
    evidence.calibrations           the calibrations k3plan ships (evidence/calibrations)

The shipped records travel with the package, so the same question gives the same answer from any folder and
from an installed wheel (architecture.md: "the same question gives the same answer from any folder"). A user's
folder adds records, never replaces the shipped ones; a file of the same name as a shipped record is that record
(the names carry the run's time and a random suffix) and is read once. A record's name is package-relative
(``k3plan/evidence/probes/<file>``) for a shipped one, the folder as the user gave it for an added one: never the
checkout's absolute path. Nothing is cached across processes; within one, the records are read once a value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

if TYPE_CHECKING:
    from k3plan.evidence.benchmarks import ServingBenchmark
    from k3plan.evidence.probe_record import ProbeRecord

T = TypeVar("T")

SHIPPED_DIR = Path(__file__).resolve().parent / "probes"  # package data (pyproject's package-data glob)
SHIPPED_NAME = "k3plan/evidence/probes"  # how a shipped record is named in output and JSON


@dataclass(frozen=True, eq=False)
class Evidence:
    """The shipped probe records plus the user's ``--probes`` folders (``added``), read lazily, once."""

    added: tuple[Path, ...] = ()
    shipped: bool = True  # False: only the added folders (a test's or a benchmark's own records)
    probes_given: bool = False  # the question gave --probes (measures_hardware)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, probes: Optional[Path] = None, *more: Path, shipped: bool = True) -> Evidence:
        """The shipped records plus ``probes`` (and ``more``): a folder that is not one is a K3PlanError naming
        the flag (exit 2), raised here, before any answer is computed. The shipped folder itself given again
        adds nothing (its records are already in)."""
        from k3plan.errors import K3PlanError

        given = tuple(Path(p) for p in (probes, *more) if p is not None)
        for d in given:
            if not d.is_dir():
                raise K3PlanError(f"--probes {d}: not a folder of probe records")
        added = tuple(d for d in given if not (shipped and d.resolve() == SHIPPED_DIR))
        return cls(added=added, shipped=shipped, probes_given=bool(given))

    @property
    def sources(self) -> tuple[str, ...]:
        """Where the records come from, as output names them."""
        return ((SHIPPED_NAME,) if self.shipped else ()) + tuple(f"--probes {d}" for d in self.added)

    def shown(self) -> str:
        """The sources in one phrase ("k3plan/evidence/probes + --probes DIR")."""
        return " + ".join(self.sources) or "no records"

    @cached_property
    def records(self) -> tuple[tuple[ProbeRecord, PurePosixPath | Path], ...]:
        """Every valid record, oldest first (by date, then name); a corrupt file in an added folder is a
        K3PlanError naming it. A file named as an earlier source's record is that record, read once."""
        from k3plan.evidence.probe_records import load_with_paths

        seen: set[str] = set()
        out: list[tuple[Any, Any]] = []
        if self.shipped and SHIPPED_DIR.is_dir():
            for rec, path in load_with_paths(SHIPPED_DIR, shipped=True):
                name = PurePosixPath(SHIPPED_NAME) / path.relative_to(SHIPPED_DIR).as_posix()
                seen.add(path.name)
                out.append((rec, name))
        for d in self.added:
            for rec, path in load_with_paths(d):
                if path.name not in seen:
                    seen.add(path.name)
                    out.append((rec, path))
        out.sort(key=lambda rp: (rp[0].date, rp[1].name))
        return tuple(out)

    def memo(self, key: Any, build: Callable[[], T]) -> T:
        """``build()`` once a key for this value (a layer above keeps what it derives from the records here, e.g.
        a device kind's efficiency curves, so one question reads and fits them once)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def benchmarks(self) -> tuple[ServingBenchmark, ...]:
        """The serving benchmarks k3plan ships (k3plan.evidence.benchmarks)."""
        from k3plan.evidence.benchmarks import load_benchmarks

        return load_benchmarks()

    @property
    def calibrations(self) -> tuple[Any, ...]:
        """The calibrations k3plan ships (k3plan.evidence.calibrations' registry)."""
        from k3plan.evidence.calibrations import registry

        return registry()


def evidence_of(evidence: Optional[Evidence]) -> Evidence:
    """The value as given; None (a library caller that passed none): a fresh value of the shipped records alone.
    Fresh each call, never a module-level instance: one would keep the records (and the curves memoised on it)
    read the first time for the life of the process, whatever the shipped folder held then."""
    return Evidence() if evidence is None else evidence


def measures_hardware(evidence: Optional[Evidence]) -> bool:
    """Whether the question gave --probes: then a record's measured HBM bandwidth and collective latency
    replace the hardware spec's (roofline.latency); without it the spec's stand, and the records set only the
    efficiencies and kernel times of the expected times (as before the records shipped)."""
    return evidence is not None and evidence.probes_given
