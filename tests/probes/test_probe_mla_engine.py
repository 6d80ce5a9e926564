"""probe mla-engine (issue 38): an engine's MLA ragged paged attention kernel loaded from a file at run time, timed
in a loop; on CPU with tests/probes/mla_standin.py (a jnp attention with the kernel's call signature), no TPU, no
network, no kernel source. The committed TPU v5 lite record (k3plan/evidence/probes/mla-engine-tpu-v5-lite-*.json) says
what the engine's own kernel costs at K3's per-device shapes and block sizes."""

from __future__ import annotations

import json
from pathlib import Path

from k3plan.evidence.probe_record import CPU_LABEL, ProbeRecord
from k3plan.probes.mla_engine import MlaPoint, causal_keys, mla_cost
from k3plan.specfile import convert
from k3plan.structs import dump

STANDIN = Path(__file__).resolve().parent / "mla_standin.py"
SMALL = ("--tokens", "32", "--contexts", "32,64", "--page", "16", "--max-len", "128", "--decode-contexts", "64")


def _records(out: Path) -> list[ProbeRecord]:
    return [convert(ProbeRecord, json.loads(p.read_text()), p.name) for p in sorted(out.glob("*.json"))]


def test_causal_keys_and_what_a_call_moves():
    assert causal_keys(1, 8192) == 8192  # a decode row sees the whole context
    assert causal_keys(512, 512) == 512 * 513 // 2
    assert causal_keys(512, 8192) == 512 * 7680 + 512 * 513 // 2
    pt = MlaPoint(rows=512, real=512, context=8192, queries=16, pages=1, decode=False)
    moved, flops, kernel_kv = mla_cost(pt, heads=3, lkv=512, rope=64, page=192)
    row = 640 * 2  # 576 values stored in a 640-wide bf16 row
    assert moved["cached_kv_bytes"] == 7680 * row and moved["q_bytes"] == 512 * 3 * 576 * 2
    assert flops == 2 * 3 * causal_keys(512, 8192) * (576 + 512)
    # 32 query blocks of 16, each reading the pages up to its last key: the context again a block
    per_block = [-(-(7680 + 16 * (i + 1)) // 192) * 192 * row for i in range(32)]
    assert kernel_kv == sum(per_block) > 31 * 7680 * row
    tuned = MlaPoint(rows=512, real=512, context=8192, queries=512, pages=8, decode=False)
    assert mla_cost(tuned, heads=3, lkv=512, rope=64, page=192)[2] == -(-8192 // 1536) * 1536 * row


def test_mla_probe_times_the_kernel_file_and_checks_its_numerics(run_probe_cli):
    result, _, out = run_probe_cli("mla-engine", "--kernel", str(STANDIN), *SMALL)
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(out)
    assert rec.probe == "mla-engine" and rec.backend == "cpu" and rec.label.startswith(CPU_LABEL)
    assert rec.ok and rec.verified is True and len(rec.verification) == 3
    assert rec.params["kernel"]["source"]["path"] == "tests/probes/mla_standin.py"
    assert convert(ProbeRecord, json.loads(json.dumps(dump(rec))), "a record") == rec
    got = [(p.params["pass"], p.params["context"], p.params["real_rows"]) for p in rec.points]
    assert got == [("mixed", 32, 32), ("mixed", 64, 32), ("decode", 64, 1)]
    for p in rec.points:
        assert p.value == p.stats.p50 > 0 and p.params["ceiling_s"] is None  # CPU: no spec, no ceiling
        assert (p.params["queries_a_block"], p.params["pages_a_block"]) == (
            (16, 1) if p.params["pass"] == "mixed" else (1, 3)
        )


def test_a_kernel_that_attends_wrong_is_not_ok(run_probe_cli, tmp_path):
    wrong = tmp_path / "wrong_mla.py"
    wrong.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('standin', {str(STANDIN)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "def mla_ragged_paged_attention(*a, **k):\n"
        "    out, cache = mod.mla_ragged_paged_attention(*a, **k)\n"
        "    return out * 1.5, cache\n"
    )
    result, _, out = run_probe_cli(
        "mla-engine",
        "--kernel",
        str(wrong),
        *SMALL[:4],
        "--page",
        "16",
        "--max-len",
        "128",
        "--decode-contexts",
        "none",
    )
    assert result.exit_code == 1  # a failed check: the record says so, exit 1
    (rec,) = _records(out)
    assert not rec.ok and rec.verified is False and "float64 numpy attention" in (rec.error or "")


def test_bad_arguments_are_one_line(run_probe_cli):
    for args, needle in (
        (("--kernel", str(STANDIN), "--blocks", "16"), "expected AxB"),
        (("--kernel", str(STANDIN), "--decode-blocks", "1x3,1x6"), "one QUERIESxPAGES"),
        (("--kernel", str(STANDIN), "--contexts", "20000"), "above --max-len"),
        (("--kernel", str(STANDIN), "--contexts", "256"), "holds its own 512"),
        (("--kernel", "no/such.py"), "no such file"),
    ):
        result, _, _ = run_probe_cli("mla-engine", *args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        assert needle in result.stderr and "Traceback" not in result.stderr
