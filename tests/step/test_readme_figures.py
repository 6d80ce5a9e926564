"""The README's figures are produced, not typed: each is re-computed by the command the README
names and compared with the text as printed there (issue 10 item 7)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
GiB = 2**30


def said(pattern: str) -> re.Match:
    m = re.search(pattern, " ".join(README.split()))  # the README wraps lines
    assert m, f"the README no longer says {pattern!r}"
    return m


def run_json(cli, *args):
    r = cli(*args, "--json")
    return json.loads(r.stdout), r.exit_code


def test_parameter_totals(cli):
    m = said(r"([\d,]+) total, ([\d,]+) active a token; checkpoint ([\d,]+) B")
    d, _ = run_json(cli, "fit", "-t", "2x2x4", "--tp", "32")
    assert [int(g.replace(",", "")) for g in m.groups()] == [
        d["model"]["total_params"],
        d["model"]["active_params"],
        d["model"]["checkpoint_bytes"],
    ]


def test_v7x_2x2x4_torchtpu_vllm_at_128k(cli):
    m = said(
        r"2x2x4 \(16 chips, TP=32\) with the torchtpu-vllm stack (fits|does not fit) at 131,072 tokens: ([\d.]+) GiB of "
        r"weights a device \(([\d.]+) GiB of it held whole.*?plus ([\d.]+) GiB of temporaries \(the (prefill|decode) "
        r"step's\) from the shipped compiled calibration leave (?:it )?([\d.]+) GiB (free|short)(?:,.*?)?[;:] its "
        r"longest context at batch 1 is ([\d,]+) tokens"
    )
    verdict, weights, whole, temp, stage, free, sign, longest = m.groups()
    d, code = run_json(cli, "fit", "-t", "2x2x4", "--tp", "32")
    assert d["hardware"]["chips"] == 16 and d["fits"] == (verdict == "fits") and code == (0 if d["fits"] else 1)
    p = d["per_device"]
    assert f"{p['weights_bytes'] / GiB:.1f}" == weights
    assert f"{p['replicated_weights_bytes'] / GiB:.1f}" == whole
    assert f"{p['temp_bytes'] / GiB:.2f}" == temp and p["temp_bytes"] == d["temp"][f"{stage}_bytes"]
    assert "compiled calibration k3plan/evidence/calibrations/" in d["provenance"][f"temp_{stage}"]
    assert f"{abs(p['free_bytes']) / GiB:.1f}" == free and (sign == "free") == (p["free_bytes"] >= 0)
    assert f"{d['capacity']['memory_context_tokens']:,}" == longest


def test_compiled_temps_are_the_shipped_calibrations():
    """The compiled temporaries quoted: the vllm-tpu graph's of 2026-12-01 (history since issue 50), the earlier
    layer-form decode temp (the history sweep's), and today's torchtpu-vllm points, the shipped calibration's."""
    import yaml

    m = said(
        r"The deviceless TPU compiler needed ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) GiB of temporaries for "
        r"prefill chunks of 4,096 / 8,192 / 16,384 / 32,768 tokens and ([\d.]+) GiB for decode \(B=32\) in vllm-tpu's graph "
        r"\(tiled experts\) on 2026-12-01; the earlier graph, which dequantized a whole MoE layer, needed ([\d.]+) GiB for "
        r"decode\. With the plugin's fp32 MXFP4 scales held \(torchtpu-vllm, 2026-12-04\) it needs ([\d.]+) GiB for the "
        r"8,192-token chunk and ([\d.]+) / ([\d.]+) / ([\d.]+) GiB for decode at batch 1 x 8,192 / 32,768 / 131,072, and "
        r"runs out of HBM at batch 32 x 8,192"
    )
    root = Path(__file__).resolve().parents[2]
    cal = yaml.safe_load((root / "reports/validation/vllm-tpu-tiled/k3-tpu7x-2x2x4-tp32-vllm-tpu-compiled-20261201.yaml")
                         .read_text())  # fmt: skip
    pre = {p["tokens"]: p["temp_gib"] for p in cal["prefill"]}
    assert [f"{pre[t]:.2f}" for t in (4096, 8192, 16384, 32768)] == list(m.groups()[:4])
    assert f"{max(p['temp_gib'] for p in cal['decode']):.2f}" == m.group(5)
    old = yaml.safe_load((root / "reports/validation/k3-tpu7x-2x2x4-tp32-vllm-tpu-sweep.yaml").read_text())
    assert f"{max(p['temp_gib'] for p in old['decode']):.2f}" == m.group(6)
    now = yaml.safe_load((root / "k3plan/evidence/calibrations/k3-tpu7x-2x2x4-tp32-vllm-tpu-compiled.yaml").read_text())
    assert now["stack"] == "torchtpu-vllm"
    pre = {p["tokens"]: p["temp_bytes"] for p in now["prefill"]}
    dec = {(p["batch"], p["context"]): (p["temp_bytes"], p["fits"]) for p in now["decode"]}
    assert f"{pre[8192] / GiB:.2f}" == m.group(7)
    assert [f"{dec[(1, c)][0] / GiB:.2f}" for c in (8192, 32768, 131072)] == list(m.groups()[7:10])
    assert dec[(32, 8192)][1] is False


def test_jax_native_fits_with_the_measured_temp_and_plan_picks_it(cli):
    """Issue 50: 131,072 tokens is past the measured decode contexts (32,768): FITS IF, exit 3."""
    m = said(
        r"fits 131,072 tokens only if its decode temporaries stay at or under ([\d.]+) GiB: the real slice measured "
        r"([\d.]+) GiB .*? at contexts up to ([\d,]+), and its 8,192-token prefill chunk into 131,072 tokens .*? takes "
        r"the 32,768-token chunk's ([\d.]+) GiB: ([\d.]+) GiB free a device, (\d+) sequence"
    )
    d, code = run_json(cli, "fit", "-t", "2x2x4", "--stack", "jax-native")
    assert code == 3 and d["fits"] and d["reason_code"] == "fits_if_temp_unverified"
    assert d["unverified"]["stages"] == ["decode"] and f"{d['unverified']['max_temp_bytes'] / GiB:.2f}" == m.group(1)
    assert "measured calibration" in d["provenance"]["temp_decode"] and d["temp"]["decode_outside"]
    assert f"{d['temp']['decode_bytes'] / GiB:.2f}" == m.group(2)
    assert f"context {m.group(3)}" in d["temp"]["decode_outside"]
    assert f"{d['temp']['prefill_bytes'] / GiB:.2f}" == m.group(4)
    assert f"{d['per_device']['free_bytes'] / GiB:.1f}" == m.group(5)
    assert d["capacity"]["max_sequences"] == int(m.group(6))
    p, _ = run_json(cli, "plan", "-H", "tpu-v7x", "--context", "131072")
    r = p["recommended"]
    assert (r["topology"], r["tp"], r["stack"], r["temp_evidence"]) == ("2x2x4", 32, "jax-native", "measured")


def test_fit_with_no_flags_takes_the_smallest_topology_that_fits(cli):
    m = said(
        r"`k3plan fit` with no flags therefore takes the smallest v7x topology where 131,072 tokens fit, not only the "
        r"weights: (\S+) \((\d+) devices, tp (\d+), dp (\d+)\), ([\d.]+) GiB free a device and (\d+) sequences .*?\. At "
        r"1,048,576 tokens \(`--context 1048576`\) it takes (\S+) \((\d+) devices, tp (\d+), dp (\d+)\), ([\d.]+) GiB free a "
        r"device\. There its temporaries are the shipped temp model's upper end.*?with the capacity at the band's lower "
        r"end beside it: (\d+) sequences"
    )
    topo, devices, tp, dp, free, seqs = m.groups()[:6]
    d, code = run_json(cli, "fit")
    assert code == 0 and d["fits"] and d["provenance"]["temp_decode"].startswith("temp model")
    assert (d["hardware"]["topology"], d["hardware"]["devices"]) == (topo, int(devices))
    assert (d["parallel"]["tp"], d["parallel"]["dp"]) == (int(tp), int(dp))
    assert f"{d['per_device']['free_bytes'] / GiB:.1f}" == free and d["capacity"]["max_sequences"] == int(seqs)
    topo, devices, tp, dp, free, low_seqs = m.groups()[6:12]
    d, code = run_json(cli, "fit", "--context", "1048576")
    assert code == 0 and d["fits"] and d["hardware"]["topology"] == topo
    assert any(n.startswith(f"topology {topo}: default") for n in d["notes"])
    assert (d["hardware"]["devices"], d["parallel"]["tp"], d["parallel"]["dp"]) == (int(devices), int(tp), int(dp))
    assert f"{d['per_device']['free_bytes'] / GiB:.1f}" == free
    assert d["provenance"]["temp_decode"].startswith("temp model k3plan/evidence/temp_model.yaml")
    assert d["temp"]["decode_band"][1] == d["temp"]["decode_bytes"]
    assert d["capacity"]["band_low_max_sequences"] == int(low_seqs)


def test_h200_plan_picks_pipeline_parallel(cli):
    m = said(
        r"`k3plan plan -H nvidia-h200 --context 131072` recommends two 8-GPU boxes as TP(\d+) x PP(\d+) on "
        r"SGLang .*?: ([\d.]+) GiB free a device, (\d+) sequences, a ([\d.]+) ms TPOT \(the model; ceiling "
        r"([\d.]+) ms\), SGLang's dp-attention layout tied with it \(([\d.]+) GiB free, (\d+) sequences\); vLLM at "
        r"TP(\d+) x PP(\d+) comes next \(([\d.]+) GiB free, (\d+) sequences, ([\d.]+) ms\), then TP(\d+) with expert "
        r"parallelism across both boxes \(([\d.]+) GiB free, (\d+) sequences\)"
    )
    p, code = run_json(cli, "plan", "-H", "nvidia-h200", "--context", "131072")
    assert code == 0
    tp, pp, free, seqs, tpot, ceiling, free_dpa, seqs_dpa = m.groups()[:8]
    tp2, pp2, free2, seqs2, tpot2, tp3, free3, seqs3 = m.groups()[8:]
    r, dpa, nxt, third = p["ranked"][:4]
    assert (r["topology"], r["chips"], r["stack"], r["tp"], r["pp"]) == ("2x8", 16, "sglang", int(tp), int(pp))
    assert f"{r['free_gib_per_device']:.1f}" == free and r["max_sequences"] == int(seqs)
    assert f"{r['expected_tpot_ms']:.2f}" == tpot and f"{r['tpot_ms']:.2f}" == ceiling
    assert dpa["stack"] == "dp-attention" and dpa["expected_tpot_ms"] == pytest.approx(r["expected_tpot_ms"])
    assert f"{dpa['free_gib_per_device']:.1f}" == free_dpa and dpa["max_sequences"] == int(seqs_dpa)
    assert (nxt["stack"], nxt["tp"], nxt["pp"]) == ("vllm", int(tp2), int(pp2))
    assert f"{nxt['free_gib_per_device']:.1f}" == free2 and nxt["max_sequences"] == int(seqs2)
    assert f"{nxt['expected_tpot_ms']:.2f}" == tpot2
    assert (third["tp"], third["pp"], third["ep"]) == (int(tp3), 1, 16)  # experts over both boxes' 16 GPUs
    assert f"{third['free_gib_per_device']:.1f}" == free3 and third["max_sequences"] == int(seqs3)


def test_v7x_2x2x2_cannot_hold_the_weights(cli):
    """The sentence sits in the jax-native paragraph: it was the default stack's 100.8 GiB alone, which a
    reader took for jax-native's; each stack's figure is named and checked."""
    m = said(
        r"2x2x2 \(TP=16\) cannot hold the weights under either stack \(torchtpu-vllm ([\d.]+) GiB, jax-native "
        r"([\d.]+) GiB, of ([\d.]+)\)"
    )
    for stack, weights in (("torchtpu-vllm", m.group(1)), ("jax-native", m.group(2))):
        d, code = run_json(cli, "fit", "-t", "2x2x2", "--tp", "16", "--stack", stack)
        assert code == 1 and not d["weights_fit"] and not d["fits"]
        assert f"{d['per_device']['weights_bytes'] / GiB:.1f}" == weights
        assert f"{d['hardware']['usable_bytes_per_device'] / GiB:.2f}" == m.group(3)


def test_jax_native_weights(cli):
    m = said(r"jax-native stack's analytic weights come to ([\d.]+) GiB a device at TP=32")
    d, _ = run_json(cli, "fit", "-t", "2x2x4", "--stack", "jax-native")
    assert d["parallel"]["tp"] == 32
    assert f"{d['per_device']['weights_bytes'] / GiB:.2f}" == m.group(1)


def test_batch_1_decode_collectives(cli):
    m = said(
        r"--context 4096 --probes k3plan/evidence/probes`\): (\d+) chained collectives a step \((\d+) all-to-all, (\d+) "
        r"attention all-reduce, (\d+) for the embedding, the dense MLP and the logits\) x ([\d.]+) us = ([\d.]+) ms "
        r"of latency alone, against the study's ideal HBM floor of ([\d.]+) ms \(one copy of the bytes over all "
        r"(\d+) chips\); per device the step is ([\d.]+) ms, (\w+)-bound \(tp 8 leaves ([\d.]+) GiB of weights"
    )
    d, code = run_json(
        cli,
        "roofline",
        "-t",
        "2x4x4",
        "--stack",
        "dp-attention",
        "--tp",
        "8",
        "--context",
        "4096",
        "--probes",
        "k3plan/evidence/probes",
    )
    assert code == 0
    dec, c = d["decode"], d["decode"]["comm"]
    calls, a2a, attn, edge, us, lat_ms, ideal_ms, chips, step_ms, binding, weights_gib = m.groups()
    assert (c["calls_per_step"], c["expert_calls_per_step"], c["attention_calls_per_step"]) == (
        int(calls),
        int(a2a),
        int(attn),
    )
    # the rest are the TP edge collectives (step.ops.tp_edge_ops): embedding + 1 dense layer + logits
    assert c["calls_per_step"] - c["expert_calls_per_step"] - c["attention_calls_per_step"] == int(edge) == 1 + 1 + 1
    assert c["op"] == "all-to-all"
    assert f"{c['latency_s_per_call'] * 1e6:.2f}" == us
    assert f"{c['latency_time_s'] * 1e3:.2f}" == lat_ms
    assert f"{dec['ideal_step_s'] * 1e3:.2f}" == ideal_ms
    assert d["chips"] == int(chips)
    assert f"{dec['step_s'] * 1e3:.2f}" == step_ms and dec["binding"] == binding
    assert f"{dec['bytes_per_device']['weights'] / GiB:.1f}" == weights_gib


@pytest.mark.parametrize("line", [ln for ln in README.splitlines() if ln.startswith("k3plan fit -t 2x2x2 --tp 16 ")])
def test_the_does_not_fit_example_exits_1(cli, line):
    assert "exit 1" in line
    assert cli("fit", "-t", "2x2x2", "--tp", "16").exit_code == 1


def test_the_main_job_s_comment_says_what_it_prints(cli):
    """The README's first command and its comment: the verdict, the free bytes and the exit code."""
    m = said(
        r"k3plan fit --topology 2x2x4 --tp 32 # does Kimi K3 fit a TPU v7x 2x2x4 slice at TP=32\? \(at a context of "
        r"([\d,]+): (yes|no), ([\d.]+) GiB (free|short) a device.*?exit (\d)"
    )
    d, code = run_json(cli, "fit", "--topology", "2x2x4", "--tp", "32")
    assert d["workload"]["context_tokens"] == int(m[1].replace(",", ""))
    assert d["fits"] == (m[2] == "yes") and code == int(m[5])
    assert f"{abs(d['per_device']['free_bytes']) / GiB:.2f}" == m[3] and (m[4] == "free") == d["fits"]
    # the decode temp the verdict rests on was compiled at this very point (issue 50)
    assert "envelope of measured points up to batch 1 x context 131,072" in d["provenance"]["temp_decode"]


def test_uneven_expert_placement_sentence(cli):
    """'896 experts over EP 72 as 13 on 32 devices and 12 on 40' is what fit prints for vLLM on an NVL72."""
    m = said(r"vLLM: ([\d,]+) experts over EP (\d+) as (\d+) on (\d+) devices and (\d+) on (\d+);")
    experts, ep, big, n_big, small, n_small = (int(g.replace(",", "")) for g in m.groups())
    d, code = run_json(
        cli, "fit", "-H", "nvidia-gb200-nvl72", "-t", str(ep), "--tp", "8", "--ep", str(ep), "--stack", "vllm"
    )
    assert code in (0, 3) and d["fits"]  # 3: fits on the analytic temp's lower bound (issue 50)
    note = f"experts {experts} over ep {ep}: {n_big} devices hold {big}, {n_small} hold {small}"
    assert any(n.startswith(note) for n in d["notes"]), d["notes"]


def test_tpu_inference_holds_k3_nowhere_on_v7x(cli):
    """The README's tpu-inference sentence: the bytes every device holds whole and the 4x4x4 shortfall."""
    m = said(
        r"\(commit 811f8e20: .*?\): ([\d.]+) GiB a device held whole, so no v7x topology holds K3 that way "
        r"\(`k3plan fit -t 4x4x4 --stack tpu-inference`: ([\d.]+) GiB short a device\)"
    )
    whole, short = (float(g) for g in m.groups())
    d, code = run_json(cli, "fit", "-t", "4x4x4", "--stack", "tpu-inference")
    assert code == 1 and not d["fits"]
    assert round(d["per_device"]["replicated_weights_bytes"] / GiB, 2) == whole
    assert round(-d["per_device"]["free_bytes"] / GiB, 2) == short
    d2, _ = run_json(cli, "fit", "-t", "2x2x4", "--tp", "32")
    assert d2["stack"] == "torchtpu-vllm"  # the TPU default is the stack whose engine runs K3 (issue 34)
    assert not [w for w in d2["warnings"] if "the engine does not run this as priced" in w]
