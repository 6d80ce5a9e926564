"""probes/step/alternate.py: the tiled experts' intermediates the compiler placed in alternate memory (S(1)), read
from an optimized HLO's layouts, and the grid's placement file (reports/probes/grid-placement-20261204/) against the
profiles that showed the placement (reports/probes/grid-profile-20261204/README.md). No device."""

from __future__ import annotations

from k3plan.probes.step.alternate import placements, shares

BODY = 'metadata={op_name="jit(decode)/while/body/closed_call/%s"}'
HLO = "\n".join(
    [
        "  %broadcast_in_dim.155 = u8[4,3072,1792,2]{1,0,3,2:T(4,128)(4,1)S(1)} broadcast(%copy.90), "
        + BODY % "broadcast_in_dim",
        "  %broadcast_in_dim.158 = bf16[4,3072,112,32]{1,3,2,0:T(8,128)(2,1)} broadcast(%c), "
        + BODY % "broadcast_in_dim",
        "  %pad.96 = bf16[5,3584,3072]{2,1,0:T(8,128)(2,1)S(1)} pad(%fusion.113, %constant.192), "
        + BODY % "concatenate",
        "  %pad.97 = bf16[5,3072,3584]{2,1,0:T(8,128)(2,1)} pad(%fusion.115, %constant.192), " + BODY % "concatenate",
        # outside a loop body, and a small pad: not tile intermediates
        '  %pad.9 = bf16[5,3584,3072]{2,1,0:T(8,128)(2,1)S(1)} pad(%f, %c), metadata={op_name="jit(decode)/concatenate"}',
        "  %pad.95 = bf16[4,3,1,12288]{3,0,2,1:T(4,128)(2,1)} pad(%p, %c), " + BODY % "stack",
    ]
)


def test_placements_read_the_layouts_memory_space():
    assert placements(HLO) == {"packed_repeat": (1, 1), "scale_broadcast": (0, 1), "zero_group_pad": (1, 2)}
    assert shares(HLO) == {"packed_repeat": 1.0, "scale_broadcast": 0.0, "zero_group_pad": 0.5}
    assert shares("") == {}


def test_the_grid_placement_file_matches_the_profiles():
    """The placement compiled on the chip, at the points the profiles showed: every buffer in S(1) at one row a
    group, none at 4 and 64 rows (2 and 4 layers), 18 of 21 at 16 rows with 8 layers (the first MoE layer's three in
    HBM: its tile scan 15.7 ms, the others' 9.2-9.8)."""
    from k3plan.probes.step.grid_table import placements as placed

    p = placed()
    key = lambda layers, b, c: ("torchtpu-vllm", "runtime", layers, 16, "decode", b, c)  # noqa: E731
    assert set(p[key(2, 1, 2048)].values()) == {1.0} == set(p[key(4, 1, 2048)].values())
    assert set(p[key(2, 4, 2048)].values()) == {0.0} == set(p[key(4, 64, 32768)].values())
    assert p[key(8, 16, 8192)]["zero_group_pad"] == 18 / 21
