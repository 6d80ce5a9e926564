"""The stage-to-stage send (--pp) is an op of the step (issue 10: one description of a step): the expected
table's collectives count it as the roofline bound does, on the link the bound uses. Every send figure is
written out here from K3's hidden size (7,168, docs/k3-facts.md), bf16 activations, the tokens, tp and the
hardware spec's link latency and bandwidth."""

from __future__ import annotations

import json

import pytest
from speed_helpers import record, write

from k3plan.hardware import load_hardware

HIDDEN, BF16, SENDS = 7168, 2, 2  # hidden_states + residual (vLLM IntermediateTensors), bf16 each
ARGS = ("roofline", "-t", "2x4x4", "--tp", "32", "--pp", "2", "--context", "16384")


def send_s(*, tokens: int, tp: int, hw: str, link: str) -> tuple[int, float]:
    """(bytes a chip, seconds) of one boundary's send: a device sends 1/tp of tokens x hidden x 2 tensors."""
    spec = load_hardware(hw)
    ln = spec.scale_out if link == "scale_out" else spec.scale_up
    chip_bytes = SENDS * tokens * HIDDEN * BF16 // tp * spec.devices_per_chip
    return chip_bytes, ln.latency_s + chip_bytes / ln.bw_bytes_per_s


def op(stage: dict, name: str) -> dict:
    return next(o for o in stage["ops"] if o["name"] == name)


