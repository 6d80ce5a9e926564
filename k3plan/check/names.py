"""Tensor-name sets, compactly: ``layers.<N>.`` folded into one pattern with its layer ranges.

K3 replicates ~1,900 tensors on every device at TP=32 (norms, routers, q_a/kv_a projections);
a baseline lists them as ~30 patterns such as
``language_model.model.layers.*.input_layernorm.weight: {layers: "0-92", bytes: ...}``,
which expand back to the exact names, so a newly replicated tensor is still named exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Optional

import msgspec

from k3plan.specfile import Spec

_LAYER = re.compile(r"\.layers\.(\d+)\.")

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


class FoldedGroup(Spec):
    """Tensors of one name pattern: their layers ("0-92"; None: not per layer), how many, their bytes together.
    A baseline holds these (check.baseline reads it strictly: a count written as "3" is corrupt, not a value)."""

    layers: Optional[str]
    count: PositiveInt
    bytes: NonNegativeInt


def split_name(name: str) -> tuple[str, int | None]:
    m = _LAYER.search(name)
    if not m:
        return name, None
    return name[: m.start()] + ".layers.*." + name[m.end() :], int(m.group(1))


def ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(layers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_ranges(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def fold(by_name: Mapping[str, int]) -> dict[str, FoldedGroup]:
    """{tensor name: bytes} -> {pattern: FoldedGroup(layers "0-92" or None, count, bytes in all)}."""
    layers: dict[str, list[int]] = {}
    count: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for name, n in sorted(by_name.items()):
        pattern, layer = split_name(name)
        layers.setdefault(pattern, [])
        if layer is not None:
            layers[pattern].append(layer)
        count[pattern] = count.get(pattern, 0) + 1
        nbytes[pattern] = nbytes.get(pattern, 0) + n
    return {
        p: FoldedGroup(layers=ranges(ls) if ls else None, count=count[p], bytes=nbytes[p]) for p, ls in layers.items()
    }


def unfold(groups: Mapping[str, FoldedGroup]) -> set[str]:
    """The exact names a folded set stands for."""
    names: set[str] = set()
    for pattern, g in groups.items():
        if g.layers:
            names.update(pattern.replace(".layers.*.", f".layers.{n}.") for n in parse_ranges(g.layers))
        else:
            names.add(pattern)
    return names


def describe(names: list[str]) -> list[tuple[str, list[str]]]:
    """Names -> [(label, members)], one label per pattern ('...layers.{3,7-9}.q_proj.weight')."""
    folded: dict[str, list[tuple[int, str]]] = {}
    out: list[tuple[str, list[str]]] = []
    for n in sorted(names):
        pattern, layer = split_name(n)
        if layer is None:
            out.append((n, [n]))
        else:
            folded.setdefault(pattern, []).append((layer, n))
    for pattern, items in sorted(folded.items()):
        layers = [layer for layer, _ in items]
        sub = f".layers.{layers[0]}." if len(layers) == 1 else f".layers.{{{ranges(layers)}}}."
        out.append((pattern.replace(".layers.*.", sub), [n for _, n in items]))
    return out
