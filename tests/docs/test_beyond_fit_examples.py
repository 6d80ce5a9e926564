"""docs/beyond-fit.md quotes what fit and plan print under "advice": each quoted command is run and
its quoted lines must be what it prints now (whitespace aside: the page wraps lines its own way)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "beyond-fit.md").read_text()
BLOCK = PAGE.split("tests/docs/test_beyond_fit_examples.py runs each and compares):\n\n```\n", 1)[1].split("```", 1)[0]
EXAMPLES = [chunk.partition("\n") for chunk in BLOCK.split("$ k3plan ")[1:]]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_page_quotes_fit_and_plan_examples():
    assert len(EXAMPLES) == 6 and all(quoted.strip() for _, _, quoted in EXAMPLES)


@pytest.mark.parametrize("command, quoted", [(c, q) for c, _, q in EXAMPLES], ids=[c for c, _, _ in EXAMPLES])
def test_each_quoted_advice_is_what_the_command_prints(cli, command, quoted):
    r = cli(*shlex.split(command))
    assert r.exit_code in (0, 1, 3) and "Traceback" not in r.output  # 3: FITS IF (issue 50)
    assert flat(quoted) in flat(r.stdout), command


@pytest.mark.parametrize("tier, loaded", [("host", "host DRAM"), ("remote", "remote storage")])
def test_the_prefix_hit_paragraph_quotes_what_fit_prints(cli, tier, loaded):
    """The memory-tiers paragraph's TTFT figures (without and with a 60% hit) are fit's, read off its output."""
    import re

    r = cli("fit", "-t", "2x4x4", "--tp", "32", "--prefix-hit", "0.6", "--prefix-tier", tier)
    assert r.exit_code == 0, r.output
    m = re.search(
        r"TTFT \(one prompt's prefill, no queue\) ([\d,.]+) ms without the hit -> ([\d,.]+) ms", flat(r.stdout)
    )
    assert m, r.stdout
    para = flat(PAGE.split("## Memory tiers", 1)[1].split("\n## ", 1)[0])
    assert f"TTFT {m[1]} ms without the hit" in para
    assert (f"-> {m[2]} ms with it" if tier == "host" else f"from {loaded} {m[2]} ms") in para


def section(title: str) -> str:
    return flat(PAGE.split(f"## {title}", 1)[1].split("\n## ", 1)[0])


def said(text: str, pattern: str):
    import re

    m = re.search(pattern, text)
    assert m, f"docs/beyond-fit.md no longer says {pattern!r}"
    return m


def as_int(s: str) -> int:
    return int(s.replace(",", ""))


def run_json(cli, *args) -> dict:
    import json

    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


SESSION = (
    "curve",
    "-t",
    "2x4x4",
    "--tp",
    "32",
    "--batch",
    "32",
    "--context",
    "32768",
    "--turns",
    "20",
    "--system-tokens",
    "4000",
    "--user-tokens",
    "800",
    "--answer-tokens",
    "1200",
    "--tool-tokens",
    "2000",
    "--reasoning-tokens",
    "6000",
)


def test_the_sessions_paragraph_is_what_curve_prints(cli):
    """The page had 118,464 tokens allowed, turn 12 and 'all 20 turns fit' dropping the reasoning, from before the
    shipped temp model's upper end (curve at 2x4x4 batch 32 allowed 44,352: turn 5, and turn 9 dropping it; 39,744,
    turns 4 and 8, once vllm-tpu stored tpu-inference's 640-value MLA entry)."""
    text = section("Sessions")
    m = said(
        text,
        r"against the ([\d,]+) tokens `fit -t 2x4x4 --tp 32 --batch 32 --context 32768` allows a sequence .*? "
        r"the peaks run ([\d,]+), ([\d,]+), \.\.\. ([\d,]+), ([\d,]+) and turn (\d+) no longer fits \(([\d.]+)x the "
        r"visible conversation by turn 20\); dropping it \(`--drop-reasoning`\), the peaks run ([\d,]+), ([\d,]+), "
        r"\.\.\. ([\d,]+), ([\d,]+) and turn (\d+) no longer fits",
    )
    g = m.groups()
    for args, (peaks, turn) in ((SESSION, (g[1:5], g[5])), ((*SESSION, "--drop-reasoning"), (g[7:11], g[11]))):
        s = run_json(cli, *args)["sessions"]
        assert s["max_context_tokens"] == as_int(g[0])
        p = s["peak_context_tokens"]
        assert [p[0], p[1], p[-2], p[-1]] == [as_int(x) for x in peaks]
        assert s["first_turn_not_fitting"] == int(turn)
    carried = run_json(cli, *SESSION)["sessions"]
    assert f"{carried['peak_context_tokens'][-1] / carried['visible_context_tokens'][-1]:.2f}" == g[6]
    fit = run_json(cli, "fit", "-t", "2x4x4", "--tp", "32", "--batch", "32", "--context", "32768")
    assert fit["capacity"]["memory_context_tokens"] == as_int(g[0])


