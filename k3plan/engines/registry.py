"""The engines k3plan prices: one folder each under ``k3plan/engines/`` (a ``stack.yaml`` and an ``__init__.py``
holding ``ENGINE``, a ``k3plan.engines.engine.Engine``), found by looking, so adding an engine is adding a folder.
A stack reference (``sglang:mem_fraction_static=0.85``, an old name, a YAML path) is parsed once into a
``StackRef``; its engine is looked up by the name it carries.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path

import msgspec

from k3plan.engines.engine import Engine, HbmWorker
from k3plan.errors import K3PlanError

ENGINES_DIR = Path(__file__).resolve().parent


class StackRef(msgspec.Struct, frozen=True):
    """``NAME[:option=value[,option=value...]]`` as ``--stack`` takes it: the stack's name (a bundled engine's, an
    old name, or a YAML path) and the options given ('+' joins them too, for comma-separated lists such as plan
    --stacks)."""

    name: str
    options: dict[str, str] = {}

    @classmethod
    def parse(cls, ref: str) -> StackRef:
        base, sep, opts = ref.partition(":")
        if not sep or "=" not in opts:
            return cls(name=ref)
        values: dict[str, str] = {}
        for part in opts.replace("+", ",").split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise K3PlanError(f"stack {ref!r}: expected NAME:option=value[,option=value...]")
            if key.strip().replace("-", "_") in {k.replace("-", "_") for k in values}:  # was: the last one won
                raise K3PlanError(f"stack {ref!r}: option {key.strip()!r} is given twice; expected each option once")
            values[key.strip()] = value.strip()
        return cls(name=base, options=values)


def discover(root: Path, package: str) -> dict[str, Engine]:
    """name and old name -> Engine, for every folder of ``root`` (the package ``package``) that holds a
    ``stack.yaml`` and an ``__init__.py``; a folder whose ``ENGINE`` is missing, names another folder's files or
    repeats a name is an error naming the folder."""
    out: dict[str, Engine] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if not ((folder / "stack.yaml").is_file() and (folder / "__init__.py").is_file()):
            continue
        engine = getattr(importlib.import_module(f"{package}.{folder.name}"), "ENGINE", None)
        if not isinstance(engine, Engine):
            raise K3PlanError(f"engine folder {folder}: its __init__.py defines no ENGINE (a k3plan Engine)")
        if engine.package != folder.name or engine.stack_path.resolve() != (folder / "stack.yaml").resolve():
            raise K3PlanError(f"engine folder {folder}: ENGINE {engine.name!r} describes another folder's files")
        if engine.name.replace("-", "_") != folder.name:
            raise K3PlanError(
                f"engine folder {folder}: expected the folder of engine {engine.name!r} to be named "
                f"{engine.name.replace('-', '_')!r}"
            )
        for name in engine.names:
            if name in out:
                raise K3PlanError(f"engine name {name!r}: held by {out[name].package} and {folder.name}")
            out[name] = engine
    return out


@lru_cache(maxsize=1)
def registry() -> dict[str, Engine]:
    """name and old name -> Engine, for the engines shipped (the folders of k3plan/engines/)."""
    return discover(ENGINES_DIR, __package__ or "k3plan.engines")


def engines() -> list[Engine]:
    """Every engine shipped, once, by name."""
    return sorted({e.name: e for e in registry().values()}.values(), key=lambda e: e.name)


def engine_names() -> list[str]:
    """The bundled stacks' names (old names left out), sorted."""
    return [e.name for e in engines()]


def aliases() -> dict[str, str]:
    """An old name -> the engine name it now loads."""
    return {a: e.name for e in engines() for a in e.aliases}


def canonical(name: str) -> str:
    """An old name's engine name; any other name as given."""
    return aliases().get(name, name)


def find_engine(ref: str | StackRef) -> Engine | None:
    """The engine a stack reference names (its name or an old name, options ignored); None for a name no folder
    holds (a user's stack YAML)."""
    name = ref.name if isinstance(ref, StackRef) else StackRef.parse(ref).name
    return registry().get(name)


def engine_rules(ref: str | StackRef) -> Engine:
    """The engine whose rules a stack follows: its own, or for a stack no folder holds (a user's YAML), those of
    the engine that prices such stacks (``Engine.prices_unnamed``)."""
    found = find_engine(ref)
    if found is not None:
        return found
    return next(e for e in engines() if e.prices_unnamed)


def hbm_worker_for(ref: str | StackRef) -> HbmWorker:
    """The worker that sizes a ``utilization_minus_resident`` pool: the stack's engine's own; for a stack no folder
    holds (a user's YAML), the first default's (by ``Engine.default_rank``) that has one -- the torch_tpu plugin's,
    whose worker the method was written for."""
    found = find_engine(ref)
    if found is not None and found.hbm_worker is not None:
        return found.hbm_worker
    ranked = sorted(
        (e for e in engines() if e.hbm_worker is not None and e.default_rank is not None),
        key=lambda e: e.default_rank or 0,
    )
    worker = ranked[0].hbm_worker
    assert worker is not None
    return worker


def stack_path(name: str) -> Path:
    """The stack YAML of a bundled engine (its name or an old name)."""
    engine = find_engine(name)
    if engine is None:
        raise K3PlanError(f"unknown stack {name!r}; known: {', '.join(engine_names())}")
    return engine.stack_path
