"""fit --engine-version (k3plan.engines.release): the rules that changed between an engine's releases follow the
release a --serve command runs -- vLLM's sampler warm-up (0.11.1-0.16.x sort the top-k / top-p mask,
engines/vllm/sampler.py) and SGLang's DeepSeek-V4 pool form (engines/sglang/dsv4_pool.py) -- and bad input is one
line, exit 2."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.release import parse_post, parse_release
from k3plan.engines.sglang.dsv4_pool import form_for_release, sglang_dsv4_pool
from k3plan.engines.vllm.sampler import LIVE_BYTES_PER_ENTRY, sampler_profile_peak, sort_live_bytes_per_entry
from k3plan.errors import K3PlanError
from k3plan.models.loader import load_model

K2_VOCAB = 163_840  # Kimi-K2's config.json vocab_size
K2_THINKING = "vllm serve moonshotai/Kimi-K2-Thinking --tensor-parallel-size 8"


@pytest.mark.parametrize(
    ("text", "release"),
    [("0.11.1", (0, 11, 1)), ("v0.5.15", (0, 5, 15)), ("0.5.15.post1", (0, 5, 15)), ("1.2", (1, 2, 0))],
)
def test_a_release_number_reads_as_the_engines_tag_it(text, release):
    assert parse_release(text) == release


@pytest.mark.parametrize(
    ("text", "post"), [("0.4.8", 0), ("0.4.8.post1", 1), ("v0.4.9.post4", 4), ("0.5.15.post12", 12), ("1.2", 0)]
)
def test_a_post_release_keeps_its_number_for_the_rules_that_read_it(text, post):
    assert parse_post(text) == post


@pytest.mark.parametrize("text", ["", "latest", "0.11.1rc2", "0.11.x", "11"])
def test_anything_else_is_refused_by_name(text):
    with pytest.raises(K3PlanError, match="expected a release number"):
        parse_release(text)
    with pytest.raises(K3PlanError, match="expected a release number"):
        parse_post(text)


def test_the_sort_releases_hold_the_sorted_logits_and_torch_s_buffers():
    """0.11.1-0.16.x: 16-bit logits, their float32 copy, sorted values and int64 indices, then the sort's own buffers
    by torch's branch on the rows; 0.17.0 on (and no release given): the current code's 14 B an entry."""
    at = {
        release: sampler_profile_peak(
            max_num_seqs=1024, max_num_batched_tokens=8192, vocab_size=K2_VOCAB, release=release
        )
        for release in ((0, 11, 1), (0, 16, 9), (0, 17, 0), None)
    }
    assert at[(0, 11, 1)][0] == at[(0, 16, 9)][0] == 38 * 1024 * K2_VOCAB  # 5.94 GiB: the recipe's K2-Thinking case
    assert at[(0, 17, 0)][0] == at[None][0] == LIVE_BYTES_PER_ENTRY * 1024 * K2_VOCAB
    assert "vLLM 0.11.1" in at[(0, 11, 1)][2] and "SortStable.cu" in at[(0, 11, 1)][2]
    # segmented_sort_pairs from 128 rows, by_full_sort below (two int2 buffers and the radix sort's keys), one row
    assert [sort_live_bytes_per_entry(r) for r in (1, 2, 127, 128)] == [38, 50, 50, 38]
    # 0.8.5-0.11.0 sort too, as their wheels install (no FlashInfer: the 0.8.5-0.11.0 wheels' METADATA and
    # TopKTopPSampler.__init__), and the figure names the older wheels read
    for release in ((0, 8, 5), (0, 9, 2), (0, 10, 2), (0, 11, 0)):
        got = sampler_profile_peak(max_num_seqs=256, max_num_batched_tokens=2048, vocab_size=K2_VOCAB, release=release)
        assert got[0] == 38 * 256 * K2_VOCAB and "0.8.5 / 0.9.0 / 0.9.2 / 0.10.2 / 0.11.0 wheels" in got[2]
    # a release before the sort ones was not read: the current code, and the figure says so
    old = sampler_profile_peak(max_num_seqs=256, max_num_batched_tokens=2048, vocab_size=K2_VOCAB, release=(0, 8, 2))
    assert old[0] == LIVE_BYTES_PER_ENTRY * 256 * K2_VOCAB and "0.8.2 not read" in old[2]


def test_the_recipe_s_k2_thinking_pool_moves_by_the_sort_and_the_caveat_names_it(cli):
    """The vLLM recipe's K2-Thinking start (tests/engines/cases/vllm-recipes115-*): at 0.11.1 the sampler's sort
    costs 3.75 GiB more than the current code's mask (0.17.0 on), taken off the pool one for one (both releases
    before 0.20.0's utilization default: engines/vllm/releases.py option_defaults)."""
    now, then = (
        json.loads(cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", K2_THINKING, *extra, "--json").stdout)
        for extra in (("--engine-version", "0.17.0"), ("--engine-version", "0.11.1"))
    )
    grown = (38 - LIVE_BYTES_PER_ENTRY) * 1024 * K2_VOCAB
    assert then["engine"]["activation_bytes"] - now["engine"]["activation_bytes"] == grown
    assert now["engine"]["kv_pool_bytes"] - then["engine"]["kv_pool_bytes"] == pytest.approx(grown, abs=2)
    caveats = then["engine"]["serve"]["caveats"]
    assert any(c.startswith("--engine-version 0.11.1: the profile run's sampler") for c in caveats)


def test_sglang_s_pool_form_follows_the_release():
    """0.5.14's wheel still has 0.5.13's per-token c128 rings; 0.5.15 takes them as a fixed charge."""
    assert [form_for_release(r) for r in (None, (0, 5, 15), (0, 5, 16), (0, 5, 14), (0, 5, 13), (0, 5, 9))] == [
        "0.5.15",
        "0.5.15",
        "0.5.15",
        "0.5.13",
        "0.5.13",
        "0.5.13",
    ]


def test_a_sglang_v4_command_at_0_5_13_is_priced_at_that_form(cli):
    serve = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --mem-fraction-static 0.90 --context-length 131072"
    eng = json.loads(cli("fit", "-H", "nvidia-h200", "--serve", serve, "--engine-version", "0.5.13", "--json").stdout)[
        "engine"
    ]
    old = sglang_dsv4_pool(load_model("deepseek-v4-flash").spec.dsv4, form="0.5.13")
    assert eng["kv_pool_tokens"] == int(eng["kv_pool_bytes"] / old.bytes_per_full_token) // 256 * 256


def test_an_engine_with_no_release_rule_says_so(cli):
    serve = "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 16 --enable-expert-parallel"
    r = cli("fit", "-t", "2x2x2", "--serve", serve, "--engine-version", "0.11.1")
    assert "--engine-version 0.11.1: no rule k3plan prices for kimi-k3 differs by release" in " ".join(r.output.split())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--engine-version", "latest", "--serve", K2_THINKING), "expected a release number"),
        (("--engine-version", "0.11.1"), "give the command with --serve"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, words):
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", *args)
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_sglang_s_dp_attention_command_names_sglang_s_release_rule(cli):
    """--serve reads SGLang's DP-attention commands as the dp-attention stack, whose pool is SGLang's: the same rule
    follows the release."""
    serve = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --dp 4 --enable-dp-attention "
        "--moe-a2a-backend deepep"
    )
    r = cli("fit", "-H", "nvidia-b200", "--serve", serve, "--engine-version", "0.5.15", "--json")
    serve_read = json.loads(r.stdout)["engine"]["serve"]
    assert serve_read["stack"].startswith("dp-attention")
    assert any(c.startswith("--engine-version 0.5.15: DeepSeek-V4's pool form") for c in serve_read["caveats"])


