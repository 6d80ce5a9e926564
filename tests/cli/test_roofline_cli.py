"""`k3plan roofline`: issue 4's "Must show" through the CLI (JSON and table), and bad input ->
exit 2 with one line and no traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from k3_testing import one_error_line

REPO = Path(__file__).resolve().parents[2]
PROBES = REPO / "k3plan" / "evidence" / "probes"
RECORD = "tpu7x-a2a-chained-porting-study.json"
US = 1e-6


def study(*args) -> tuple:
    """The porting study's comparisons assume the workload fits and a 4K context: pass both."""
    return (*args, "--ignore-fit") + (() if "--context" in args else ("--context", "4096"))


def roofline_json(cli, *args) -> dict:
    r = cli("roofline", *study(*args), "--json")
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    return json.loads(r.stdout)


def test_k3_batch1_x32_dp_attention_with_the_probe_record(cli):
    """184 x 9.88 us (the probe record, named) = 1818 us: 331% of the study's 550 us HBM floor at
    v7x x32, 311% of the code's own 584.4 us floor (exact inventory, which is 7.0 GB above the
    study's, plus KV and KDA state at the default 4K context)."""
    d = roofline_json(cli, "-t", "2x4x4", "--stack", "dp-attention", "--probes", PROBES)
    assert (d["chips"], d["stack"], d["parallel"]) == (32, "dp-attention", {"tp": 1, "ep": 64, "dp": 64})
    c = d["decode"]["comm"]
    assert c["op"] == "all-to-all" and c["pattern"] == "all_to_all"
    assert c["calls_per_step"] == c["expert_calls_per_step"] == 184
    assert c["latency_s_per_call"] == pytest.approx(9.88 * US)
    assert RECORD in c["latency_source"] and "TPU7x" in c["latency_source"]
    assert c["latency_time_s"] == pytest.approx(1818 * US, rel=5e-4)
    assert round(c["latency_time_s"] / 550e-6, 2) == 3.31
    ideal = d["decode"]["ideal_step_s"]
    assert ideal == pytest.approx(584.4 * US, rel=1e-3)
    assert round(c["latency_time_s"] / ideal, 2) == 3.11
    # prefill uses the same record
    assert RECORD in d["prefill"]["comm"]["latency_source"]


def test_without_probes_the_spec_latency_is_named(cli):
    d = roofline_json(cli, "-t", "2x4x4", "--stack", "dp-attention")
    assert d["decode"]["comm"]["latency_source"] == "tpu-v7x spec: ICI latency a call"


def test_torchtpu_vllm_issues_no_all_to_all(cli):
    d = roofline_json(cli, "-t", "2x4x4", "--probes", PROBES)
    assert d["stack"] == "torchtpu-vllm"
    c = d["decode"]["comm"]
    assert c["op"] == "all-reduce" and c["pattern"] == "all_reduce"
    # two all-reduces a MoE layer, no all-to-all: K3's LatentMoE reduces its routed latent before the norm and
    # up-projection, then the shared expert apart (vLLM MoERunner; the stack's collectives.latent_reduce: apart)
    assert c["expert_calls_per_step"] == 2 * 92
    # + the embedding's and the dense layer's all-reduce over TP + vLLM's logits all-gather
    assert c["calls_per_step"] == 2 * 92 + c["attention_calls_per_step"] + 1 + 1 + 1
    assert "all-to-all" not in json.dumps(d["decode"]["comm"]) and "all-to-all" not in json.dumps(d["prefill"]["comm"])
    assert RECORD not in c["latency_source"]  # an a2a record never prices an all-reduce


