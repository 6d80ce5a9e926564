"""Tier (c) of the temp evidence (issue 15 items 1 and 3): the op-level live model with coefficients set on
compiled points, and its error band.

Where no measured or compiled calibration matches a configuration (k3plan.evidence), ``fit`` / ``plan`` /
``curve`` / ``report`` / ``check`` take a stage's temp from this model instead of the analytic lower bound,
for the (model, hardware kind, stacks) it was checked on. The shipped model
(``k3plan/evidence/temp_model.yaml``, written by ``benchmarks/bench_temp_grid.py --ship``) holds:

- the coefficients ``k3plan.validate.temp_fit`` set on the FIT half of the compiled grid
  (``reports/validation/temp-grid-k3lanes-tpu7x.json``: K3's per-device lane dims, deviceless tpu7x);
- a band a stack: the lowest and highest relative error (model / compiled - 1) over every point the
  coefficients never saw -- the grid's held-out half and every full-size point of the shipped TPU
  calibrations (compiled and measured). A prediction ``m`` then brackets the compiler's temp as
  [m / (1 + high), m / (1 + low)]; the verdict uses the upper end (and never less than the analytic
  bound), the output prints capacity at both ends.

A prefill chunk is modelled as one chunk into a cache of the chunk's size and a decode step at the
workload's batch and context, the points' own convention (the shipped calibrations key prefill on the chunk
alone). jax-free; numpy only through the live model's columns.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Optional

import msgspec

from k3plan.errors import K3PlanError
from k3plan.specfile import Spec, convert, read_yaml_mapping

MODEL_FILE = Path(__file__).resolve().parent.parent / "evidence" / "temp_model.yaml"
SHOWN = "k3plan/evidence/temp_model.yaml"  # the same name installed or not
Col = Any
# coefficient -> the live feature it multiplies (k3plan.step.live.live_features); c_live multiplies peak + resident
FEATURE_OF = {"c_peak": "peak", "c_rest": "rest", "c_resident": "resident", "c_cache": "cache"}


def _not_finite(value: Any) -> str | None:
    """How a value breaks allow_inf_nan=False (``"nan"``, ``"c_live: inf"``), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return next((f"{k}: {v!r}" for k, v in value.items() if isinstance(v, float) and not math.isfinite(v)), None)
    return None


class _F(Spec):
    """An input schema (a msgspec Struct), converted strictly; floats finite (allow_inf_nan=False)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in self.__struct_fields__:
            bad = _not_finite(getattr(self, name))
            if bad is not None:
                raise ValueError(f"{name}: {bad}: expected a finite number")


Error = Annotated[float, msgspec.Meta(gt=-1)]


class StackBand(_F):
    """A stack's error band: relative errors (model / compiled - 1) on points the fit never saw."""

    stack: str
    low_error: Error  # the most negative error: where the model under-predicted most
    high_error: Error
    points: Annotated[int, msgspec.Meta(gt=0)]
    low_point: str  # the point that set low_error
    high_point: str


class TempModel(_F):
    model: str  # the model the grid and the calibrations are of
    hardware_kind: str  # the compiler it was checked on (tpu)
    stacks: list[str]
    form: str
    per_stack: bool
    coefficients: dict[str, float]
    bands: list[StackBand]
    grid_record: str
    grid_fit_points: Annotated[int, msgspec.Meta(gt=0)]
    grid_held_out_points: Annotated[int, msgspec.Meta(ge=0)]
    backend: str
    device_kind: Optional[str] = None
    jax_version: Optional[str] = None
    libtpu_version: Optional[str] = None
    date: str
    source: str
    path: str = ""

    def applies(self, *, model: str, hardware_kind: str, stack: str) -> bool:
        from k3plan.evidence.calibrations import same_stack

        return (
            model == self.model
            and hardware_kind == self.hardware_kind
            and any(same_stack(stack, s) for s in self.stacks)
        )

    def applies_to(self, setup) -> bool:
        return self.applies(model=setup.model.name, hardware_kind=setup.hardware.kind, stack=setup.stack.name)

    def coef_for(self, stack: str) -> dict[str, float]:
        if not self.per_stack:
            return self.coefficients
        from k3plan.engines.registry import canonical

        pre = f"{next((s for s in self.stacks if canonical(s) == canonical(stack)), stack)}."
        return {k[len(pre) :]: v for k, v in self.coefficients.items() if k.startswith(pre)}

    def band_for(self, stack: str) -> StackBand:
        from k3plan.evidence.calibrations import same_stack

        return next(b for b in self.bands if same_stack(b.stack, stack))


