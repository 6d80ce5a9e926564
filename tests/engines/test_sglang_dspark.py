"""SGLang's DSpark draft for DeepSeek-V4.1 (engines/sglang/spec.py DSPARK_HOOK / DSPARK_MODEL / DSPARK_WORKER, read in
the sglang 0.5.21 wheel, the same in 0.5.22 and 0.5.23), --swa-prefix-tails (engines/sglang/dsv4_pool.py
PREFIX_TAILS_SOURCE) and the host Engram tables (engines/sglang/serve.py ENGRAM_HOST_SOURCE), with InferenceX's
V4.1-Flash GB200 recipe (tests/engines/cases/sglang-inferencex-3347-dsv41-flash-gb200-tp4-dspark.yaml) as the referee:
'The C16 measured pool retains 27.0M full-context tokens and 439,040 SWA slots; ... the measured 51.82 GiB KV
budget' (SemiAnalysisAI/InferenceX#3347)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k3plan.engines.release import parse_release
from k3plan.engines.serve import parse_serve
from k3plan.engines.sglang.dsv4_pool import sglang_dsv41_pool
from k3plan.engines.sglang.spec import draft_pricing
from k3plan.models.formats import get_format
from k3plan.models.loader import load_model
from k3plan.units import GiB

CASE = Path(__file__).parent / "cases" / "sglang-inferencex-3347-dsv41-flash-gb200-tp4-dspark.yaml"
V41 = "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4 --ep-size 4"
KW = dict(platform="gpu", device_gib=185.0, device_name="nvidia-gb200-nvl72", release=parse_release("0.5.21"))


@pytest.fixture(scope="module")
def flash41():
    return load_model("deepseek-v4.1-flash")


def _serve() -> str:
    return " ".join(yaml.safe_load(CASE.read_text())["serve"].split())


def _fit(cli, command: str, *extra: str):
    return cli("fit", "-H", "nvidia-gb200-nvl72", "--serve", command, "--engine-version", "0.5.21", *extra)


def test_dspark_takes_one_step_topk_1_and_the_block_plus_one_draft_tokens():
    """_handle_dspark: steps and topk forced to 1 whatever the flags say, gamma = the block flag, verify width gamma +
    1; without the flag the checkpoint's dspark_block_size decides (priced once the model is loaded)."""
    spec = parse_serve(f"{V41} --speculative-algorithm DSPARK --speculative-dspark-block-size 5", **KW).speculative
    assert (spec.algorithm, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == ("DSPARK", 1, 1, 6)
    spec = parse_serve(f"{V41} --speculative-algorithm dspark --speculative-num-steps 3", **KW).speculative
    assert (spec.num_steps, spec.dspark_block_size, spec.num_draft_tokens) == (1, None, 0)


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ("--speculative-dspark-block-size 5 --speculative-num-draft-tokens 4", "must equal gamma + 1"),
        ("--speculative-dspark-block-size 0", "positive"),
        ("--speculative-draft-model-path someone/dspark-draft", "separate DSpark draft checkpoint"),
    ],
)
def test_what_sglang_refuses_of_dspark_s_flags_is_refused_in_one_line(cli, flags, match):
    r = _fit(cli, f"{V41} --speculative-algorithm DSPARK {flags}")
    assert r.exit_code == 2 and match in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_dspark_spelled_in_lower_case_is_refused_as_deepseek_v4_s_hook_refuses_it(cli):
    """apply_deepseek_v4_defaults asserts the algorithm is EAGLE or DSPARK as written, before the speculative hook
    upper-cases it (sglang 0.5.21 wheel, arg_groups/pipeline.py: handle_model_specific_adjustments runs first)."""
    r = _fit(cli, f"{V41} --speculative-algorithm dspark")
    assert r.exit_code == 2 and "Only EAGLE and DSPARK" in r.output and len(r.output.strip().splitlines()) == 1


def test_a_lone_draft_token_count_must_match_the_checkpoint_s_block(cli):
    """Without the block flag the draft config's gamma (V4.1-Flash's dspark_block_size 5) is taken before
    --speculative-num-draft-tokens is checked against it: 7 is refused, 6 is V4.1-Flash's width."""
    r = _fit(cli, f"{V41} --speculative-algorithm DSPARK --speculative-num-draft-tokens 7")
    assert r.exit_code == 2 and "(= 6 for gamma=5)" in r.output and len(r.output.strip().splitlines()) == 1
    ok = _fit(cli, f"{V41} --speculative-algorithm DSPARK --speculative-num-draft-tokens 6", "--json")
    said = json.loads(ok.stdout)["engine"]["sources"]["weights"]
    assert ok.exit_code in (0, 1) and "6 draft tokens verified a step" in said


