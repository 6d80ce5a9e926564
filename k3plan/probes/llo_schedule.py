"""A Mosaic kernel's static schedule, read from the TPU compiler's own output (issue 38): the final LLO bundles
libtpu writes for a kernel when asked (``--xla_jf_dump_to=DIR --xla_jf_dump_llo_text=true
--xla_jf_dump_llo_pass_label_regex=final_bundles``), for a TPU it compiles for without one (deviceless).

A TPU TensorCore is a VLIW machine: each bundle is one cycle's issue, statically scheduled. A Pallas kernel's
grid is one loop; inside it, a ``lax.switch`` over gmm_v2's row buckets compiles to straight-line bodies, one a
bucket, skipped over by branches. So a grid step costs the loop's bundles less the bodies it does not run::

    step bundles(bucket) = loop bundles - sum(bodies) + body(bucket)

with the bodies ordered by their MXU pushes (``vmatmul``: a bucket of 2 x 64 rows pushes twice a 64-row one's).
This counts issue slots, not stalls (a DMA wait, a bank conflict): a kernel bound by its DMAs takes longer than
its schedule, and the static count says nothing of that -- ``docs/device.md`` checks it against measured calls.
A taken branch's delay slots (the few bundles after it, which issue either way) are counted with the body they
open, not with the step that skips it: a few bundles a step against gmm_v2's 5,000-50,000. The code after the
switch sits at the end of the last-placed body (the others branch to it), so a bucket other than that one is
counted without it (about 200 bundles); gmm_v2 places its smallest bucket last, the one K3's calls take.

    parse_bundles(text) -> BundleSchedule; profile_cycles(textproto) -> int (XLA's static LLO profile)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ROW = re.compile(r"^\s*(0x[0-9a-f]+|\d+)\s+(\w\w:)?")
_PROFILE = re.compile(r"estimated_cycles:\s*(\d+)")


@dataclass(frozen=True)
class Body:
    """A straight-line stretch between two branches that pushes to the MXU: one bucket's matmul."""

    start: int  # first bundle's address
    end: int  # the next branch's address
    bundles: int
    matmuls: int  # vmatmul issues


@dataclass(frozen=True)
class BundleSchedule:
    kernel: str | None  # the custom call's name, from the exit bundle
    bundles: int
    loop_bundles: int  # the grid loop, from its body's first bundle to its back branch
    bodies: tuple[Body, ...]  # in order of their MXU pushes (bucket 0 first)

    @property
    def outside(self) -> int:
        """Bundles run once a call: before the grid loop and after it."""
        return self.bundles - self.loop_bundles

    def step_bundles(self, bucket: int) -> int:
        """Bundles one grid step issues when it takes ``bucket`` (0: the smallest row bucket)."""
        if not self.bodies:
            return self.loop_bundles
        if not 0 <= bucket < len(self.bodies):
            raise ValueError(f"bucket {bucket}: the kernel has {len(self.bodies)} bucket bodies")
        return self.loop_bundles - sum(b.bundles for b in self.bodies) + self.bodies[bucket].bundles


def _address(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


def parse_bundles(text: str) -> BundleSchedule:
    """The schedule of one kernel's ``final_bundles`` dump: its grid loop (the last loop-body marker before the
    first bucket body, to the last branch) and its bucket bodies. ValueError where the text has no loop."""
    rows: list[tuple[int, str | None, str]] = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((_address(m.group(1)), m.group(2), line))
    if not rows:
        raise ValueError("no bundles: expected libtpu's final_bundles dump of one kernel")
    branches = sorted({a for a, _, line in rows if "sbr.rel" in line})
    bodies = []
    for lo, hi in zip(branches, branches[1:]):
        seg = [line for a, _, line in rows if lo < a < hi]
        pushes = sum(line.count("vmatmul") for line in seg)
        if pushes:
            bodies.append(Body(start=lo + 1, end=hi, bundles=len(seg), matmuls=pushes))
    loop_heads = [a for a, tag, _ in rows if tag == "LB:"]
    first = bodies[0].start if bodies else (branches[-1] if branches else rows[-1][0])
    heads = [a for a in loop_heads if a < first]
    if not heads or not branches:
        raise ValueError("no grid loop (a loop-body marker and a back branch) in the bundles")
    head, back = max(heads), branches[-1]
    loop = sum(1 for a, _, _ in rows if head <= a <= back)
    name = re.search(r"exit bundle: %([^\s=]+)", text)
    return BundleSchedule(
        kernel=name.group(1) if name else None,
        bundles=len(rows),
        loop_bundles=loop,
        bodies=tuple(sorted(bodies, key=lambda b: b.matmuls)),
    )


def profile_cycles(textproto: str) -> int:
    """The estimated cycles of every op in XLA's static LLO profile (``--xla_jf_dump_static_llo_profile_to``)."""
    found = [int(x) for x in _PROFILE.findall(textproto)]
    if not found:
        raise ValueError("no estimated_cycles in the static profile")
    return sum(found)
