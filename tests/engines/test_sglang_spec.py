"""SGLang's speculative decoding through --serve (engines/sglang/spec.py, read in the sglang 0.5.15 wheel): the flags
as SGLang resolves them, what the draft adds to the start check (its weights at the profile, its KV layers in a
token's bytes, DeepSeek-V4's rings and full-token inflation), and the one-line refusals."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.engines.sglang.dsv4_pool import c128_state_rows, sglang_dsv4_pool
from k3plan.engines.sglang.spec import draft_cell_bytes
from k3plan.models.loader import load_model

V3 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code"
V4 = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4"
V4_SPEC = " --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def _read(flags: str, base: str = V3):
    return parse_serve(f"{base} {flags}", platform="gpu", device_gib=140).speculative


def _engine(cli, command: str, hardware: str = "nvidia-h200"):
    r = cli("fit", "-H", hardware, "--serve", command, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def _refused(cli, command: str, match: str, hardware: str = "nvidia-h200"):
    r = cli("fit", "-H", hardware, "--serve", command)
    assert r.exit_code == 2, r.output
    assert match in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_no_speculative_flag_reads_none():
    assert _read("") is None


@pytest.mark.parametrize(
    "flags",
    [
        "--speculative-algorithm NEXTN",
        "--speculative-algorithm=nextn",
        "--speculative-algo EAGLE",  # argparse's prefix of --speculative-algorithm (InferenceX's recipes)
        "--speculative-algorithm EAGLE --speculative-draft-model-path deepseek-ai/DeepSeek-V3",
    ],
)
def test_nextn_and_eagle_resolve_to_eagle_with_sglang_s_own_choice(flags):
    """_resolve_speculative_algorithm_alias: NEXTN / EAGLE -> EAGLE; no steps given: (3, 1, 4)
    (_auto_choose_speculative_params); the target's own path as the draft is the same checkpoint."""
    s = _read(flags)
    assert (s.algorithm, s.num_steps, s.eagle_topk, s.num_draft_tokens) == ("EAGLE", 3, 1, 4)
    assert "_auto_choose_speculative_params" in s.source


def test_given_steps_are_kept_and_topk_1_sets_the_draft_tokens_to_steps_plus_1():
    s = _read("--speculative-algorithm EAGLE --speculative-num-steps=2 --speculative-eagle-topk=1 "
              "--speculative-num-draft-tokens=8")  # fmt: skip
    assert (s.num_steps, s.eagle_topk, s.num_draft_tokens) == (2, 1, 3)
    assert "steps + 1" in s.source
    s = _read("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1")
    assert s.num_draft_tokens == 4
    s = _read("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4 "
              "--speculative-num-draft-tokens 8 --speculative-attention-mode decode")  # fmt: skip
    assert (s.eagle_topk, s.num_draft_tokens) == (4, 8)


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ("--speculative-algorithm MEDUSA", "Unknown speculative algorithm name"),
        ("--speculative-algorithm EAGLE3 --speculative-draft-model-path a/b", "EAGLE-3 draft checkpoint"),
        ("--speculative-algorithm NGRAM", "n-gram worker"),
        ("--speculative-algorithm STANDALONE", "separate draft model"),
        ("--speculative-algorithm NEXTN --speculative-draft-model-path lmsys/DeepSeek-V3-NextN", "separate draft"),
        ("--speculative-algorithm NEXTN --speculative-draft-model x/nextn", "separate draft"),
        ("--speculative-algorithm EAGLE --speculative-eagle-topk 1", "asserts all three are left out"),
        ("--speculative-algorithm EAGLE --speculative-num-steps 3", "without --speculative-eagle-topk"),
        ("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 2", "num-draft-tokens"),
        ("--speculative-num-steps 3", "without --speculative-algorithm"),
        ("--speculative-algorithm EAGLE --speculative-num-steps 0 --speculative-eagle-topk 1", "positive whole"),
    ],
)
def test_what_sglang_refuses_or_k3plan_cannot_price_is_refused_in_one_line(cli, flags, match):
    _refused(cli, f"{V3} {flags}", match)


