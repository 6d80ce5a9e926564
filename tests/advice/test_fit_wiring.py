"""Issue 14 wired into `k3plan fit`: advice after the verdict, --offload, --spec-tokens. Every
expected number is derived by hand here from the fit's own per-device terms or published facts."""

from __future__ import annotations

import json
import math

from k3_testing import one_error_line

# k3-facts.md §3: K3 has 24 MLA layers; a token a layer caches 576 values or 656 B under fp8_ds_mla;
# tpu-inference (vllm-tpu) pads the 512 + 64 values to 512 + 128 (bf16: 1,280 B); the latent is whole on
# every TP rank under vllm-tpu.
BF16_BPT = 24 * 640 * 2  # 30,720
FP8_DS_MLA_BPT = 24 * 656  # 15,744
# tpu-inference takes no fp8_ds_mla (tpu_inference/utils.py to_jax_dtype: fp8 is float8_e4m3fn, no CUDA layout):
# its smaller cache is fp8, 1 B a value of the padded entry
FP8_TPU_BPT = 24 * 640  # 15,360


def fit_json(cli, *args, code=0) -> dict:
    r = cli("fit", *args, "--json")
    assert r.exit_code == code or (code == 0 and r.exit_code == 3), (
        r.output
    )  # 3: fits on the analytic temp's lower bound (issue 50)
    return json.loads(r.stdout)


def _used(d: dict) -> int:
    pd = d["per_device"]
    return sum(pd[k] for k in ("weights_bytes", "kv_bytes", "state_bytes", "temp_bytes", "reserve_bytes"))


def test_failing_fit_advises_the_next_standard_topology_with_its_fitted_bytes(cli):
    # jax-native: 2x2x4 TP=32 fits there with its measured temp (vllm-tpu's compiled temp does not fit at 128K)
    small = fit_json(cli, "-t", "2x2x2", "--tp", "16", "--stack", "jax-native", code=1)
    big = fit_json(cli, "-t", "2x2x4", "--tp", "32", "--stack", "jax-native")  # next v7x shape up, tp 16 -> 32
    rules = small["advice"]["rules"]
    assert rules["verdict"] == "fails"
    topo = next(s for s in rules["suggestions"] if s["action"] == "topology")
    assert topo["freed_bytes_per_device"] == _used(small) - _used(big)
    assert topo["free_bytes_after"] == big["per_device"]["free_bytes"]
    assert topo["resolves"] and rules["suggestions"][0] == topo  # resolves: ranked first
    assert "2x2x2 -> 2x2x4 (16 -> 32 devices)" in topo["text"]


def test_kv_suggestion_on_tpu_inference_is_fp8_at_640_bytes_a_token_a_layer(cli):
    """The advice priced fp8_ds_mla on v7x (vllm-tpu): a vLLM CUDA layout tpu-inference does not take."""
    d = fit_json(cli, "-t", "2x2x4", "--tp", "32", "--batch", "32", "--context", "32768", code=1)
    kv = next(s for s in d["advice"]["rules"]["suggestions"] if s["action"] == "kv_dtype")
    assert f"KV bf16 -> fp8 ({BF16_BPT:,} -> {FP8_TPU_BPT:,} B a token" in kv["text"]
    # no calibration matches fp8 KV (they are matched on the KV dtype): that fit counts the temp model's
    # upper end (issue 15 item 1), so it does not fit where bf16 with its compiled calibration nearly does
    fp8 = fit_json(cli, "-t", "2x2x4", "--tp", "32", "--batch", "32", "--context", "32768", "--kv-dtype", "fp8",
                   code=1)  # fmt: skip
    assert fp8["per_device"]["kv_bytes_per_token"] == FP8_TPU_BPT
    # freed = (KV + state + temp) at bf16 minus the same at fp8, the same 32 sequences: the advice's
    # free after is that fit's free, to the byte
    kv_state_temp = lambda x: sum(x["per_device"][k] for k in ("kv_bytes", "state_bytes", "temp_bytes"))  # noqa: E731
    assert kv["freed_bytes_per_device"] == kv_state_temp(d) - kv_state_temp(fp8)
    assert kv["free_bytes_after"] == fp8["per_device"]["free_bytes"]
    assert kv["resolves"] is False and "temporaries" in kv["text"]


