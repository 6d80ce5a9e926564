"""Issue 38: a Mosaic kernel's static schedule read from libtpu's final LLO bundles (k3plan.probes.llo_schedule)
and the gmm_v2 grid it is multiplied by (k3plan.probes.gmm_schedule.visit_buckets). The bundle text is a
hand-made miniature of the dump's form (address, marker, bundle); no libtpu, no TPU."""

import pytest

from k3plan.probes.gmm_schedule import visit_buckets
from k3plan.probes.llo_schedule import parse_bundles, profile_cycles


def _bundles() -> str:
    rows = ["= control target key start", "LB: loop body", "= control target key end", ""]
    rows += [f"  {hex(a) if a else 0}   :  {{ %s{a} = smov 0 }}" for a in range(3)]  # prologue: 3 bundles
    rows.append("   0x3 LB: > { %s3 = sld [smem:[#allocation7]] }")  # the grid loop's first bundle
    rows += [f"   {hex(a)}   : > {{ %s{a} = sadd.s32 1, %s2 }}" for a in range(4, 6)]
    rows.append("   0x6   : > { %6 = sbr.rel (%p1) target = $region9 }")  # the bucket switch
    rows += [
        f"   {hex(a)}   : > {{ %{a} = vmatmul.mubr.bf16.mxu0 %v1 ;; %v{a} = vunpack.c.l.s4 %v2 }}" for a in range(7, 17)
    ]
    rows.append("  0x11 PF: > { %17 = sbr.rel (%p2) target = $region11 }")  # skips the second body
    rows += [
        f"  {hex(a)}   : > {{ %{a} = vmatmul.mubr.bf16.mxu0 %v1 ;; %{a}b = vmatmul.mubr.bf16.mxu1 %v1 }}"
        for a in range(18, 38)
    ]
    rows.append("  0x26   : > { %38 = sbr.rel (!%p3) target = $region4 }")  # the back branch
    rows += [
        "  0x27 PF:  { %39 = sfence }",
        "  0x28 PF:  {} /* exit bundle: %gmm_v2-g_2-m_16-tm_16-tk_32-tn_128.1 = custom-call() */",
    ]
    return "\n".join(rows)


def test_a_grid_step_runs_the_loop_less_the_bodies_it_skips():
    s = parse_bundles(_bundles())
    assert s.kernel == "gmm_v2-g_2-m_16-tm_16-tk_32-tn_128.1"
    assert s.bundles == 41 and s.loop_bundles == 36 and s.outside == 5
    assert [(b.bundles, b.matmuls) for b in s.bodies] == [(10, 10), (20, 40)]  # bucket 0: fewer MXU pushes
    assert s.step_bundles(0) == 36 - 30 + 10 and s.step_bundles(1) == 36 - 30 + 20
    with pytest.raises(ValueError, match="bucket 2"):
        s.step_bundles(2)


def test_text_without_bundles_or_a_loop_is_refused():
    with pytest.raises(ValueError, match="no bundles"):
        parse_bundles("nothing here\n")
    with pytest.raises(ValueError, match="no grid loop"):
        parse_bundles("   0x0   :  { %s0 = smov 0 }\n   0x1   :  { %1 = sbr.rel (%p0) target = $region2 }\n")


def test_the_static_profile_sums_its_ops():
    text = 'hlo_op_estimate {\n  hlo_op_name: "fusion"\n  estimated_cycles: 282036\n}\n'
    assert profile_cycles(text + text.replace("282036", "4")) == 282040
    with pytest.raises(ValueError):
        profile_cycles("hlo_op_estimate {}")


def test_visits_take_the_bucket_of_their_rows():
    # K3's prefill chunk on a device: 256 rows over 28 experts, 9-10 a group: one visit each, all in the
    # smallest bucket (a group's end is at most 15 + 10 rows past its aligned start)
    sizes = [10] * 4 + [9] * 24
    assert visit_buckets(sizes, tile_m=256, base=64) == [0] * 28
    # a group of 200 rows from offset 0 ends 200 past its start: bucket 200 // 64 = 3 (256 rows)
    assert visit_buckets([200], tile_m=256, base=64) == [3]
    # 300 rows: a full tile of 256 (its bucket capped at the last), then 44 rows from offset 0
    assert visit_buckets([300], tile_m=256, base=64) == [3, 0]
    assert visit_buckets([0, 5], tile_m=16, base=16) == [0]  # an empty group is never visited


def test_bad_arguments_are_one_line_and_exit_2(capsys, tmp_path):
    from k3plan.probes.gmm_schedule import main

    assert main(["--kernel", str(tmp_path / "gmm_v2.py"), "--points", "256by28"]) == 2
    assert capsys.readouterr().err.strip() == "error: --points '256by28': expected ROWSxGROUPS, e.g. 256x28"
    assert main(["--points", "16x2", "--kernel", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["--points", "16x2"]) == 2
    assert "--kernel: expected" in capsys.readouterr().err
