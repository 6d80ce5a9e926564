"""probe gmm (issue 38): an engine's grouped-matmul kernel loaded from a file at run time, timed in a loop; on CPU
with tests/probes/gmm_standin.py (lax.ragged_dot with gmm_v2's call signature), no TPU, no network, no kernel
source. The committed TPU v5 lite records (k3plan/evidence/probes/gmm-tpu-v5-lite-*.json) feed the gmm_v2 curves, which
transfer to TPU7x labelled and never above 1; the old ragged-dot records stay untransferred."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.evidence.probe_record import CPU_LABEL, ProbeRecord
from k3plan.specfile import convert
from k3plan.structs import dump

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "gmm_standin.py"
PROBES = REPO / "k3plan" / "evidence" / "probes"
SMALL = ("--experts", "4", "--d-in", "128", "--intermediate", "64", "--points", "8x2,12x4")


def _records(out: Path) -> list[ProbeRecord]:
    return [convert(ProbeRecord, json.loads(p.read_text()), p.name) for p in sorted(out.glob("*.json"))]


def test_gmm_probe_times_a_kernel_file_and_round_trips(run_probe_cli):
    result, _, out = run_probe_cli("gmm", "--kernel", str(STANDIN), *SMALL, "--weights", "float4_e2m1fn,bfloat16")
    assert result.exit_code == 0, result.stderr
    recs = _records(out)
    assert sorted(r.params["weight_dtype"] for r in recs) == ["bfloat16", "float4_e2m1fn"]
    for rec in recs:
        assert rec.probe == "gmm" and rec.backend == "cpu" and rec.label.startswith(CPU_LABEL)
        assert rec.ok and rec.verified is True and not rec.params["stand_in"]
        assert rec.params["kernel"]["source"]["path"] == "tests/probes/gmm_standin.py"
        assert rec.params["kernel"]["local_edits"] and len(rec.params["kernel"]["sha256"]) == 64
        assert rec.params["dispatch_floor_s"] > 0
        # the record round-trips through its JSON unchanged
        assert convert(ProbeRecord, json.loads(json.dumps(dump(rec))), "a record") == rec
        assert [(p.params["projection"], p.params["rows"], p.params["groups"]) for p in rec.points] == [
            ("w13", 8, 2),
            ("w2", 8, 2),
            ("w13", 12, 4),
            ("w2", 12, 4),
        ]
        for p in rec.points:
            q = p.params
            k, n = (128, 2 * 64) if q["projection"] == "w13" else (64, 128)
            bits = 4 if rec.params["weight_dtype"] == "float4_e2m1fn" else 16
            assert (q["k"], q["n"]) == (k, n)
            assert q["weight_bytes"] == q["groups"] * k * n * bits // 8
            assert q["scale_bytes"] == (q["groups"] * (k // 32) * n * 4 if bits == 4 else 0)
            assert q["touched_bytes"] == q["weight_bytes"] + q["scale_bytes"] + q["lhs_bytes"] + q["out_bytes"]
            assert q["flops"] == 2 * q["rows"] * k * n
            assert p.value == p.stats.p50 > 0 and p.unit == "s" and q["floor_s"] >= 0
            assert q["stream_s"] is None  # CPU: no spec, no ceiling, no fraction of a peak


def test_gmm_probe_falls_back_to_the_int4_stand_in_and_says_so(run_probe_cli, tmp_path):
    refusing = tmp_path / "refuses_fp4.py"
    refusing.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('standin', {str(STANDIN)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "SOURCE = {'repo': 'test', 'path': 'refuses_fp4.py', 'commit': 'none'}\n"
        "def gmm_v2(lhs, rhs, group_sizes, *args, **kw):\n"
        "    if 'float4' in str(rhs.dtype):\n"
        "        raise RuntimeError('Unsupported type f4E2M1FN (a compiler that refuses fp4)')\n"
        "    return mod.gmm_v2(lhs, rhs, group_sizes, *args, **kw)\n"
    )
    result, _, out = run_probe_cli("gmm", "--kernel", str(refusing), *SMALL, "--weights", "float4_e2m1fn")
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(out)
    assert rec.ok and rec.params["stand_in"] and rec.params["weight_dtype"] == "int4" and rec.fallback
    assert "STAND-IN" in rec.label and rec.attempts[0].ok is False and "f4E2M1FN" in rec.attempts[0].reason
    assert all(p.params["stand_in_for"] == "float4_e2m1fn" for p in rec.points)
    assert all(any("STAND-IN" in n for n in p.notes) for p in rec.points)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--kernel", "no/such/file.py"], "no such file"),
        (["--kernel", str(STANDIN), "--points", "8x40"], "groups must be 1..28"),
        (["--kernel", str(STANDIN), "--points", "8by2"], "ROWSxGROUPS"),
        (["--kernel", str(STANDIN), "--weights", "fp8"], "--weights"),
    ],
)
def test_gmm_probe_bad_input_is_one_line(cli, args, needle):
    result = cli("probe", "gmm", "--no-write", *args)
    assert result.exit_code == 2 and needle in result.stderr


def test_visit_rows_follow_fill_metadata_and_bucket_m():
    """256 rows over 28 experts (9 or 10 each) with fp4 tiles (base 64, tile_m 256): a group starts at most 15
    rows into its sublane block, so each is one visit of one 64-row bucket; 1024 rows (36 or 37 a group) cross 64
    where the offset is large: a visit's bucket is then 128."""
    from k3plan.step.gmm import gmm_v2_tiles, visit_mxu_rows

    tiles = gmm_v2_tiles(
        size_m=256, size_k=3584, size_n=6144, rhs_bits=4, quant_block=32, fused=True, vmem_limit=int(128 * 2**20 * 0.9)
    )
    assert (tiles.tile_m, tiles.base) == (256, 64)
    sizes = [256 // 28 + (1 if g < 256 % 28 else 0) for g in range(28)]
    assert visit_mxu_rows(sizes, tiles) == 28 * 64
    assert visit_mxu_rows([0, 5, 0], tiles) == 64  # an empty group is never visited
    big = [1024 // 28 + (1 if g < 1024 % 28 else 0) for g in range(28)]
    start, want = 0, 0
    for s in big:
        want += 64 * ((start % 16 + s) // 64 + 1)
        start += s
    assert visit_mxu_rows(big, tiles) == want


def test_v5e_gmm_records_make_transferred_gmm_v2_curves():
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.curves import NOT_TRANSFERRED, load_curves
    from k3plan.speed.peaks import Peaks

    v5e = load_curves(PROBES, peaks=Peaks.from_hardware(load_hardware("tpu-v5e")))
    w13 = v5e.curves["gmm_v2:mxfp4:w13"]
    assert all(p.transferred_from is None and 0 < p.efficiency <= 1 for p in w13.points)
    assert all("int4 stand-in for MXFP4" in p.detail for p in w13.points)  # every point says it is a stand-in
    bf16 = v5e.curves["gmm_v2:bf16:w13"]
    # the control: bf16 weights stream near the HBM peak; the 4-bit ones at well under half their ceiling
    assert min(p.efficiency for p in bf16.points) > 2 * max(p.efficiency for p in w13.points)
    v7x = load_curves(PROBES, peaks=Peaks.from_hardware(load_hardware("tpu-v7x")))
    for key in ("gmm_v2:mxfp4:w13", "gmm_v2:mxfp4:w2"):
        assert all(p.transferred_from and p.efficiency <= 1 for p in v7x.curves[key].points)
    assert "grouped_matmul:bf16" not in v7x.curves and "grouped_matmul" in NOT_TRANSFERRED  # ragged-dot stays


def test_a_routed_expert_op_reads_its_kernels_curve():
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.curves import load_curves
    from k3plan.speed.expected import op_time
    from k3plan.speed.peaks import Peaks
    from k3plan.step.opcost import OpCost

    peaks = Peaks.from_hardware(load_hardware("tpu-v7x"))
    curves = load_curves(PROBES, peaks=peaks)
    kw = dict(name="moe.experts.w13", kind="grouped_matmul", flops=1e9, bytes=10**8, tokens_per_group=9.0)
    plain = op_time(OpCost(**kw), peaks=peaks, curves=curves)
    engine = op_time(OpCost(**kw, curve="gmm_v2:mxfp4:w13"), peaks=peaks, curves=curves)
    assert plain.expected_s == plain.ceiling_s  # no XLA grouped-matmul curve on TPU7x
    e = engine.efficiency
    assert e.measured and "gmm-tpu-v5-lite" in e.label and 0 < e.value < 1
    assert engine.expected_s == pytest.approx(engine.ceiling_s / e.value)


def test_int4_records_are_int4_s_own_curve_and_kimi_k26_experts_read_it():
    """Kimi-K2.6's INT4 group-32 experts run gmm_v2 with rhs_quant_dtype=int4 (the plugin's W4A16 method): the v5e int4
    records are their own curve (not labelled a stand-in), transferred to TPU7x as MXFP4's are; the experts' tensors
    pick that curve and the gmm_v2 row tiling of a 4-bit, 32-block rhs."""
    from k3plan.engines.stack import load_stack
    from k3plan.hardware.loader import load_hardware
    from k3plan.models import load_model
    from k3plan.speed.curves import load_curves
    from k3plan.speed.peaks import Peaks
    from k3plan.step.gmm import FORMATS, kernel_curve_of

    v5e = load_curves(PROBES, peaks=Peaks.from_hardware(load_hardware("tpu-v5e")))
    own, stand_in = v5e.curves["gmm_v2:int4:w13"], v5e.curves["gmm_v2:mxfp4:w13"]
    assert [p.efficiency for p in own.points] == [p.efficiency for p in stand_in.points]
    assert not any("stand-in" in p.detail for p in own.points) and "gmm_v2:int4:w2" in v5e.curves
    v7x = load_curves(PROBES, peaks=Peaks.from_hardware(load_hardware("tpu-v7x")))
    assert all(p.transferred_from and p.efficiency <= 1 for p in v7x.curves["gmm_v2:int4:w13"].points)

    inv = load_model("kimi-k2.6").inventory
    curve_of = kernel_curve_of(load_stack("torchtpu-vllm"))
    assert curve_of is not None
    gate = inv.get("language_model.model.layers.1.mlp.experts.{e}.gate_proj.weight")
    down = inv.get("language_model.model.layers.1.mlp.experts.{e}.down_proj.weight")
    assert (curve_of(gate), curve_of(down)) == ("gmm_v2:int4:w13", "gmm_v2:int4:w2")
    assert FORMATS[gate.fmt] == (4, 32)