def test_vllm_v0_is_said_where_the_release_still_has_it(cli):
    """VLLM_USE_V1=0 runs the V0 engine in the 0.8.5-0.10.x wheels (vllm/worker/worker.py; gone from 0.11.0): the
    caveat says so; at 0.11.0 and later (and with V1, the default) nothing is said."""
    serve = "VLLM_USE_V1=0 vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --max-model-len 32768"

    def caveats(*extra: str) -> list[str]:
        out = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve, *extra, "--json")
        return json.loads(out.stdout)["engine"]["serve"]["caveats"]

    assert any(
        c.startswith("VLLM_USE_V1=0: vLLM 0.9.2 runs its V0 engine") for c in caveats("--engine-version", "0.9.2")
    )
    assert not any(c.startswith("VLLM_USE_V1=") for c in caveats("--engine-version", "0.11.0"))
    assert not any(c.startswith("VLLM_USE_V1=") for c in caveats())


def test_before_0_10_1_a_budget_under_the_default_batch_is_refused_as_vllm_refuses_it(cli):
    """vLLM 0.8.5-0.10.0 set the default max_num_seqs (1,024 on a >= 70 GiB GPU) uncut, and SchedulerConfig refuses
    fewer batched tokens than sequences (the 0.8.5, 0.9.2, 0.10.0 wheels' vllm/config.py); from 0.10.1 the default is
    min(1,024, max_num_batched_tokens) (EngineArgs._set_default_args_v1), so the same command starts."""
    serve = (
        "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --max-model-len 4096 --max-num-batched-tokens 512"
    )

    def fit(release: str):
        return cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve, "--engine-version", release, "--json")

    old = fit("0.10.0")
    assert old.exit_code == 2 and len(old.output.strip().splitlines()) == 1
    assert "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024)" in old.output
    assert fit("0.10.1").exit_code == 0
    # explicit and too many: refused in every release read for the check (0.8.4-0.10.2, and 0.26.0-0.34.0's
    # vllm/config/scheduler.py still raises it), the default release's included
    for release in ("0.10.2", "0.26.0", "0.34.0", None):
        at = ("--engine-version", release) if release else ()
        explicit = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve + " --max-num-seqs 600", *at)
        assert explicit.exit_code == 2 and "max_num_seqs (600)" in explicit.output