def test_the_speculative_decoding_figures_are_what_fit_prints(cli):
    """The page had 1,443 / 2,334 / 859 tok/s and TPOT 7.73 -> 5.55 ms, and for the draft's KV free 37.92 -> 34.84 GB
    (GB, not GiB), 28 -> 24 sequences and 474,048 -> 405,504 tokens: none was what fit printed."""
    text = section("Speculative decoding")
    m = said(
        text,
        r"([\d,]+) tok/s emitted, ([\d,]+) forward, ([\d,]+) accepted, TPOT ([\d.]+) -> ([\d.]+) ms, x([\d.]+) over",
    )
    d = run_json(
        cli,
        "fit",
        "-t",
        "2x4x4",
        "--tp",
        "32",
        "--batch",
        "8",
        "--context",
        "32768",
        "--spec-tokens",
        "3",
        "--acceptance",
        "0.8,0.6,0.4",
        "--draft-bytes",
        "30GB",
    )["advice"]["spec_decode"]
    s = d["speed"]
    assert [f"{s[k]:,.0f}" for k in ("emitted_tokens_per_s", "forward_tokens_per_s", "accepted_tokens_per_s")] == list(
        m.groups()[:3]
    )
    assert (
        f"{d['plain_step_s'] * 1e3:.2f}",
        f"{s['s_per_emitted_token'] * 1e3:.2f}",
        f"{s['speedup']:.2f}",
    ) == m.groups()[3:]
    mtp = run_json(cli, "models", "show", "deepseek-v3", "--by", "role")
    m = said(text, r"DeepSeek-V3's MTP layer: ([\d,]+) params, ([\d,]+) B,")
    assert (mtp["mtp_params"], mtp["breakdown"]["mtp"]["bytes"]) == (as_int(m[1]), as_int(m[2]))

    m = said(
        text,
        r"split over tp 32: ([\d,]+) B a token a device\) on `fit -t 2x4x4 --tp 32 --batch 8 (--spec-tokens 3 "
        r"--acceptance 0\.8 --draft-bytes 30GB)` \(128K, (\d+) sequences a device\) adds \d+ x 131,072 x [\d,]+ B = "
        r"(\d+) GiB of KV a device: free falls ([\d.]+) -> ([\d.]+) GiB a device, the sequences the room holds (\d+) "
        r"-> (\d+) and the longest context ([\d,]+) -> ([\d,]+) tokens \(without the draft's weights free is "
        r"([\d.]+) GiB\)",
    )
    base = ("fit", "-t", "2x4x4", "--tp", "32", "--batch", "8")
    plain, draft = run_json(cli, *base), run_json(cli, *base, *m[2].split())
    kv = run_json(cli, *base, *m[2].split(), "--draft-kv-bytes-per-token", "131072")
    assert kv["per_device"]["sequences"] == int(m[3])
    added = kv["per_device"]["kv_bytes"] - draft["per_device"]["kv_bytes"]
    assert added == int(m[3]) * 131072 * as_int(m[1]) == int(m[4]) * 2**30
    GiB = 2**30
    assert (f"{draft['per_device']['free_bytes'] / GiB:.2f}", f"{kv['per_device']['free_bytes'] / GiB:.2f}") == (
        m[5],
        m[6],
    )
    assert (draft["capacity"]["max_sequences"], kv["capacity"]["max_sequences"]) == (int(m[7]), int(m[8]))
    assert (draft["capacity"]["memory_context_tokens"], kv["capacity"]["memory_context_tokens"]) == (
        as_int(m[9]),
        as_int(m[10]),
    )
    assert f"{plain['per_device']['free_bytes'] / GiB:.2f}" == m[11]


def test_the_memory_tiers_figures_are_what_fit_prints(cli):
    """The page had 2.47 s to prefill a 131K session again (1/53,144 s a token typed in: the linear-only rate; fit and
    report print the roofline's TTFT, 3.65 s) and a 32K prompt's 75% hit saving 0.46 s of 0.62 s (535.8 of 714.4 ms)."""
    text = section("Memory tiers")
    m = said(
        text,
        r"host DRAM holds (\d+) suspended 131K sessions .*?, restores one in ([\d.]+) ms vs ([\d.]+) s to prefill "
        r"it again \(the roofline's TTFT\); remote storage \(DCN, 50 GB/s a host\) in ([\d.]+) ms",
    )
    host = run_json(cli, "fit", "-t", "2x4x4", "--tp", "32", "--offload", "host")["advice"]["offload"]
    remote = run_json(cli, "fit", "-t", "2x4x4", "--tp", "32", "--offload", "remote")["advice"]["offload"]
    assert host["sessions_held"] == int(m[1])
    assert (f"{host['ttft_added_s'] * 1e3:.1f}", f"{host['recompute_s']:.2f}") == (m[2], m[3])
    assert f"{remote['ttft_added_s'] * 1e3:.1f}" == m[4]
    m = said(
        text,
        r"a 32K prompt with a 75% hit in HBM \(`fit -t 2x4x4 --tp 32 --context 32768 --prefix-hit 0\.75`\) saves "
        r"([\d.]+) ms of ([\d.]+) ms",
    )
    e = run_json(cli, "fit", "-t", "2x4x4", "--tp", "32", "--context", "32768", "--prefix-hit", "0.75")["prefix_hit"][
        "effect"
    ]
    assert (f"{e['saved_s'] * 1e3:.1f}", f"{e['ttft_cold_s'] * 1e3:.1f}") == (m[1], m[2])