def test_another_engine_s_spelling_is_refused_by_name(cli):
    _refused(cli, f'{V3} --speculative-config \'{{"method": "mtp"}}\'', "vLLM's speculative-decoding flag; SGLang's is --speculative-algorithm")


def test_v3_with_nextn_adds_the_draft_s_weights_and_kv_layer_to_the_start_check(cli):
    """The draft loads before the target's pool is sized, with its own embed_tokens and lm_head still held; the
    target's bytes a token are int(cell x (1 + 1 / 61)); max_running_requests defaults to 48."""
    off = _engine(cli, V3)
    on = _engine(cli, f"{V3} --speculative-algorithm NEXTN")
    m = load_model("deepseek-v3")
    mtp = m.inventory.of_kind("mtp")
    expert = sum(t.nbytes for t in mtp if ".experts." in t.name and "shared_experts" not in t.name)
    whole = sum(t.nbytes for t in mtp if any(k in t.name for k in ("eh_proj", "norm", ".gate.")))
    rest = sum(t.nbytes for t in mtp) - expert - whole
    draft = on["weights_bytes"] - off["weights_bytes"]
    assert draft == whole + -(-rest // 8) + -(-expert // 8)  # TP 8, the experts over the TP group (no EP)
    assert 1.9 * 2**30 < draft < 2.1 * 2**30
    cell = 576 * 61 * 2  # MLA, bf16
    assert draft_cell_bytes(cell, target_layers=61, draft_layers=1) == 71_424 == int(cell * (1 + 1 / 61))
    assert on["kv_pool_bytes"] == off["kv_pool_bytes"] - draft
    assert on["kv_pool_tokens"] == on["kv_pool_bytes"] // 71_424
    assert off["kv_pool_tokens"] == off["kv_pool_bytes"] // cell
    assert "max_running_requests=48" in on["message"]
    assert "int(70,272 x (1 + 1 / 61))" in on["sources"]["kv_pool_tokens"]


def test_dp_attention_cuts_the_draft_s_attention_and_embedding_over_the_attention_tp_group(cli):
    base = f"{V3} --enable-dp-attention --dp-size 8 --ep-size 8 --speculative-algorithm NEXTN"
    on = _engine(cli, base)
    off = _engine(cli, base.replace(" --speculative-algorithm NEXTN", ""))
    m = load_model("deepseek-v3")
    head = next(t.nbytes for t in m.inventory.of_kind("mtp") if "shared_head.head" in t.name)
    embed = next(t.nbytes for t in m.inventory.of_kind("mtp") if "embed_tokens" in t.name)
    draft = on["weights_bytes"] - off["weights_bytes"]
    # attention TP 1: the embedding whole, the LM head over the 8 ranks of tp_size
    assert draft > embed + head // 8


def test_v4_with_eagle_takes_sglang_s_speculative_rings_and_the_draft_s_layer(cli):
    d = load_model("deepseek-v4-flash").spec.dsv4
    plain, spec = sglang_dsv4_pool(d), sglang_dsv4_pool(d, speculative=True)
    n = len(d.compress_ratios)
    assert n == 43
    # the c4 rings of 16 rows, then x 44 / 43
    ring16 = (
        0.1 * 584 * n + 584 * 21 / 4 + 584 * 20 / 128 + 132 * 21 / 4 + 0.1 * 16 / 128 * (2 * 2 * 512 * 4) * 21
        + 0.1 * 16 / 128 * (2 * 2 * 128 * 4) * 21
    )  # fmt: skip
    assert spec.bytes_per_full_token == pytest.approx(ring16 * 44 / 43, rel=1e-12)
    assert spec.bytes_per_full_token > plain.bytes_per_full_token
    assert spec.fixed_bytes == c128_state_rows(256, 256) * 2 * 512 * 4 * 20 > plain.fixed_bytes
    on = _engine(cli, V4 + V4_SPEC)
    off = _engine(cli, V4)
    assert on["weights_bytes"] > off["weights_bytes"] and on["kv_pool_tokens"] < off["kv_pool_tokens"]
    assert "rings of 16 / 256 rows" in on["sources"]["kv_pool_tokens"]
    assert "max_running_requests=256" in on["message"]  # DeepSeek-V4's default is set before the speculative one


@pytest.mark.parametrize(
    ("command", "match"),
    [
        (V4 + " --speculative-algorithm NEXTN --speculative-eagle-topk 1 --speculative-num-steps 3", "Only EAGLE"),
        (V4 + " --speculative-algorithm EAGLE", "without --speculative-eagle-topk"),
        ("sglang serve --model-path moonshotai/Kimi-K2-Thinking --tp 8 --speculative-algorithm EAGLE", "no MTP"),
        ("sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4" + V4_SPEC, "DSpark"),
        (f"{V3} --pp-size 2 --speculative-algorithm NEXTN", "Pipeline parallelism"),
    ],
)
def test_a_model_or_split_sglang_refuses_with_a_draft_is_refused_in_one_line(cli, command, match):
    _refused(cli, command, match)


def test_an_older_release_s_v4_pool_with_a_draft_is_refused(cli):
    r = cli("fit", "-H", "nvidia-h200", "--serve", V4 + V4_SPEC, "--engine-version", "0.5.14")
    assert r.exit_code == 2 and "read from 0.5.15 on" in r.output and len(r.output.strip().splitlines()) == 1


def test_a_release_that_sized_the_pool_before_the_draft_loaded_is_refused(cli):
    """0.5.12's start sizes the target's pool before the draft loads (engines/sglang/spec.py SPEC_FROM); 0.5.14's
    profiles the target's free memory with the draft resident, as 0.5.15's does."""
    cmd = f"{V3} --speculative-algorithm NEXTN"
    old = cli("fit", "-H", "nvidia-h200", "--serve", cmd, "--engine-version", "0.5.12")
    assert old.exit_code == 2 and "read from 0.5.14 on" in old.output and len(old.output.strip().splitlines()) == 1
    assert cli("fit", "-H", "nvidia-h200", "--serve", cmd, "--engine-version", "0.5.14").exit_code in (0, 1)


def test_the_draft_s_experts_are_held_as_the_target_s_moe_runner_holds_them(cli):
    """The draft's MoE runs the target's runner (sglang 0.5.15 wheel, arg_groups/overrides.py
    _speculative_moe_runner_default: speculative_moe_runner_backend defaults to the resolved moe_runner_backend), so
    under --moe-runner-backend marlin the NextN layer's FP4 experts keep the fp32 scale Parameters the target's keep
    (models/formats.py mxfp4_e8m0_f32kept); InferenceX#2128's MTP log on 8 H200 (the draft's 'mem usage=3.07 GB')
    is the case (tests/engines/cases/sglang-inferencex-2128-dsv4-pro-h200-tp8-mtp.yaml)."""
    from k3plan.models.formats import get_format

    base = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --mem-fraction-static 0.94 "
        "--max-running-requests 8 --moe-runner-backend {runner}"
    )
    draft = {}
    for runner in ("marlin", "flashinfer_mxfp4"):
        on = _engine(cli, base.format(runner=runner) + V4_SPEC)
        off = _engine(cli, base.format(runner=runner))
        draft[runner] = on["weights_bytes"] - off["weights_bytes"]
    mtp = load_model("deepseek-v4-pro").inventory.of_kind("mtp")
    experts = [t for t in mtp if ".experts." in t.name and "shared" not in t.name]
    assert experts and {t.fmt for t in experts} == {"ds_fp4"}
    checkpoint = sum(t.nbytes for t in experts)
    kept = sum(get_format("mxfp4_e8m0_f32kept").nbytes(t.shape) for t in experts)
    assert kept > checkpoint  # 4 B a 32-block beside the codes and the E8M0 scales
    # the experts over the 8 ranks of the TP group (no EP), rounded up as the draft's pricing rounds each group
    assert draft["marlin"] - draft["flashinfer_mxfp4"] == -(-kept // 8) - -(-checkpoint // 8)
