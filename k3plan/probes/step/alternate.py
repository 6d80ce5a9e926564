"""Where the TPU compiler put the MXFP4 experts' tile intermediates (issue 50): read from a compiled step's
optimized HLO, no device and no jax.

validate's ``tiled`` experts (validate/experts.py ``_tiled``) unpack each tile's weight inside a scan over the tiles:
the packed bytes' repeat (``broadcast`` u8[.., 2]), the scale's broadcast (``broadcast`` [.., 32] in the activation
dtype) and the zero group's pad (``pad`` of the value, from ``concatenate``). The compiler's memory-space assignment
places each of these buffers either in HBM (layout memory space 0) or in the chip's alternate memory (``S(1)`` in
the HLO layout: on the v5e the 128 MiB VMEM a 4-expert tile's 88-110 MB buffer fits in). Which it picks is the
compiler's own cost model, not a rule k3plan derives: on the grid (reports/probes/grid-profile-20261204/) every
buffer went to S(1) at one row a group, none at 4-64 rows with 2 or 4 layers, and 18 of 21 at 16 rows with 8 layers.
A buffer in S(1) is written and read back without HBM traffic: the tile scan of an MoE layer took 9.0-9.8 ms with
them there against 15.6-15.7 ms in HBM (the same shapes). ``shares`` is what the expected step prices with
(step/graph.py ``ValidateGraph.alternate``).
"""

from __future__ import annotations

import re

PASSES = ("packed_repeat", "scale_broadcast", "zero_group_pad")
_INST = re.compile(r"\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\{([^}]*)\} ([\w-]+)\(")


def placements(hlo: str) -> dict[str, tuple[int, int]]:
    """(buffers in alternate memory, buffers) of each tile pass in ``PASSES``, over the HLO's instructions inside
    a loop body (one instruction per weight and MoE layer as the program holds them)."""
    out = {p: [0, 0] for p in PASSES}
    for line in hlo.splitlines():
        m = _INST.match(line)
        if m is None or "while/body" not in line:
            continue
        _, dtype, shape, layout, op = m.groups()
        dims = [int(x) for x in shape.split(",") if x]
        kind = None
        if op == "broadcast" and dtype == "u8" and len(dims) == 4 and dims[-1] == 2:
            kind = "packed_repeat"
        elif op == "broadcast" and dtype in ("bf16", "f32") and len(dims) == 4 and dims[-1] == 32:
            kind = "scale_broadcast"
        elif op == "pad" and len(dims) == 3 and dims[1] * dims[2] > 1 << 20 and "concatenate" in line:
            kind = "zero_group_pad"
        if kind is not None:
            out[kind][0] += "S(1)" in layout
            out[kind][1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def shares(hlo: str) -> dict[str, float]:
    """The share of each tile pass's buffers the compiler placed in alternate memory (only passes the HLO has)."""
    return {k: s / n for k, (s, n) in placements(hlo).items() if n}
