"""docs/expected-time.md quotes what `roofline` prints with a hand-made TPU7x HBM record (copy at 50% of
the spec's bandwidth at 1 MiB, 80% at 1 GiB): the decode table's ceiling and expected rows, the roofline
step with and without the record, the prefill's op-serial ceiling and the overlapped TTFT, and the
collective calls a decode step at TP 32 for each stack. Each is run and compared with the page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from k3plan.hardware import load_hardware

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "expected-time.md").read_text()
FLAT = " ".join(PAGE.split())
ARGS = ("roofline", "-t", "2x2x4", "--tp", "32", "--context", "8192")
KINDS = ("attention", "kda", "experts", "dense", "collectives", "overhead")


def said(pattern: str) -> re.Match:
    m = re.search(pattern, FLAT)
    assert m, f"docs/expected-time.md no longer says {pattern!r}"
    return m


@pytest.fixture(scope="module")
def with_record(tmp_path_factory) -> dict:
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    bw = load_hardware("tpu-v7x").hbm_bw_bytes_per_s_per_device
    assert f"{bw / 1e12:.2f} TB/s a device" in FLAT  # the page's "3.69 TB/s"
    rec = {
        "probe": "hbm",
        "op": "copy",
        "mode": None,
        "params": {},
        "backend": "tpu",
        "device_kind": "TPU7x",
        "device_count": 8,
        "date": "2026-11-30T00:00:00Z",
        "implementation": "xla",
        "label": None,
        "points": [
            {"params": {"bytes": 2**20}, "value": 0.5 * bw, "unit": "bytes/s"},
            {"params": {"bytes": 2**30}, "value": 0.8 * bw, "unit": "bytes/s"},
        ],
    }
    folder = tmp_path_factory.mktemp("tpurec")
    (folder / "hbm-tpu7x.json").write_text(json.dumps(rec))
    runner = CliRunner()
    out = {}
    with pytest.MonkeyPatch.context() as mp:  # the page's figures are the hand-made record's alone
        import k3plan.evidence.value as value

        mp.setattr(value, "SHIPPED_DIR", tmp_path_factory.mktemp("no-shipped-records"))
        for name, extra in (
            ("record", ("--probes", str(folder))),
            ("none", ("--probes", str(tmp_path_factory.mktemp("none")))),
        ):
            r = runner.invoke(app, [*ARGS, *extra, "--json"])
            assert r.exit_code == 0, r.output
            out[name] = json.loads(r.stdout)
    return out


def test_the_decode_table(with_record):
    x = with_record["record"]["expected"]["decode"]
    for row, key in (("ceiling", "ceiling_s"), ("expected", "expected_s")):
        m = said(
            rf"\| {row} \(ms\) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|"
        )
        now = [x[key]] + [x["by_kind"][k][key] for k in KINDS]
        assert [f"{v * 1e3:.3f}" for v in now] == list(m.groups()), row


def test_the_point_used_and_the_roofline_step(with_record):
    x = with_record["record"]["expected"]["decode"]
    q = next(o for o in x["ops"] if o["name"] == "mla.self_attn.q_b_proj")
    assert f"`{q['efficiency']['point_used']}`" in FLAT
    m = said(
        r"The op-serial decode ceiling \(([\d.]+) ms\) equals the roofline step without the record .*? "
        r"takes the probed bandwidth \(the record's best, 80%: ([\d.]+) ms\)"
    )
    assert f"{x['ceiling_s'] * 1e3:.3f}" == m[1] == f"{with_record['none']['decode']['step_s'] * 1e3:.3f}"
    assert f"{with_record['record']['decode']['step_s'] * 1e3:.3f}" == m[2]


def test_the_prefill_figures(with_record):
    m = said(r"\(([\d.]+) ms op-serial \+ ([\d.]+) ms; the roofline's overlapped prefill bound is ([\d.]+) ms\)")
    d = with_record["record"]
    p = d["expected"]["prefill"]
    assert f"{p['ceiling_s'] * 1e3:.2f}" == m[1] and f"{p['by_kind']['overhead']['expected_s'] * 1e3:.2f}" == m[2]
    assert p["expected_s"] == pytest.approx(p["ceiling_s"] + p["by_kind"]["overhead"]["expected_s"], rel=1e-12)
    assert f"{d['prefill']['ceiling_ttft_s'] * 1e3:.1f}" == m[3]


def test_collective_calls_a_decode_step_at_tp_32(cli):
    m = said(
        r"K3 decode at TP 32: jax-native (\d+) \+ (\d+) \+ 1 \+ 1 = (\d+) all-reduces \+ 2 all-gathers = "
        r"(\d+) calls a step \(was \d+\); vllm \(EP off\) \d+ \+ 1 = (\d+); torchtpu-vllm .*? \d+ \+ 2 x \d+ \+ 1 \+ 1 \+ 1 = "
        r"(\d+); SGLang \(DeepEP\) (\d+) all-to-all \+ (\d+) all-reduces \+ 1 all-gather = (\d+)"
    )
    attn, moe, reduces, calls, vllm, tt, a2a, sg_reduces, sglang = (int(g) for g in m.groups())
    assert attn + moe + 2 == reduces and reduces + 2 == calls and a2a + sg_reduces + 1 == sglang
    assert tt == attn + 2 * moe + 3 and vllm == reduces + 1
    for stack, want in (("torchtpu-vllm", tt), ("jax-native", calls), ("vllm", vllm), ("sglang", sglang)):
        r = cli("roofline", "-t", "2x2x4", "--tp", "32", "--context", "8192", "--stack", stack, "--json")
        assert r.exit_code == 0, r.output
        c = json.loads(r.stdout)["decode"]["comm"]
        assert c["calls_per_step"] == want, stack
        if stack == "torchtpu-vllm":
            assert (c["attention_calls_per_step"], c["expert_calls_per_step"]) == (attn, 2 * moe)
        if stack == "sglang":
            assert c["expert_calls_per_step"] == a2a
