"""Issue 14 in `k3plan roofline`: the speculative-decoding figures and the bandwidth/compute rules
on the roofline's own numbers; expected values derived by hand from the JSON's terms."""

from __future__ import annotations

import json


def roof(cli, *args, code=0) -> dict:
    r = cli("roofline", *args, "--json")
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def test_spec_decode_counts_per_step_drafted_and_accepted(cli):
    # jax-native: 8 x 32K fits on 2x2x4 TP=32 with its measured temp (vllm-tpu's compiled temp does not, issue 15)
    cfg = ("-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--context", "32768")
    d = roof(cli, *cfg, "--batch", "8", "--spec-tokens", "3", "--acceptance", "0.8", "--draft-bytes", "0")
    plain = roof(cli, *cfg, "--batch", "8")
    verify = roof(cli, *cfg, "--batch", "32", "--ignore-fit")  # 8 x 4 tokens
    sp = d["spec_decode"]["speed"]
    tokens = 1 + 0.8 + 0.8**2 + 0.8**3  # (1 - 0.8^4) / (1 - 0.8) = 2.952
    assert abs(sp["verify_step_s"] - verify["decode"]["step_s"]) < 1e-15 and sp["draft_s"] == 0.0
    assert sp["forward_tokens_per_step"] == 32 and sp["drafted_tokens_per_step"] == 24
    assert abs(sp["emitted_tokens_per_s"] - 8 * tokens / verify["decode"]["step_s"]) < 1e-6
    assert abs(sp["drafted_tokens_per_s"] - 24 / verify["decode"]["step_s"]) < 1e-6
    assert abs(sp["accepted_tokens_per_s"] - 8 * (tokens - 1) / verify["decode"]["step_s"]) < 1e-6
    (s,) = [s for s in d["advice"]["suggestions"] if s["action"] == "spec_decode"]
    assert s["rule"] == "bandwidth" and plain["decode"]["binding"] == "memory"
    assert abs(s["speedup"] - plain["decode"]["step_s"] * tokens / verify["decode"]["step_s"]) < 1e-9


def test_compute_bound_step_names_the_part_that_dominates(cli):
    d = roof(cli, "-t", "2x2x4", "--tp", "32", "--batch", "1024", "--context", "1024", "--ignore-fit", code=0)
    assert d["decode"]["binding"] == "compute"
    flops = d["decode"]["flops_per_device"]
    (s,) = [s for s in d["advice"]["suggestions"] if s["rule"] == "compute"]  # it also fails memory: capacity too
    assert s["rule"] == "compute" and s["action"] == "dominant_part"
    assert abs(s["score"] - flops["linear"] / (flops["linear"] + flops["attention"])) < 1e-12
    assert s["text"].startswith(f"compute-bound: linear takes {flops['linear'] / sum(flops.values()):.0%}")
