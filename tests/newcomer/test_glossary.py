"""Issue 36 point 7: `k3plan explain TERM` for every term the output uses; the ShardSpecs format documented
with an example file that loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.glossary import TERMS, lookup

ROOT = Path(__file__).resolve().parents[2]
# the jargon the issue found unexplained, and the words fit / roofline / plan print most
USED = [
    "KDA",
    "hybrid paging",
    "graph buckets",
    "study view",
    "porting study",
    "MLA",
    "KV cache",
    "headroom",
    "temporaries",
    "engine reserve",
    "usable HBM",
    "tp",
    "ep",
    "dp",
    "pp",
    "DP attention",
    "fallback",
    "stack",
    "prefill chunk",
    "TPOT",
    "TTFT",
    "MFU",
    "roofline",
    "memory-bound",
    "probe records",
    "closest miss",
    "Pareto front",
    "ShardSpecs",
    "fp8_ds_mla",
    "absorbed MLA",
    "reason_code",
    "128k",
]


@pytest.mark.parametrize("term", USED)
def test_each_term_is_explained(cli, term):
    r = cli("explain", term)
    assert r.exit_code == 0, r.output
    assert "more: " in r.stdout


def test_the_terms_appear_in_the_output(cli):
    """Each glossary term (or an alias) is printed by fit, roofline or plan, is in their --help, or in the
    README a new user reads: no dead entries."""
    out = (
        " ".join(
            cli(*a).stdout
            for a in (
                ("fit",),
                ("fit", "-t", "2x2x2", "--tp", "16"),
                ("roofline", "-t", "2x4x4", "--tp", "32"),
                ("plan", "-H", "tpu-v7x", "--max-chips", "32"),
                ("fit", "--json"),
                ("--help",),
                ("fit", "--help"),
                ("plan", "--isl", "4k", "--osl", "1k", "-H", "tpu-v7x", "--max-chips", "32"),
            )
        ).lower()
        + (ROOT / "README.md").read_text().lower()
    )
    missing = [t.term for t in TERMS if not any(s.lower() in out for s in (t.term, *t.aliases))]
    assert not missing


def test_unknown_term_is_one_line_exit_2(cli):
    r = cli("explain", "hybird")
    assert r.exit_code == 2 and "did you mean hybrid paging" in r.output and len(r.output.strip().splitlines()) == 1


def test_explain_lists_and_json(cli):
    r = cli("explain")
    assert r.exit_code == 0 and len(r.stdout.strip().splitlines()) >= len(TERMS)
    d = json.loads(cli("explain", "kda", "--json").stdout)
    assert d["term"] == "KDA" and lookup("Kimi Delta Attention").term == "KDA"


def test_root_help_links_explain(cli):
    assert "k3plan explain KDA" in cli("--help").stdout


def test_the_shardspecs_example_file_fits_as_the_stack(cli):
    """docs/examples/shardspecs.yaml reproduces the vllm-tpu split of K3 at tp 32 byte for byte."""
    ex = ROOT / "docs" / "examples" / "shardspecs.yaml"
    a = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "-c", "8192", "--shardspecs", ex, "--json").stdout)
    b = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "-c", "8192", "--json").stdout)
    assert a["fits"] and a["per_device"] == b["per_device"]
    doc = (ROOT / "docs" / "shardspecs.md").read_text()
    assert "examples/shardspecs.yaml" in doc and "`shardspecs`" in doc
    assert "docs/shardspecs.md" in (ROOT / "README.md").read_text()
