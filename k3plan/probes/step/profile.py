"""Where a step's device time goes: the profiler's per-HLO-op device time (jax.profiler, the TPU plane's
"XLA Ops" line), summed by op over the traced calls, largest first. None where the backend's trace has
no device plane (CPU)."""

from __future__ import annotations

import collections
import glob
import re
import tempfile
from typing import Any, Callable, Optional

TOP = 25


def device_ops(call: Callable[[], Any], *, calls: int = 2, top: int = TOP) -> Optional[dict[str, Any]]:
    """Run ``call`` (which waits for its result) ``calls`` times under the profiler; -> {"ops": [[name, us a
    call, count a call], ...], "total_us": top-level ops' sum a call, "line": the line read} or None."""
    import jax

    folder = tempfile.mkdtemp(prefix="k3plan-profile-")
    try:
        with jax.profiler.trace(folder):
            for _ in range(calls):
                call()
        files = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
        if not files:
            return None
        data = jax.profiler.ProfileData.from_file(files[0])
    except Exception as err:  # a profiler that cannot run here: no breakdown, said so
        return {"error": f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"}
    by: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    spans: list[tuple[int, int]] = []
    for plane in data.planes:
        if not re.search(r"/device:(TPU|GPU):0$", plane.name):
            continue
        for line in plane.lines:
            if line.name != "XLA Ops":
                continue
            for ev in line.events:
                name = ev.name.split(" = ")[0].lstrip("%")
                by[name] += ev.duration_ns / calls / 1e3
                count[name] += 1
                spans.append((int(ev.start_ns), int(ev.start_ns + ev.duration_ns)))
    if not by:
        return None
    return {
        "line": "XLA Ops (device plane 0)",
        "busy_us_a_call": _union(spans) / calls / 1e3,
        "ops": [[n, round(us, 1), count[n] // calls] for n, us in by.most_common(top)],
    }


def _union(spans: list[tuple[int, int]]) -> float:
    """Nanoseconds covered by the spans (nested ops -- a while loop and its body -- counted once)."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return float(total)