def test_the_send_is_in_the_expected_table_and_the_ceiling_is_the_bound(cli):
    r = cli(*ARGS, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    dec, pre, x = out["decode"], out["prefill"], out["expected"]
    # decode: batch 1 as 2 microbatches of ceil(1/2) = 1 token; 2x4x4 is one ICI slice, 2 devices a chip
    assert load_hardware("tpu-v7x").devices_per_chip == 2
    chip_bytes, t = send_s(tokens=1, tp=32, hw="tpu-v7x", link="scale_up")
    assert chip_bytes == 2 * 1 * 7168 * 2 // 32 * 2 == 1_792
    assert t == pytest.approx(9.88e-6 + 1_792 / 600e9)  # tpu-v7x.yaml: ICI 9.88 us a call, 600 GB/s a chip
    assert f"{t * 1e3:.3f}" == "0.010"  # what the bound's "stage-to-stage sends" row prints
    assert dec["comm"]["pipeline_time_s"] == pytest.approx(t, rel=1e-12)
    assert op(x["decode"], "pipeline.send")["ceiling_s"] == pytest.approx(t, rel=1e-12)
    assert "ceiling: no measured efficiency for send over 2 devices on TPU7x" in x["decode"]["labels"]
    # batch 1 is memory-bound op by op, so the ops one after another are the bound's step, send included
    assert dec["binding"] == "memory"
    assert x["decode"]["ceiling_s"] == pytest.approx(dec["step_s"], rel=1e-9)
    assert x["decode"]["by_kind"]["collectives"]["ceiling_s"] == pytest.approx(
        dec["comm"]["latency_time_s"] + dec["comm"]["bandwidth_time_s"] + t, rel=1e-9
    )
    # prefill: the prompt in 2 chunks of 8,192 tokens, each crossing the one boundary
    chunks = pre["chunks"]
    assert (chunks, pre["chunk_tokens"]) == (2, 8192)
    chunk_bytes, tc = send_s(tokens=8192, tp=32, hw="tpu-v7x", link="scale_up")
    assert chunk_bytes == 2 * 8192 * 7168 * 2 // 32 * 2 == 14_680_064
    assert op(x["prefill"], "pipeline.send")["ceiling_s"] == pytest.approx(chunks * tc, rel=1e-12)
    c = pre["comm"]
    assert x["prefill"]["by_kind"]["collectives"]["ceiling_s"] == pytest.approx(
        chunks * (c["latency_time_s"] + c["bandwidth_time_s"] + tc), rel=1e-9
    )
    # the bound's TTFT counts the sends of every chunk too (ttft_s is the model's where a TPU7x record prices an op)
    assert pre["ceiling_ttft_s"] == pytest.approx(
        max(pre["compute_s"], chunks * c["bandwidth_time_s"]) + chunks * (c["latency_time_s"] + tc), rel=1e-12
    )
    text = cli(*ARGS, "--verbose").stdout
    assert "0.010 ms" in text and "stage-to-stage sends of every chunk" in text.replace("\n", " ")


def test_without_pipeline_no_send_op(cli):
    r = cli("roofline", "-t", "2x2x4", "--tp", "32", "-c", "8192", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    for stage in ("decode", "prefill"):
        assert all(o["name"] != "pipeline.send" for o in out["expected"][stage]["ops"])
        assert out[stage]["comm"]["pipeline_calls_per_step"] == 0
    assert out["expected"]["decode"]["ceiling_s"] == pytest.approx(out["decode"]["step_s"], rel=1e-9)


def test_stages_in_different_scale_up_domains_send_over_scale_out():
    """H200 2x8: two HGX hosts, a stage each: the send crosses InfiniBand (the bound's pipeline_link)."""
    from k3plan.roofline.bounds import Efficiency, decode_bound
    from k3plan.setup import make_setup
    from k3plan.speed.expected import op_time
    from k3plan.speed.peaks import Peaks
    from k3plan.speed.stage import decode_op_costs

    s = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, pp=2, stack="vllm")
    sends = [o for o in decode_op_costs(s, batch=8, context=32768) if o.name == "pipeline.send"]
    assert len(sends) == 1
    send = sends[0]
    chip_bytes, t = send_s(tokens=4, tp=8, hw="nvidia-h200", link="scale_out")  # 8 as 2 microbatches of 4
    assert chip_bytes == 2 * 4 * 7168 * 2 // 8 == 14_336  # one GPU a chip
    assert (send.link, send.collective, send.calls, send.count, send.wire_bytes) == ("scale_out", "send", 1, 1, 14_336)
    assert t == pytest.approx(20e-6 + 14_336 / 50e9)  # nvidia-h200.yaml: InfiniBand 20 us, 50 GB/s a GPU
    assert op_time(send, peaks=Peaks.from_hardware(s.hardware), curves=None).ceiling_s == pytest.approx(t)
    d = decode_bound(s, batch=8, context_tokens=32768, eff=Efficiency())
    assert d.comm.pipeline_time_s == pytest.approx(t)


def test_plan_expected_column_on_a_pipeline_row_is_roofline_expected(cli, tmp_path):
    """plan's expected TPOT of a pp row is the same op list (the microbatch and the send) as roofline's:
    a hand-made H200 all-reduce record over 8 GPUs at half its ceiling sets it."""
    hw = load_hardware("nvidia-h200")
    up = hw.scale_up
    ceiling = up.latency_s + 1000 / up.bw_bytes_per_s
    write(
        tmp_path,
        "ar8.json",
        record(
            "allreduce",
            [({"bytes": 1024, "wire_bytes_per_device": 1000}, 2 * ceiling, "s/call")],
            op="all-reduce",
            mode="chained",
            params={"axis_size": 8},
            device_kind=hw.device_kind,
            backend="gpu",
        ),
    )
    p = cli(
        "plan",
        "-H",
        "nvidia-h200",
        "--stacks",
        "sglang",
        "--max-chips",
        "16",
        "--max-pp",
        "2",
        "--top",
        "3",
        "--context",
        "32768",
        "--concurrency",
        "8",
        "--rank-by",
        "expected",
        "--probes",
        tmp_path,
        "--json",
    )
    assert p.exit_code == 0, p.output
    row = next(r for r in json.loads(p.stdout)["ranked"] if (r["pp"], r["tp"], r["dp"]) == (2, 8, 1))
    assert row["expected_tpot_ms"] is not None
    r = cli(
        "roofline",
        "-H",
        "nvidia-h200",
        "-t",
        row["topology"],
        "--tp",
        "8",
        "--ep",
        str(row["ep"]),
        "--pp",
        "2",
        "--stack",
        "sglang",
        "--kv-dtype",
        row["kv_dtype"],
        "--batch",
        "8",
        "--context",
        "32768",
        "--probes",
        tmp_path,
        "--json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert row["expected_tpot_ms"] == pytest.approx(out["expected"]["decode"]["expected_s"] * 1e3, rel=1e-12)
    assert row["tpot_ms"] == pytest.approx(out["decode"]["step_s"] * 1e3, rel=1e-9)
    assert any(o["name"] == "pipeline.send" for o in out["expected"]["decode"]["ops"])
