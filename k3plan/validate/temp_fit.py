"""Setting the temp model's coefficients from compiled points, and its error on points it never saw.

The model (k3plan.step.live): temp = c_peak x peak + c_rest x rest + c_resident x resident + c_cache x
cache + c_fixed, where ``peak`` is the largest live bytes of the step's ops (the op list of k3plan.step.ops
at the point, each op with its live buffers: ``k3plan.step.live.stage_live``), ``rest`` the other ops' sum,
``resident`` the residual stream, ``cache`` one layer's cache slice (what a compiler copies when it
does not update the donated cache in place) and ``c_fixed`` bytes the compiler holds whatever the
point (program constants, small buffers). The coefficients are the non-negative least squares of the
RELATIVE error on the fit half (every subset of the features solved and the best non-negative one
kept: 5 features, 31 subsets); the held-out
half is only evaluated. ``split_half`` alternates within each (stack, tp, stage) group in grid order,
so each half covers every stack, TP and stage. jax-free (numpy only).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from k3plan.engines.registry import engine_rules

FEATURES = ("c_peak", "c_rest", "c_resident", "c_cache", "c_fixed")
# Model forms: ``named`` one coefficient a named part (FEATURES); ``total`` one for the live bytes the rules
# count at the peak (the largest op + what stays resident across ops) and a fixed part: fewer coefficients
# for a grid with few points a stack.
FORMS: dict[str, tuple[str, ...]] = {"named": FEATURES, "total": ("c_live", "c_fixed")}
# The expert formulation of grid points recorded before records named it (2026-12-01, temp-grid-tpu7x.json /
# temp-grid-cpu.json): each engine's ``Engine.recorded_forms``, by the stack name the record holds.


@dataclass(frozen=True)
class GridPoint:
    label: str
    group: tuple  # (stack, tp, stage): the split alternates within it
    compiled_bytes: int
    peak: float
    rest: float
    resident: float
    cache: float = 0.0
    peak_op: str = ""
    position: int | None = None  # the point's place in its group's grid order (None: the order points come in)

    def features(self, form: str = "named") -> np.ndarray:
        if form == "total":
            return np.array([self.peak + self.resident, 1.0])
        return np.array([self.peak, self.rest, self.resident, self.cache, 1.0])

    @classmethod
    def from_record(cls, p: dict, setup, position: int | None = None) -> "GridPoint":
        """A grid record's point (bench_temp_grid) with its setup's live model (the step's op list at the point)."""
        from k3plan.budget.temp import stage_live_of_setup
        from k3plan.step.live import live_features, peak_op

        ops, resident = stage_live_of_setup(
            setup,
            stage=p["stage"],
            batch=p["batch"],
            tokens=p["tokens"],
            context=p["context"],
            form=p.get("form") or engine_rules(p["stack"]).recorded_forms[p["stack"]],
        )
        f = live_features(ops, resident)
        top = peak_op(ops).name
        what = (
            f"prefill {p['tokens']} ctx {p['context']}"
            if p["stage"] == "prefill"
            else f"decode b{p['batch']} ctx {p['context']}"
        )
        return cls(
            label=f"{p['stack']} tp{p['tp']} {what}",
            group=(p["stack"], p["tp"], p["stage"]),
            compiled_bytes=int(p["temp_bytes"]),
            peak=float(f["peak"]),
            rest=float(f["rest"]),
            resident=float(f["resident"]),
            cache=float(f["cache"]),
            peak_op=top,
            position=position,
        )


def split_half(points: list[GridPoint]) -> tuple[list[GridPoint], list[GridPoint]]:
    """(fit, held-out): within each group in order, even positions fit, odd ones are held out (groups of
    even size: half each). A point's ``position``, where given, is its place in the grid (so a point not
    compiled does not move the others from one half to the other)."""
    seen: dict[tuple, int] = {}
    fit: list[GridPoint] = []
    held: list[GridPoint] = []
    for p in points:
        i = seen.get(p.group, 0) if p.position is None else p.position
        seen[p.group] = seen.get(p.group, 0) + 1
        (fit if i % 2 == 0 else held).append(p)
    return fit, held


def fit_coefficients(points: list[GridPoint], form: str = "named") -> dict[str, float]:
    """Non-negative coefficients minimising the sum of squared relative errors over ``points``."""
    if not points:
        raise ValueError("no points to fit")
    names = FORMS[form]
    X = np.array([p.features(form) for p in points])
    y = np.array([p.compiled_bytes for p in points], dtype=float)
    A, b = X / y[:, None], np.ones(len(points))
    best: tuple[float, np.ndarray] | None = None
    for r in range(1, len(names) + 1):
        for cols in itertools.combinations(range(len(names)), r):
            sol, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
            if np.any(sol < 0):
                continue
            c = np.zeros(len(names))
            c[list(cols)] = sol
            err = float(np.sum((A @ c - b) ** 2))
            if best is None or err < best[0] - 1e-12:
                best = (err, c)
    assert best is not None  # a single non-negative feature always has a non-negative solution
    return dict(zip(names, (float(v) for v in best[1])))


def predict(coef: dict[str, float], p: GridPoint) -> float:
    """The shipped model's formula (``k3plan.budget.temp_model.model_bytes``) at a grid point."""
    from k3plan.budget.temp_model import model_bytes

    return float(model_bytes(coef, {"peak": p.peak, "rest": p.rest, "resident": p.resident, "cache": p.cache}))


def leave_one_out(points: list[GridPoint], *, per_stack: bool, form: str) -> list[float]:
    """|relative error| of each point predicted by coefficients fitted on the others (of its stack where
    ``per_stack``): how a form generalises, judged on the fit half alone (to choose a form without looking at
    the held-out half)."""
    out = []
    for i, p in enumerate(points):
        others = [q for j, q in enumerate(points) if j != i and (not per_stack or q.group[0] == p.group[0])]
        if not others:
            continue
        out.append(abs(predict(fit_coefficients(others, form), p) / p.compiled_bytes - 1.0))
    return out


@dataclass(frozen=True)
class Row:
    label: str
    train: bool
    compiled_bytes: int
    predicted_bytes: float
    peak_op: str

    @property
    def error(self) -> float:
        return self.predicted_bytes / self.compiled_bytes - 1.0


@dataclass(frozen=True)
class Evaluation:
    coef: dict[str, float]
    rows: list[Row] = field(default_factory=list)

    def _abs(self, train: bool) -> list[float]:
        return [abs(r.error) for r in self.rows if r.train == train]

    @property
    def held_median(self) -> float:
        return float(np.median(self._abs(False)))

    @property
    def held_worst(self) -> float:
        return max(self._abs(False))

    @property
    def train_median(self) -> float:
        return float(np.median(self._abs(True)))

    @property
    def train_worst(self) -> float:
        return max(self._abs(True))

    def to_dict(self) -> dict:
        return {
            "coefficients": self.coef,
            "held_out_median_abs_error": round(self.held_median, 4),
            "held_out_worst_abs_error": round(self.held_worst, 4),
            "fit_median_abs_error": round(self.train_median, 4),
            "fit_worst_abs_error": round(self.train_worst, 4),
            "rows": [
                {
                    "point": r.label,
                    "half": "fit" if r.train else "held-out",
                    "compiled_bytes": r.compiled_bytes,
                    "model_bytes": round(r.predicted_bytes),
                    "error": round(r.error, 4),
                    "peak_op": r.peak_op,
                }
                for r in self.rows
            ],
        }


def evaluate(
    *, train: list[GridPoint], held_out: list[GridPoint], per_stack: bool = False, form: str = "named"
) -> Evaluation:
    """Fit on ``train`` only; every point's prediction and error (held-out ones never seen by the fit).
    ``per_stack``: one coefficient set a stack (``group[0]``), named ``<stack>.<coefficient>``."""
    if not held_out:
        raise ValueError("no held-out points")
    stacks = sorted({p.group[0] for p in train}) if per_stack else [None]
    coef: dict[str, float] = {}
    rows = []
    for st in stacks:
        mine = lambda ps: [p for p in ps if st is None or p.group[0] == st]  # noqa: E731
        c = fit_coefficients(mine(train), form)
        coef.update({(k if st is None else f"{st}.{k}"): v for k, v in c.items()})
        rows += [
            Row(p.label, t, p.compiled_bytes, predict(c, p), p.peak_op)
            for p, t in [*((q, True) for q in mine(train)), *((q, False) for q in mine(held_out))]
        ]
    return Evaluation(coef=coef, rows=rows)
