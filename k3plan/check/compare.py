"""Compare a recomputed configuration with its baseline: the findings the gate fails on.

Fails: a per-device term grows beyond the tolerance; KV bytes a token or state bytes a sequence
change at all; a tensor is newly fully replicated or newly falls back; the configuration no longer
fits; the (tp, ep, dp) split changes. Reported but passing: terms that shrank, tensors no longer
replicated, a configuration that now fits (run --update to lock the improvement in).
"""

from __future__ import annotations

import re

from k3plan.check.baseline import DeviceTerms, Expected
from k3plan.check.measure import NOT_COMPARED, Measured
from k3plan.check.names import describe, unfold
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen, fields
from k3plan.units import fmt_gib, parse_bytes

EXACT = ("kv_bytes_per_token", "state_bytes_per_sequence")  # any change fails, either way


class Tolerance(Frozen):
    text: str
    percent: float | None = None
    bytes: int | None = None

    def allowed(self, baseline: int) -> int:
        return int(abs(baseline) * self.percent / 100) if self.percent is not None else int(self.bytes or 0)


def parse_tolerance(text: str) -> Tolerance:
    """'1%' (of each baseline term) or a size: '512MiB', '1GB', '0'."""
    t = str(text).strip()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*%", t)
    if m:
        return Tolerance(text=t, percent=float(m.group(1)))
    bare = re.fullmatch(r"[0-9]*\.?[0-9]+", t)
    if bare and float(t) != 0:  # issue 36: '5' had no unit (it was read as 5 bytes); 0 is exact either way
        raise K3PlanError(
            f"--tolerance {text!r}: no unit; expected '{t}%' (a percent of each recorded term) or a size such as "
            f"'{t}MiB' or '{t}B'"
        )
    try:
        return Tolerance(text=t, bytes=parse_bytes(t, what="--tolerance"))
    except K3PlanError:
        raise K3PlanError(
            f"--tolerance {text!r}: expected a percentage such as '1%' or a size such as '512MiB'"
        ) from None


class Finding(Frozen):
    configuration: str
    check: str  # term name, "replicated", "fallback", "fits", "split", "error"
    what: str  # one readable line
    baseline: int | str | None = None
    now: int | str | None = None
    delta_bytes: int | None = None
    fail: bool = True


def compare(name: str, base: Expected, now: Measured, *, tolerance: Tolerance) -> list[Finding]:
    out: list[Finding] = []
    cur = now.expected
    if cur.parallel != base.parallel:
        out.append(
            Finding(
                configuration=name,
                check="split",
                what="the (tp, ep, dp) split changed",
                baseline=base.parallel.text(),
                now=cur.parallel.text(),
            )
        )
    if base.fits != cur.fits:
        out.append(
            Finding(
                configuration=name,
                check="fits",
                fail=base.fits,
                what="no longer fits" if base.fits else "now fits (was: does not fit)",
                baseline=str(base.fits),
                now=str(cur.fits),
            )
        )
    exact = {**{k: getattr(base.per_device, k) for k in EXACT}, **{f"model {k}": getattr(base, k) for k in EXACT}}
    now_exact = {**{k: getattr(cur.per_device, k) for k in EXACT}, **{f"model {k}": getattr(cur, k) for k in EXACT}}
    for key, b in exact.items():
        if b != now_exact[key]:
            out.append(
                Finding(
                    configuration=name,
                    check=key,
                    what=f"{key} changed",
                    baseline=b,
                    now=now_exact[key],
                    delta_bytes=(now_exact[key] or 0) - (b or 0),
                )
            )
    for key in sorted(fields(DeviceTerms)):
        if key in NOT_COMPARED or key in EXACT:
            continue
        b, c = getattr(base.per_device, key), getattr(cur.per_device, key)
        d = c - b
        grew = d > tolerance.allowed(b)  # a failure; a shrink is reported but passes
        if grew or d < 0:
            out.append(
                Finding(
                    configuration=name,
                    check=key,
                    baseline=b,
                    now=c,
                    delta_bytes=d,
                    fail=grew,
                    what=f"{key} grew beyond the tolerance {tolerance.text}"
                    if grew
                    else f"{key} shrank by {fmt_gib(-d, 3)} (--update to lock it in)",
                )
            )
    out += _sets(name, "replicated", unfold(base.replicated), now.replicated_bytes, "newly replicated on every device")
    out += _sets(name, "fallback", unfold(base.fallbacks), now.fallback_bytes, "newly falls back to replication")
    return out


def _sets(name: str, check: str, before: set[str], now: dict[str, int], verb: str) -> list[Finding]:
    out = []
    for label, members in describe([n for n in now if n not in before]):
        nbytes = sum(now[n] for n in members)
        many = f" ({len(members)} tensors)" if len(members) > 1 else ""
        out.append(
            Finding(configuration=name, check=check, now=nbytes, delta_bytes=nbytes, what=f"{label}{many} {verb}")
        )
    for label, members in describe([n for n in before if n not in now]):
        many = f" ({len(members)} tensors)" if len(members) > 1 else ""
        out.append(Finding(configuration=name, check=check, fail=False, what=f"{label}{many} no longer {check}"))
    return out