def test_kv_suggestion_on_a_vllm_gpu_is_fp8_ds_mla_at_656_bytes_a_token_a_layer(cli):
    d = fit_json(cli, "-H", "nvidia-h200", "-t", "8", "--tp", "8", "--stack", "vllm", code=1)
    kv = next(s for s in d["advice"]["rules"]["suggestions"] if s["action"] == "kv_dtype")
    assert "KV bf16 -> fp8_ds_mla (" in kv["text"] and f" -> {FP8_DS_MLA_BPT:,} B a token" in kv["text"]


def test_plan_searches_no_kv_dtype_the_engine_does_not_take(cli):
    r = cli("plan", "-H", "tpu-v7x", "--kv-dtypes", "all", "--json")
    rows = json.loads(r.stdout)["ranked"]
    assert rows and not [
        (x["stack"], x["kv_dtype"]) for x in rows if x["stack"] != "jax-native" and x["kv_dtype"] == "fp8_ds_mla"
    ]


def test_thin_headroom_warns_with_the_margin(cli):
    # jax-native (measured temp, no engine reserve): 8 x 32K leaves about 1 GiB of 94.8
    d = fit_json(cli, "-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--batch", "8", "--context", "32768")
    usable, free = d["hardware"]["usable_bytes_per_device"], d["per_device"]["free_bytes"]
    assert 0 < free < usable / 10  # thin by construction
    rules = d["advice"]["rules"]
    assert rules["verdict"] == "thin"
    short = math.ceil(usable / 10) - free
    (w,) = rules["warnings"]
    assert f"{free / usable:.1%} of usable HBM" in w and f"{short / 2**30:,.1f} GiB more free" in w


def test_spec_decode_puts_the_draft_in_the_budget_and_prices_batch_x_k_plus_1(cli):
    # jax-native: fits 8 x 32K with the 0.87 GiB draft (vllm-tpu's compiled temp does not, issue 15)
    cfg = ["-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--batch", "8", "--context", "32768"]
    base = fit_json(cli, *cfg)
    d = fit_json(cli, *cfg, "--spec-tokens", "3", "--acceptance", "0.8,0.6,0.4", "--draft-bytes", "30GB")
    per_dev = 30_000_000_000 // 32  # sharded over tp 32: 937,500,000 B
    assert d["per_device"]["weights_bytes"] == base["per_device"]["weights_bytes"] + per_dev
    assert d["per_device"]["free_bytes"] == base["per_device"]["free_bytes"] - per_dev
    sd = d["advice"]["spec_decode"]
    sp = sd["speed"]
    assert sp["forward_tokens_per_step"] == 8 * 4 and sp["drafted_tokens_per_step"] == 8 * 3
    tokens = 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.4 + 1  # 2.472 a sequence a step
    assert (
        sp["emitted_tokens_per_step"] == sp["batch"] * tokens or abs(sp["emitted_tokens_per_step"] - 8 * tokens) < 1e-9
    )
    assert abs(sp["emitted_tokens_per_s"] - 8 * tokens / sp["step_s"]) < 1e-6
    assert abs(sp["accepted_tokens_per_s"] - 8 * (tokens - 1) / sp["step_s"]) < 1e-6
    assert abs(sp["speedup"] - sd["plain_step_s"] * tokens / sp["step_s"]) < 1e-9
    # the plain step is the decode bound's, as the verify step is (fit's headline TPOT is the model's here)
    assert sd["plain_step_s"] == base["speed"]["ceiling_tpot_s"]


