"""The baseline file: what `k3plan check` compares against (JSON or YAML, by the file's suffix).

::

    {"format": "k3plan-baseline", "format_version": 1, "k3plan_version": "0.1.0",
     "configurations": [{"name": ..., "config": {model, hardware, topology, tp, ep, dp, stack,
                         kv_dtype, context_tokens, batch}, "expected": {...}}]}

A file whose entries have no ``expected`` yet is a seed: ``k3plan check --update`` fills it in.
A corrupt file or another ``format_version`` is a user error (exit 2, one line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import msgspec
import yaml

from k3plan import __version__
from k3plan.check.names import FoldedGroup, NonNegativeInt, PositiveInt
from k3plan.engines.stack import DEFAULT_STACK
from k3plan.errors import K3PlanError
from k3plan.io_safe import write_text
from k3plan.safeparse import MAX_TEXT_BYTES, MAX_YAML_BYTES, not_a_file, parse_json, parse_yaml, read_text
from k3plan.specfile import Spec, convert
from k3plan.structs import dump, fields, replace

FORMAT = "k3plan-baseline"
FORMAT_VERSION = 1

# A baseline is read strictly (specfile.convert): a byte count written as "123" or 1.5, or `fits: 1`, is a
# corrupt baseline, not a value.


class Config(Spec):
    model: str = "kimi-k3"
    hardware: str = "tpu-v7x"
    topology: Optional[str] = None
    tp: Optional[PositiveInt] = None
    ep: Optional[PositiveInt] = None
    dp: Optional[PositiveInt] = None
    stack: str = DEFAULT_STACK  # the TPU default engine (Engine.default_rank)
    kv_dtype: Optional[str] = None
    context_tokens: PositiveInt = 131072
    batch: PositiveInt = 1

    def label(self) -> str:
        split = f"tp{self.tp}" if self.tp else "default split"
        where = f"{self.hardware} {self.topology or 'default'} {split} {self.stack}"
        return f"{where} {self.context_tokens:,} tokens x{self.batch}"  # exact tokens, as every output prints them


class Split(Spec):
    """The (tp, ep, dp) split fit chose; pp only when > 1 (as sharding.mesh.Parallel dumps it)."""

    tp: PositiveInt
    ep: PositiveInt
    dp: PositiveInt
    pp: PositiveInt = 1

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.pp <= 1:
            out.pop("pp", None)
        return out

    def text(self) -> str:
        return str(dump(self, "python"))


class DeviceTerms(Spec):
    """fit's per-device terms (bytes; budget.result.PerDevice, the same fields in its order: a baseline is an
    input, validated here), checked strictly; free_bytes (which may be < 0) and sequences are for information."""

    weights_bytes: int
    replicated_weights_bytes: int
    kv_bytes: int
    state_bytes: int
    temp_bytes: int
    reserve_bytes: int
    free_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    sequences: int

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [(k, getattr(self, k)) for k in fields(self) if getattr(self, k) < 0 and not k.startswith("free")]
        if bad:
            raise ValueError(f"{bad[0][0]} is {bad[0][1]}; expected a byte count >= 0")


class Expected(Spec):
    parallel: Split
    per_device: DeviceTerms
    kv_bytes_per_token: NonNegativeInt  # one copy of the model's KV, bytes a token
    state_bytes_per_sequence: NonNegativeInt  # one copy of the KDA state, bytes a sequence
    fits: bool
    replicated: dict[str, FoldedGroup]  # name pattern -> group, of the fully replicated tensors
    fallbacks: dict[str, FoldedGroup]  # name pattern -> group, of tensors with a divisibility fallback


class Entry(Spec):
    name: str = ""  # default: the configuration's label
    config: Config
    expected: Optional[Expected] = None


class Baseline(Spec):
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    k3plan_version: str = __version__
    description: str = ""
    # an empty baseline would pass while checking nothing
    configurations: Annotated[list[Entry], msgspec.Meta(min_length=1)]


def _read(path: Path) -> Any:
    label = f"--baseline {path}"
    is_json = path.suffix.lower() == ".json"
    text = read_text(label, path, MAX_TEXT_BYTES if is_json else MAX_YAML_BYTES)
    try:
        return parse_json(label, text) if is_json else parse_yaml(label, text)
    except K3PlanError as err:
        why = str(err).removeprefix(f"{label}: ")
        raise K3PlanError(
            f"{label}: corrupt {'JSON' if is_json else 'YAML'} ({why}); restore it from version "
            "control or regenerate it with --update"
        ) from None


def load_baseline(path: Path, *, seed_ok: bool = False) -> Baseline:
    """Read and validate; ``seed_ok`` lets entries lack ``expected`` (for --update)."""
    if not path.is_file():
        raise K3PlanError(f"--baseline {path}: {not_a_file(path)}; expected a baseline JSON file")
    raw = _read(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("configurations"), list):
        raise K3PlanError(f"--baseline {path}: not a k3plan baseline (expected a mapping with a 'configurations' list)")
    if raw.get("format", FORMAT) != FORMAT:
        raise K3PlanError(f"--baseline {path}: format {raw.get('format')!r} is not {FORMAT!r}")
    if "format_version" not in raw and not seed_ok:
        raise K3PlanError(f"--baseline {path}: a seed without recorded values (no format_version); run with --update")
    version = raw.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise K3PlanError(
            f"--baseline {path}: format_version {version!r} (written by k3plan "
            f"{raw.get('k3plan_version', '?')}) is incompatible with k3plan {__version__}, which reads "
            f"format_version {FORMAT_VERSION}; regenerate it with this k3plan's --update"
        )
    base = convert(Baseline, raw, f"--baseline {path}")
    base = replace(
        base, configurations=[e if e.name else replace(e, name=e.config.label()) for e in base.configurations]
    )
    names = [e.name for e in base.configurations]
    if len(set(names)) != len(names):
        raise K3PlanError(f"--baseline {path}: configuration names must be unique")
    missing = [e.name for e in base.configurations if e.expected is None]
    if missing and not seed_ok:
        raise K3PlanError(f"--baseline {path}: configuration {missing[0]!r} has no recorded values; run with --update")
    return base


def save_baseline(path: Path, base: Baseline) -> None:
    data = dump(replace(base, k3plan_version=__version__, format_version=FORMAT_VERSION))
    if path.suffix.lower() == ".json":
        text = json.dumps(data, indent=1) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, width=120)
    write_text(path, text, label="--baseline")