def test_0_8_4_sizes_the_defaults_by_the_device_s_name_and_reports_tokens_over_the_length(cli):
    """0.8.4 gives the large defaults (8,192 tokens, 1,024 sequences) to a device named h100 / h200 only, so an H20
    gets 2,048 / 256 (by memory from 0.8.5: the 0.8.4 / 0.8.5 wheels' EngineArgs._set_default_args_v1); before 0.9.1
    the concurrency is the pool's tokens over max_model_len (kv_cache_utils.py, the 0.8.4-0.9.0 wheels)."""
    serve = "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 16 --max-model-len 1000"

    def engine(hw: str, release: str) -> dict:
        out = cli("fit", "-H", hw, "-t", "16", "--serve", serve, "--engine-version", release, "--json")
        return json.loads(out.stdout)["engine"]

    def tokens(e: dict) -> int:
        return int(e["message"].split("GPU KV cache size: ")[1].split(" tokens")[0].replace(",", ""))

    old, new = engine("nvidia-h20", "0.8.4"), engine("nvidia-h20", "0.8.5")
    assert "256 rows (min(max_num_seqs 256, max_num_batched_tokens 2,048))" in old["sources"]["activation"]
    assert "1,024 rows (min(max_num_seqs 1,024, max_num_batched_tokens 8,192))" in new["sources"]["activation"]
    assert "1,024 rows" in engine("nvidia-h200", "0.8.4")["sources"]["activation"]
    assert old["max_concurrency"] == round(tokens(old) / 1000, 2)  # not num_blocks / cdiv(1000, 64)
    later = engine("nvidia-h20", "0.9.1")
    assert later["max_concurrency"] == round(tokens(later) // 64 / 16, 2)
