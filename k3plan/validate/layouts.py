"""Per-argument bytes as the compiler lays them out, read from ``entry_computation_layout``.

TPU layouts carry tiles, e.g. ``bf16[16,256]{1,0:T(8,128)(2,1)}``: the first tile pads the
minor-most dims (in layout order) up to its multiples; later tiles only rearrange within it. The
padded sum over the entry parameters equals memory_analysis()'s argument size, so the padding can
be attributed to weights, cache and step inputs exactly instead of being taken as a remainder.
"""

from __future__ import annotations

import math
import re
from typing import Optional

from k3plan.validate.hlo_census import _ITEM

_ENTRY = re.compile(r"entry_computation_layout=\{\((.*?)\)->")
_ARRAY = re.compile(r"([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]\{([\d,]*)(?::([^}]*))?\}")
_TILE = re.compile(r"T\(([\d,]+)\)")


def array_bytes(dtype: str, dims_text: str, minor_to_major: str, tiles: str) -> tuple[int, int]:
    """(logical bytes, laid-out bytes) of one array."""
    item = _ITEM[dtype]
    dims = [int(d) for d in dims_text.split(",") if d]
    found = _TILE.findall(tiles or "")
    if not dims:  # a scalar still takes a whole tile, e.g. s32[]{:T(128)} = 512 B
        tile = math.prod(int(x) for x in found[0].split(",")) if found else 1
        return item, tile * item
    order = [int(x) for x in minor_to_major.split(",")][::-1] if minor_to_major else list(range(len(dims)))
    d = [dims[i] for i in order]
    raw = math.prod(d) * item
    if found:
        first = [int(x) for x in found[0].split(",")]
        for k, t in enumerate(reversed(first)):
            if k < len(d):
                d[-1 - k] = math.ceil(d[-1 - k] / t) * t
    return raw, math.prod(d) * item


def entry_parameter_bytes(hlo_text: str) -> Optional[list[tuple[int, int]]]:
    """[(logical, laid out)] per entry parameter, in argument order; None if not readable."""
    m = _ENTRY.search(hlo_text)
    if not m:
        return None
    try:
        return [array_bytes(*a) for a in _ARRAY.findall(m.group(1))]
    except (KeyError, ValueError):
        return None


def padding_by_group(hlo_text: str, counts: dict[str, int]) -> Optional[dict[str, int]]:
    """Layout padding per argument group; ``counts`` gives each group's leaf count, in order."""
    per = entry_parameter_bytes(hlo_text)
    if per is None or len(per) != sum(counts.values()):
        return None
    out, i = {}, 0
    for name, n in counts.items():
        out[name] = sum(p - r for r, p in per[i : i + n])
        i += n
    return out