def model_bytes(coef: dict[str, float], features: dict[str, Col]) -> Col:
    """The model's temp from the live features (k3plan.step.live.live_features), over columns."""
    m: Col = coef.get("c_fixed", 0.0)
    if "c_live" in coef:
        m = m + coef["c_live"] * (features["peak"] + features["resident"])
    for k, name in FEATURE_OF.items():
        if k in coef:
            m = m + coef[k] * features[name]
    return m


def band(m: Col, b: StackBand) -> tuple[Col, Col]:
    """(low, high) bytes the compiler's temp lies in, given the model's ``m`` and the stack's band."""
    return m / (1.0 + b.high_error), m / (1.0 + b.low_error)


@lru_cache(maxsize=4)
def load_temp_model(path_text: str | None = None) -> TempModel:
    path = Path(path_text) if path_text else MODEL_FILE
    label = f"temp model {path}"
    tm = convert(
        TempModel, {**read_yaml_mapping(label, path), "path": SHOWN if path_text is None else str(path)}, label
    )
    missing = sorted(set(tm.stacks) - {b.stack for b in tm.bands})
    if missing:
        raise K3PlanError(f"{label}: no band for stack(s) {', '.join(missing)}")
    return tm


def describe_model(tm: TempModel, stack: str) -> str:
    """The source line of a modelled stage: which file, fitted on what, and the band."""
    b = tm.band_for(stack)
    return (
        f"temp model {tm.path} (no measured or compiled point for this configuration): op-level live buffers "
        f"(k3plan.step.live) x coefficients set on {tm.grid_fit_points} compiled points of {tm.grid_record} "
        f"({tm.backend}, {tm.device_kind or 'device ?'}, jax {tm.jax_version or '?'}); the compiler's temp lies in "
        f"model x [{1 / (1 + b.high_error):.2f}, {1 / (1 + b.low_error):.2f}] (errors {b.low_error:+.0%} .. "
        f"{b.high_error:+.0%} on {b.points} points it never saw); the upper end counts"
    )


def setup_features(setup, *, stage: str, batch: int, tokens: int, context: int) -> dict[str, Col]:
    """The live features of one Setup's stage (a prefill chunk: ``tokens`` into a cache of ``context``)."""
    from k3plan.budget.temp import stage_live_of_setup
    from k3plan.step.live import live_features

    return live_features(*stage_live_of_setup(setup, stage=stage, batch=batch, tokens=tokens, context=context))


def modelled(tm: TempModel, setup, *, stage: str, batch: int, tokens: int, context: int) -> tuple[int, int, int]:
    """(model, low, high) bytes of one Setup's stage."""
    name = setup.stack.name
    m = model_bytes(tm.coef_for(name), setup_features(setup, stage=stage, batch=batch, tokens=tokens, context=context))
    lo, hi = band(m, tm.band_for(name))
    return int(m), int(lo), math.ceil(hi)