def test_json_fields_and_study_numbers_on_v7x_x16(cli):
    """B=256 on v7x x16, dp-attention: 281.4 us of ICI; prefill 53,142 tok/s linear-only at 30%
    MFU (published 53,144: the study divides by 208 GFLOP rounded); the long-context ratios."""
    d = roofline_json(cli, "-t", "2x2x4", "--stack", "dp-attention", "--batch", "256")
    dec, pre, lc = d["decode"], d["prefill"], d["long_context"]
    for key in (
        "tokens_per_s",
        "tpot_s",
        "tokens_per_s_per_chip",
        "binding",
        "comm_share",
        "step_s",
        "memory_s",
        "compute_s",
        "bytes_per_device",
        "flops_per_device",
        "experts_touched_per_layer",
    ):
        assert key in dec
    assert dec["binding"] == "memory"
    assert dec["comm"]["bandwidth_time_s"] == pytest.approx(281.4 * US, rel=5e-3)
    assert round(pre["tokens_per_s_linear_only"]) == 53_142
    assert abs(pre["tokens_per_s_linear_only"] - 53_144) / 53_144 < 1e-4
    for key in ("ttft_s", "chunks", "chunk_tokens", "comm_bytes_per_s_per_chip", "link_share", "feasible"):
        assert key in pre
    assert round(lc["crossover_tokens"]) == 44_161
    assert {round(v, 1) for v in lc["ratio_by_context"].values()} == {0.7, 5.9, 23.7}
    assert d["efficiency"] == {"mfu": 0.3, "bw_efficiency": 1.0, "compute_dtype": "bf16"}


def test_mfu_and_dtype_scale_prefill(cli):
    base = roofline_json(cli, "-t", "2x2x4", "--mfu", "0.45")["prefill"]["tokens_per_s_linear_only"]
    assert round(base) == 79_712  # published 79,716 (208 GFLOP rounded)
    fp8 = roofline_json(cli, "-t", "2x2x4", "--mfu", "0.45", "--dtype", "fp8")["prefill"]["tokens_per_s_linear_only"]
    assert fp8 == pytest.approx(2 * base)


def test_multi_slice_ep_is_flagged_infeasible_for_prefill(cli):
    d = roofline_json(cli, "-t", "2*2x2x4", "--stack", "dp-attention")
    pre = d["prefill"]
    assert pre["comm"]["link"] == "scale_out" and pre["comm"]["link_name"] == "DCN"
    assert not pre["feasible"]
    assert "infeasible for prefill" in pre["note"]
    r = cli("roofline", *study("-t", "2*2x2x4", "--stack", "dp-attention"))
    assert r.exit_code == 0, r.output
    assert "INFEASIBLE" in r.stdout and "infeasible for prefill" in r.stdout


def test_table_names_the_roof_the_record_and_the_crossover(cli):
    r = cli("roofline", *study("-t", "2x4x4", "--stack", "dp-attention", "--probes", PROBES), "--verbose")
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())  # rich wraps long cells
    assert "binding: memory" in out
    assert "184 calls (184 all-to-all)" in out
    assert "9.88 us" in out and "probed on TPU7x" in out
    # the record is named in the table (rich once swallowed "[probe record ...]" as a markup tag)
    assert RECORD in "".join(c for c in r.stdout if c not in "│ \n")  # wrapped across table rows
    assert "44,161 tokens" in out
    assert "study view (ideal)" in out


def test_router_histogram_through_the_cli(cli, tmp_path):
    counts = [0] * 896
    for i in range(16):
        counts[i * 50] = 1
    p = tmp_path / "hist.json"
    p.write_text(json.dumps(counts))
    d = roofline_json(cli, "-t", "2x2x4", "--batch", "512", "--router-histogram", p)
    assert d["decode"]["experts_touched_per_layer"] == pytest.approx(16)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--batch", "0"], "--batch 0"),
        (["--batch", "-3"], "--batch -3"),
        (["--context", "0"], "--context 0"),
        (["--chunk", "0"], "--chunk 0"),
        (["--mfu", "0"], "--mfu"),
        (["--mfu", "1.5"], "--mfu 1.5"),
        (["--mfu", "-0.3"], "--mfu"),
        (["--bw-efficiency", "0"], "--bw-efficiency"),
        (["--bw-efficiency", "2"], "--bw-efficiency"),
        (["--probes", "/nonexistent/probes"], "--probes"),
        (["--probes", str(PROBES / RECORD)], "not a folder"),
        (["--router-histogram", "/nonexistent/h.json"], "--router-histogram"),
        (["--dtype", "int8"], "int8"),
        (["--dtype", "nonsense"], "nonsense"),
        (["-t", "2x2"], "2x2"),
        (["--tp", "7"], "--tp 7"),
    ],
)
def test_bad_input_exits_2_one_line(cli, args, needle):
    line = one_error_line(cli("roofline", "-t", "2x2x4", *args))
    assert needle in line


