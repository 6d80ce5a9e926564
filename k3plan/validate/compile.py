"""AOT lower + compile, and ``memory_analysis()`` wrapped once into a frozen stats object.

``Compiled.memory_analysis()`` may be None, raise, or change fields between jax versions; nothing
outside this module touches it. The TPU compiler refuses a program that does not fit with
"RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries
(X G) exceeds available HBM (Y G)"; that verdict is parsed into ``Oom`` (G = GiB, XLA's
HumanReadableNumBytes) instead of surfacing as a traceback.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from k3plan.structs import Frozen, fields
from k3plan.units import GiB, KiB, MiB, TiB

_UNITS = {"": 1, "B": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB}
_OOM_PATTERNS = (
    re.compile(r"HLO temporaries \(([\d.]+)\s*([KMGT]?)i?B?\) exceeds? available HBM \(([\d.]+)\s*([KMGT]?)i?B?\)"),
    re.compile(r"Used ([\d.]+)\s*([KMGT]?)i?B? of ([\d.]+)\s*([KMGT]?)i?B? hbm"),
)


class MemoryStats(Frozen):
    """Per device, bytes. On CPU ``peak_bytes`` excludes temp; on TPU it is the compiler's peak. A Struct
    (not a dataclass): validate's JobResult holds it, dumped through k3plan.structs.dump."""

    argument_bytes: Optional[int] = None
    output_bytes: Optional[int] = None
    alias_bytes: Optional[int] = None
    temp_bytes: Optional[int] = None
    generated_code_bytes: Optional[int] = None
    peak_bytes: Optional[int] = None
    host_temp_bytes: Optional[int] = None

    def to_dict(self) -> dict[str, Optional[int]]:
        return {name: getattr(self, name) for name in fields(self)}


@dataclass(frozen=True)
class Oom:
    required_bytes: Optional[int]
    available_bytes: Optional[int]
    message: str


@dataclass(frozen=True)
class CompileResult:
    stats: Optional[MemoryStats]
    lower_s: float
    compile_s: float
    hlo_text: str = ""
    oom: Optional[Oom] = None
    compiled: Any = None  # the executable (--target local runs it once)


def _field(raw: Any, *names: str) -> Optional[int]:
    for name in names:
        v = raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)
        if v is not None:
            try:
                return int(v)
            except (TypeError, ValueError):
                continue
    return None


def memory_stats(compiled: Any) -> Optional[MemoryStats]:
    """The one place memory_analysis() is read: None, a stats object, a dict or a list of them."""
    try:
        raw = compiled.memory_analysis()
    except Exception:
        return None
    if isinstance(raw, (list, tuple)):
        raw = raw[0] if raw else None
    if raw is None:
        return None
    return MemoryStats(
        argument_bytes=_field(raw, "argument_size_in_bytes"),
        output_bytes=_field(raw, "output_size_in_bytes"),
        alias_bytes=_field(raw, "alias_size_in_bytes"),
        temp_bytes=_field(raw, "temp_size_in_bytes"),
        generated_code_bytes=_field(raw, "generated_code_size_in_bytes"),
        peak_bytes=_field(raw, "peak_memory_in_bytes"),
        host_temp_bytes=_field(raw, "host_temp_size_in_bytes"),
    )


def parse_oom(message: str) -> Optional[Oom]:
    if "RESOURCE_EXHAUSTED" not in message and "Ran out of memory" not in message:
        return None
    first = next((ln.strip() for ln in message.splitlines() if "memory" in ln.lower()), message.strip().splitlines()[0])
    for pat in _OOM_PATTERNS:
        m = pat.search(message)
        if m:
            need = int(float(m.group(1)) * _UNITS[m.group(2)])
            have = int(float(m.group(3)) * _UNITS[m.group(4)])
            return Oom(required_bytes=need, available_bytes=have, message=first)
    return Oom(required_bytes=None, available_bytes=None, message=first)


def compile_step(jitted: Any, args: tuple, on_phase: Optional[Callable[[str], None]] = None) -> CompileResult:
    """``on_phase("lower")`` / ``on_phase("compile")`` as each starts (progress display)."""
    if on_phase:
        on_phase("lower")
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    t1 = time.perf_counter()
    if on_phase:
        on_phase("compile")
    try:
        compiled = lowered.compile()
    except Exception as err:
        oom = parse_oom(str(err))
        if oom is None:
            raise
        return CompileResult(stats=None, lower_s=t1 - t0, compile_s=time.perf_counter() - t1, oom=oom)
    t2 = time.perf_counter()
    try:
        text = compiled.as_text() or ""
    except Exception:
        text = ""
    return CompileResult(
        stats=memory_stats(compiled), lower_s=t1 - t0, compile_s=t2 - t1, hlo_text=text, compiled=compiled
    )