def full_size_errors(
    coefficients: dict[str, dict[str, float]], *, model: str, hardware_kind: str
) -> list[tuple[str, str, float]]:
    """(stack, point, model / temp - 1) for every point of the shipped calibrations of ``model`` on
    ``hardware_kind`` whose stack has coefficients: full-size points no coefficient was set on. A prefill
    point is one chunk into a cache of the chunk's size; a decode point without a recorded batch is read at
    batch 1."""
    from k3plan.evidence.calibrations import registry
    from k3plan.setup import make_setup

    out = []
    for ev in registry():
        cal = ev.calibration
        if cal.model != model or cal.stack not in coefficients or cal.backend != hardware_kind:
            continue
        setup = make_setup(
            model=cal.model, hardware=cal.hardware, topology=cal.topology, tp=cal.tp, ep=cal.ep, dp=cal.dp,
            stack=cal.stack, kv_dtype=ev.kv_dtype,
        )  # fmt: skip
        if setup.hardware.kind != hardware_kind:
            continue
        coef = coefficients[cal.stack]
        where = f"{cal.stack} {ev.kind} {cal.topology} tp{cal.tp}"
        pts = [("prefill", 1, p.tokens, p.tokens, p.temp_bytes, f"prefill {p.tokens}") for p in cal.prefill]
        pts += [
            ("decode", p.batch or 1, 1, p.context, p.temp_bytes, f"decode b{p.batch or '?'} ctx {p.context}")
            for p in cal.decode
        ]
        for stage, b, tokens, context, temp_bytes, what in pts:
            feats = setup_features(setup, stage=stage, batch=b, tokens=tokens, context=context)
            out.append((cal.stack, f"{where} {what}", float(model_bytes(coef, feats)) / temp_bytes - 1.0))
    return out


def build_model(record: dict, record_path: str, *, model: str = "kimi-k3", hardware_kind: str = "tpu") -> dict:
    """The shipped temp model (``temp_model.yaml``'s content) from a grid record with its fit
    (benchmarks/bench_temp_grid.py): the fit's coefficients, and a band a stack from the errors on the
    grid's held-out half and on every full-size point of the shipped calibrations."""
    fit = record["fit"]
    stacks = sorted({r["point"].split()[0] for r in fit["rows"]})
    per_stack = bool(fit["per_stack"])
    coef = {
        st: (
            {k.split(".", 1)[1]: v for k, v in fit["coefficients"].items() if k.startswith(f"{st}.")}
            if per_stack
            else dict(fit["coefficients"])
        )
        for st in stacks
    }
    errors = [
        (r["point"].split()[0], f"grid held-out {r['point']}", float(r["error"]))
        for r in fit["rows"]
        if r["half"] == "held-out"
    ]
    errors += full_size_errors(coef, model=model, hardware_kind=hardware_kind)
    bands = []
    for st in stacks:
        mine = [e for e in errors if e[0] == st]
        lo, hi = min(mine, key=lambda e: e[2]), max(mine, key=lambda e: e[2])
        bands.append(
            {
                "stack": st,
                "low_error": round(lo[2], 4),
                "high_error": round(hi[2], 4),
                "points": len(mine),
                "low_point": lo[1],
                "high_point": hi[1],
            }  # fmt: skip
        )
    env = record["environment"]
    dates = sorted(p["date"] for p in record["points"] if p.get("date"))
    return {
        "model": model,
        "hardware_kind": hardware_kind,
        "stacks": stacks,
        "form": fit["form"],
        "per_stack": per_stack,
        "coefficients": {k: float(v) for k, v in fit["coefficients"].items()},
        "bands": bands,
        "grid_record": record_path,
        "grid_fit_points": sum(1 for r in fit["rows"] if r["half"] == "fit"),
        "grid_held_out_points": sum(1 for r in fit["rows"] if r["half"] == "held-out"),
        "backend": env["backend"],
        "device_kind": env.get("devices", {}).get("device_kind"),
        "jax_version": env.get("jax_version"),
        "libtpu_version": env.get("libtpu_version"),
        "date": dates[-1] if dates else env.get("date", ""),
        "source": (
            "benchmarks/bench_temp_grid.py --ship: coefficients k3plan.validate.temp_fit set on the grid's fit half "
            "(deviceless compiles); band from the grid's held-out half and the shipped TPU calibrations' full-size points"
        ),
    }