@pytest.mark.parametrize("payload", [b"[1, 2", b"[1, 2, 3]", b"\x89PNG\r\n\x1a\n\xd0\xff binary", b"[NaN]"])
def test_malformed_router_histogram_exits_2_one_line(cli, tmp_path, payload):
    p = tmp_path / "h.json"
    p.write_bytes(payload if payload != b"[NaN]" else ("[NaN" + ", 1" * 895 + "]").encode())
    line = one_error_line(cli("roofline", "-t", "2x2x4", "--router-histogram", p))
    assert "--router-histogram" in line


def test_no_speed_figure_for_a_workload_that_does_not_fit(cli):
    """Issue 10: `-t 2x2x4 --batch 256 --context 32768` printed 3,019 tok/s for a batch whose KV alone
    is far beyond a device. Now it says why and exits 1, like fit; --ignore-fit prints the bounds
    and says it does not fit."""
    r = cli("roofline", "-t", "2x2x4", "--batch", "256", "--context", "32768")
    assert r.exit_code == 1
    out = " ".join(r.stdout.split())
    assert "DOES NOT FIT" in out and "tok/s" not in out
    d = json.loads(cli("roofline", "-t", "2x2x4", "--batch", "256", "--context", "32768", "--json").stdout)
    # the reason in fit's words (fit prints "DOES NOT FIT: " + it): not the batch of sequences
    assert d["fits"] is False and d["reason"].startswith("not enough room for the batch of sequences")
    d = roofline_json(cli, "-t", "2x2x4", "--batch", "256", "--context", "32768")
    assert d["fits"] is False and d["decode"]["tokens_per_s"] > 0


def test_roofline_default_workload_is_fits(cli):
    # jax-native: 2x2x4 still holds one 128K sequence with its measured temps (vllm-tpu's compiled
    # decode temp leaves it 3 GiB short, and roofline gives no speed for a workload that does not fit)
    r = cli("roofline", "-t", "2x2x4", "--stack", "jax-native", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["decode"]["context_tokens"] == 131072  # fit's default context


def test_table_prints_byte_sizes_in_gib(cli):
    """Byte sizes print in GiB (2**30 B) like the rest of the house; bandwidths stay GB/s (spec sheets)."""
    args = ("-t", "2x4x4", "--stack", "dp-attention", "--tp", "8", "--probes", PROBES)
    dec = roofline_json(cli, *args)["decode"]
    r = cli("roofline", *study(*args), "--verbose")
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())  # rich wraps long cells
    b = dec["bytes_per_device"]
    assert f"{sum(b.values()) / 2**30:,.3f} GiB" in out
    assert f"weights {b['weights'] / 2**30:,.3f}," in out
    assert f"of the {sum(b.values()) / 2**30:,.2f} GiB a device a step reads" in out  # the advice line
    assert f"one copy of {sum(dec['ideal_bytes_per_step'].values()) / 2**30:,.2f} GiB over" in out
    # the collective traffic a chip is a few MiB: GiB with 3 significant digits, never MiB
    comm = re.search(r"([0-9.]+) GiB a chip over", out)
    assert comm and len(comm.group(1).split(".")[1].lstrip("0")) >= 3, out
    assert float(comm.group(1)) == pytest.approx(dec["comm"]["bytes_per_chip_per_step"] / 2**30, rel=5e-3)
    assert " GB " not in out and " MB " not in out and "MiB" not in out and "kB" not in out and "GB/s" in out


def test_long_context_ratios_name_exact_token_counts(cli):
    """The crossover line labels each context with its exact count (262,144 tokens), never "256K" (K = 1,024)."""
    args = ("-t", "2x2x4", "--stack", "dp-attention")
    lc = roofline_json(cli, *args)["long_context"]
    r = cli("roofline", *study(*args), "--verbose")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in " ".join(r.stdout.split()).split("long context:")[1:])
    for c in (32768, 262144, 1048576):  # the contexts roofline reports: 2^15, 2^18, 2^20 tokens
        assert str(c) in lc["ratio_by_context"]
    assert "(32,768 tokens " in line and ", 262,144 tokens " in line and ", 1,048,576 tokens " in line
    assert not re.search(r"\b\d+K\b", line)