def test_the_draft_is_the_three_stages_held_as_sglang_builds_them(flash41):
    """DSPARK_MODEL at TP 4 / EP 4 in the checkpoint's forms: the 128 experts a stage over EP; wq_b / wo_b and the
    shared experts over TP, wo_a in bf16 over TP; wq_a / wkv / main_proj (ReplicatedLinear), norms, router,
    hyper-connection parameters and the Markov tables whole; the confidence head in f32; gate.bias_vl not loaded; no
    embedding or LM head of its own (the target's are shared)."""
    spec = parse_serve(f"{V41} --speculative-algorithm DSPARK", **KW).speculative
    draft = draft_pricing(spec, flash41, tp=4, ep=4, lm_head_tp=4, dp_attention=False, pp=1)
    mtp = list(flash41.inventory.of_kind("mtp"))
    names = [t.name for t in mtp]
    assert not any("embed.weight" in n and "markov" not in n for n in names)  # nothing of the target's vocabulary
    bf16, f32 = get_format("bf16"), get_format("f32")
    experts = sum(t.nbytes for t in mtp if ".experts." in t.name and "shared" not in t.name)
    over_tp = sum(t.nbytes for t in mtp if "shared_experts" in t.name or t.name.endswith(("wq_b", "wo_b")))
    over_tp += sum(bf16.nbytes(t.shape) for t in mtp if t.name.endswith("wo_a"))
    confidence = [t for t in mtp if "confidence_head" in t.name]
    whole = sum(
        t.nbytes
        for t in mtp
        if t not in confidence
        and not t.name.endswith(("wq_b", "wo_b", "wo_a", "gate.bias_vl"))
        and ".experts." not in t.name
        and "shared_experts" not in t.name
    ) + sum(f32.nbytes(t.shape) for t in confidence)
    assert draft.bytes_per_device == whole + -(-over_tp // 4) + -(-experts // 4)
    # wo_a at 2 B a weight, 3 stages of 8,192 x 4,096: twice its fp8 checkpoint's weights
    assert sum(bf16.nbytes(t.shape) for t in mtp if t.name.endswith("wo_a")) == 3 * 8192 * 4096 * 2
    # the Markov head's two 129,280 x 256 bf16 tables, whole on every rank
    assert sum(t.nbytes for t in mtp if "markov_head" in t.name) == 2 * 129_280 * 256 * 2
    assert (draft.draft_layers, draft.num_draft_tokens, draft.algorithm) == (1, 6, "DSPARK")
    wider = draft_pricing(spec, flash41, tp=8, ep=8, lm_head_tp=8, dp_attention=False, pp=1)
    assert draft.bytes_per_device - wider.bytes_per_device == (-(-over_tp // 4) - -(-over_tp // 8)) + (
        -(-experts // 4) - -(-experts // 8)
    )


def test_the_recipe_s_sliding_window_pool_is_its_measured_439_040_slots(flash41):
    """Cap mode with DSpark's verify width 6 and --swa-prefix-tails 1024 (PREFIX_TAILS_SOURCE): ((128 + 128 x 6 + 256 +
    2 x 6) x 32 requests + 2 x 4,096 + 256 + 1,024 x (128 + 256)) = 438,912 tokens, in whole 256-token pages the
    logged 439,040 SWA slots; the default (4 x 32 prefix tails) would hold 94,976, none 45,824."""
    d = flash41.spec.dsv4
    pool = sglang_dsv41_pool(
        d, chunk=4096, max_running_requests=32, draft_layers=1, draft_tokens=6, form="0.5.21", prefix_tails=1024
    )
    swa = 439_040
    assert pool.fixed_bytes - _c2(flash41) == int(swa * pool.bytes_per_swa_token)
    # the V4 layout's 585 B a window token x 40 layers x 41 / 40
    assert pool.bytes_per_swa_token == pytest.approx(585 * 41)
    default = sglang_dsv41_pool(d, chunk=4096, max_running_requests=32, draft_layers=1, draft_tokens=6,
                                form="0.5.21")  # fmt: skip
    assert default.fixed_bytes - _c2(flash41) == int(94_976 * pool.bytes_per_swa_token)
    none = sglang_dsv41_pool(d, chunk=4096, max_running_requests=32, draft_layers=1, draft_tokens=6,
                             form="0.5.21", prefix_tails=0)  # fmt: skip
    assert none.fixed_bytes - _c2(flash41) == int(45_824 * pool.bytes_per_swa_token)
    # and SGLang's division of the logged 51.82 GiB budget (printed to 0.01 GiB) by 1,670.75 B a full token, the fixed
    # pools taken first, holds the logged 27.0M full tokens (printed to 0.1M)
    assert round(pool.bytes_per_full_token, 2) == 1670.75
    lo, hi = (int(((51.82 + e) * GiB - pool.fixed_bytes) / pool.bytes_per_full_token) for e in (-0.005, 0.005))
    assert 26_950_000 <= lo and hi <= 27_050_000


def _c2(d) -> int:
    """The ratio-2 layers' pending-pair state at 32 requests and 6 draft tokens (V41_FORM_SOURCE): ceil((33 x 8 + 8
    + 1) / 2) x 2 = 274 rows of 2 x 512 f32, 3 ratio-2 KV-source layers."""
    return 274 * 2 * 512 * 4 * 3


def test_the_recipe_starts_with_the_draft_the_host_engram_and_its_pool(cli, flash41):
    """The 3347 command: its engine line holds the draft's weights, the Engram projections alone (the tables in host
    memory), the 439,040-slot window pool and the full tokens at 1,670.75 B."""
    eng = json.loads(_fit(cli, _serve(), "--json").stdout)["engine"]
    assert eng["starts"] is True
    said = eng["sources"]
    assert "the speculative draft" in said["weights"] and "the tables in host memory" in said["weights"]
    assert "439,040 tokens" in said["kv_pool_tokens"] and "--swa-prefix-tails 1,024" in said["kv_pool_tokens"]
    assert "1,670.75 B a full token" in said["kv_pool_tokens"]
    plain = _serve().replace("--speculative-algorithm DSPARK --speculative-dspark-block-size 5 ", "")
    off = json.loads(_fit(cli, plain, "--json").stdout)["engine"]
    spec = parse_serve(f"{V41} --speculative-algorithm DSPARK", **KW).speculative
    draft = draft_pricing(spec, flash41, tp=4, ep=4, lm_head_tp=4, dp_attention=False, pp=1, held=_held())
    assert eng["weights_bytes"] - off["weights_bytes"] == draft.bytes_per_device
    gpu = json.loads(_fit(cli, _serve().split(" ", 2)[2], "--json").stdout)["engine"]  # the env prefix dropped
    assert gpu["weights_bytes"] - eng["weights_bytes"] > 40 * GiB  # the tables' rows over TP, in HBM by default


def _held():
    """The runtime forms fit hands draft_pricing for the 3347 command's stack (app/fit.py)."""
    from k3plan.engines.stack import parse_stack

    st = parse_stack("sglang").with_options(mem_fraction_static="0.70", moe_a2a_backend="none").with_defaults()
    return lambda t, role: get_format(st.runtime_format(role, t.fmt)).nbytes(t.shape)


def test_swa_prefix_tails_is_a_non_negative_whole_number():
    with pytest.raises(Exception, match="non-negative"):
        parse_serve(f"{V41} --swa-prefix-tails -1", **KW)
    assert parse_serve(f"{V41} --swa-prefix-tails 0", **KW).swa_prefix_tails == 0


def test_an_unknown_engram_host_layout_is_refused_as_sglang_refuses_it(cli):
    r = _fit(cli, f"SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT=mirror {V41}")
    assert r.exit_code == 2 and "expected shared or per_rank" in r.output and len(r.output.strip().splitlines()) == 1


def test_dp_attention_cuts_the_0731_draft_s_attention_over_the_attention_tp_group():
    """DeepSeek-V4-Flash-0731's bundled DSpark stages under DP attention (SGLANG_DSPARK_DP, the 0.5.17 wheel:
    DSparkAttention over get_parallel().attn_tp_size): ``tp`` is the attention-TP group (tp / dp), so at TP 4 / DP 4
    the attention and shared experts are whole and the experts stay over EP 4, as sgl-project/sglang#34822 ran it."""
    flash0731 = load_model("deepseek-v4-flash-0731")
    line = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash-0731 --tp 4 --dp 4 --enable-dp-attention "
        "--speculative-algorithm DSPARK"
    )
    kw = dict(platform="gpu", device_gib=80.0, device_name="nvidia-h100-sxm", release=parse_release("0.5.17"))
    spec = parse_serve(line, **kw).speculative
    dp = draft_pricing(spec, flash0731, tp=1, ep=4, lm_head_tp=4, dp_attention=True, pp=1)
    plain = draft_pricing(spec, flash0731, tp=4, ep=4, lm_head_tp=4, dp_attention=False, pp=1)
    mtp = flash0731.inventory.of_kind("mtp")
    bf16 = get_format("bf16")
    over_tp = sum(t.nbytes for t in mtp if "shared_experts" in t.name or t.name.endswith(("wq_b", "wo_b")))
    over_tp += sum(bf16.nbytes(t.shape) for t in mtp if t.name.endswith("wo_a"))
    assert dp.bytes_per_device - plain.bytes_per_device == over_tp - -(-over_tp // 4)
    assert "attention-TP group of 1" in dp.source and "attention-TP group" not in plain.source
    assert (dp.draft_layers, dp.num_draft_tokens) == (1, 6)  # the checkpoint's dspark_block_size 5, + 1