def test_k3_has_no_draft_head_so_spec_decode_asks_for_draft_bytes(cli):
    msg = one_error_line(cli("fit", "-t", "2x2x4", "--tp", "32", "--spec-tokens", "3", "--acceptance", "0.8"))
    assert "no draft head" in msg and "--draft-bytes" in msg
    msg = one_error_line(cli("fit", "-t", "2x2x4", "--tp", "32", "--spec-tokens", "3"))
    assert "--acceptance" in msg
    one_error_line(cli("fit", "-t", "2x2x4", "--tp", "32", "--spec-tokens", "3", "--acceptance", "0.8,0.6"))


def test_offload_host_holds_sessions_and_adds_ttft(cli):
    d = fit_json(
        cli,
        "-t",
        "2x2x4",
        "--tp",
        "32",
        "--stack",
        "jax-native",
        "--batch",
        "8",
        "--context",
        "32768",
        "--offload",
        "host",
    )
    o, ms, pd = d["advice"]["offload"], d["model_state"], d["per_device"]
    assert d["hardware"]["hosts"] == 4 and d["hardware"]["devices"] == 32
    # tpu-v7x spec: 960 GB host DRAM a 4-chip host; 4 chips x 64 GB/s (PCIe Gen5 x16) to HBM a host
    stored = ms["kv_bytes_per_token"] * 32768 + ms["state_bytes_per_sequence"]
    assert o["sessions_held"] == 4 * 960 * 10**9 // stored
    hbm = (pd["kv_bytes"] + pd["state_bytes"]) // pd["sequences"]  # one session's share a device
    assert o["hbm_freed_bytes_per_device"] == hbm
    assert abs(o["ttft_added_s"] - hbm * (32 // 4) / (4 * 64e9)) < 1e-12
    assert o["cheaper_than_recompute"] is True


def test_offload_of_a_workload_that_does_not_fit_prints_no_time(cli):
    """issue 10 item 6: `fit -t 2x2x2 --tp 16 --offload host` said DOES NOT FIT, then "TTFT +114.4 ms to
    bring one back; prefilling it again instead: 7.27 s". No time for a workload that does not fit."""
    r = cli("fit", "-t", "2x2x2", "--tp", "16", "--offload", "host")
    assert r.exit_code == 1, r.output
    assert "DOES NOT FIT" in r.stdout and "TTFT +" not in r.stdout and "prefilling it again" not in r.stdout
    assert "offload to host: not computed, the workload does not fit" in r.stdout
    assert fit_json(cli, "-t", "2x2x2", "--tp", "16", "--offload", "host", code=1)["advice"]["offload"] is None
    # a tier the spec lacks is still bad input when the workload does not fit
    assert "--offload" in one_error_line(cli("fit", "-t", "2x2x2", "--tp", "16", "--offload", "tape"))


def test_offload_to_a_tier_the_spec_lacks_is_one_error_line(cli):
    assert "--offload" in one_error_line(cli("fit", "-t", "2x2x4", "--tp", "32", "--offload", "tape"))


def test_the_draft_stays_in_the_budget_of_the_alternatives(cli):
    spec = ["--batch", "8", "--spec-tokens", "3", "--acceptance", "0.8", "--draft-bytes", "32GB"]
    d = fit_json(cli, "-t", "2x2x4", "--tp", "32", *spec, code=1)
    topo = next(s for s in d["advice"]["rules"]["suggestions"] if s["action"] == "topology")
    assert "2x2x4 -> 2x4x4" in topo["text"]
    # 2x4x4 has 64 devices; tp 64 does not divide 96 heads, so the stack's split: tp 32, dp 2
    plain = fit_json(cli, "-t", "2x4x4", "--tp", "32", "--dp", "2", "--batch", "8")
    assert plain["parallel"]["tp"] == 32
    assert topo["free_bytes_after"] == plain["per_device"]["free_bytes"] - 32 * 10**9 // 32


def test_deepseek_v3_drafts_with_its_own_mtp_head(cli):
    from k3plan.models import load_model

    args = ["-m", "deepseek-v3", "-t", "2x2x4", "--context", "32768"]
    base = fit_json(cli, *args)
    d = fit_json(cli, *args, "--spec-tokens", "1", "--acceptance", "0.8")
    mtp = sum(t.nbytes for t in load_model("deepseek-v3").inventory.of_kind("mtp"))  # the inventory's MTP tensors
    tp = d["parallel"]["tp"]
    assert d["per_device"]["weights_bytes"] - base["per_device"]["weights_bytes"] == -(-mtp // tp)
    sd = d["advice"]["spec_decode"]
    assert sd["draft_bytes"] == mtp and "MTP head" in sd["draft"]
    assert abs(sd["speed"]["emitted_tokens_per_step"] - sd["speed"]["batch"] * 1.8) < 1e-12  # 0.8 + 1


def test_no_fp8_ds_mla_advice_where_the_engine_lacks_it(cli):
    # SGLang's kv_cache_dtype has no fp8_ds_mla (k3plan.engines.flags.SGLANG_KV) but has fp8_e4m3: the KV advice
    # prices fp8, 1 B a value of the 576 (24 x 576 = 13,824 B a token); before, no KV advice at all
    d = fit_json(cli, "-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "--stack", "sglang", code=1)
    actions = [s["action"] for s in d["advice"]["rules"]["suggestions"]]
    assert "topology" in actions and set(actions) <= {"split", "topology", "context", "kv_dtype"}  # split: issue 36
    kv = next(s for s in d["advice"]["rules"]["suggestions"] if s["action"] == "kv_dtype")
    assert f"KV bf16 -> fp8 ({24 * 576 * 2:,} -> {24 * 576:,} B a token" in kv["text"]
    assert "fit with --kv-dtype fp8" in d["advice"]["alternatives"]
    assert not any("fp8_ds_mla" in a for a in d["advice"]["alternatives"])


def test_thin_headroom_does_not_advise_a_larger_batch(cli):
    d = fit_json(cli, "-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--batch", "8", "--context", "32768")
    assert d["advice"]["rules"]["verdict"] == "thin"
    assert d["speed"]["binding"] == "memory"
    assert not [s for s in d["advice"]["rules"]["suggestions"] if s["rule"] == "bandwidth"]


def test_batch_advice_under_pp_caps_at_the_fewest_sequences_any_stage_holds(cli):
    # H200 2x8 TP8 x PP2 on vLLM: stage 1 holds 11 MLA layers, stage 2 13 (vLLM get_pp_indices), so stage 1
    # binds on free bytes at batch 1 while stage 2, with more KV a token, holds fewer sequences. fit's
    # capacity is the fewest any stage holds; the batch advice must cap at that same number, not at the
    # binding stage's own count.
    d = fit_json(cli, "-H", "nvidia-h200", "-t", "2x8", "--tp", "8", "--pp", "2", "--stack", "vllm")
    cap = d["capacity"]["max_sequences"]
    pd = d["per_device"]
    # the binding stage's (stage 1's) 11 MLA layers, held as 12 pages a block: vLLM groups the whole model's
    # layers and stage 1's largest group has 12 (12 of each KDA group; step.memory.held_layers)
    assert pd["kv_bytes_per_token"] == 12 * 576 * 2
    # stage 1 alone would hold more: (its room) // (its KV + state a sequence), by hand
    per_seq = pd["kv_bytes_per_token"] * 131072 + pd["state_bytes_per_sequence"]
    own = (pd["free_bytes"] + pd["kv_bytes"] + pd["state_bytes"]) // per_seq
    assert own > cap  # the case this test is about
    batch = [s for s in d["advice"]["rules"]["suggestions"] if s["action"] == "batch"]
    assert batch
    for s in batch:
        assert s["text"].endswith(f"of the {cap} sequences a device memory holds"), s["text"]
