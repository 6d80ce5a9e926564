"""The speed model's terms are one registry (issue 51 item 2, issue 46 item 4): each term typed, keyed and sourced,
ON only where admitted.json (the leave-one-out admission: tests/speed/test_admission.py) says so, and no engine's
rule left in k3plan/speed/."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from k3plan.speed.terms import (
    BY_NAME,
    CITED,
    REGISTRY,
    SCORED,
    TermKey,
    admitted,
    default_terms,
    evidence_files,
    resolve,
)

SPEED = Path(__file__).resolve().parents[2] / "k3plan" / "speed"


def test_every_term_is_named_once_sourced_and_priced_where_it_is_a_step_term():
    assert len(BY_NAME) == len(REGISTRY)
    for t in REGISTRY:
        assert re.fullmatch(r"[a-z0-9-]+", t.name) and t.title and t.source, t.name
        assert (t.price is not None) == (t.level == "step"), t.name
        assert t.admission == "scored" or t.level == "step", t.name  # a cited term prices 0 s in a step


def test_a_term_s_evidence_is_files_the_package_ships():
    for t in REGISTRY:
        for pattern in t.evidence:
            assert any(f for f in evidence_files(t) if Path(f).match(pattern.split("/")[-1])), (t.name, pattern)


def test_admitted_json_decides_every_scored_term_and_the_default_is_what_it_admits():
    table = admitted()["terms"]
    assert list(table) == list(SCORED)  # every scored term tried, in REGISTRY order
    assert default_terms() == CITED | {n for n in SCORED if table[n]["on"]}
    for n in SCORED:
        # ON exactly where with it the held-out score over the whole set is better: its mean |ln ratio| lower
        w, wo = table[n]["with"]["together"], table[n]["without"]["together"]
        assert table[n]["on"] == (w["mean_abs_ln"] < wo["mean_abs_ln"]), n


def test_an_unknown_term_is_refused_and_cited_terms_always_join():
    from k3plan.errors import K3PlanError

    with pytest.raises(K3PlanError, match="unknown speed term"):
        resolve(frozenset({"nope"}))
    assert resolve(frozenset()) == CITED


def test_a_term_s_key_is_typed():
    key = TermKey(stage="decode", stack="torchtpu-vllm", hardware="tpu", kv_dtype=None, op_kinds=("grouped_matmul",))
    mla = BY_NAME["mla-kernel"]
    assert mla.applies(key)
    assert not mla.applies(TermKey(stage="decode", stack="sglang", hardware="tpu", kv_dtype=None))
    assert not mla.applies(TermKey(stage="decode", stack="torchtpu-vllm", hardware="tpu", kv_dtype="fp8"))
    assert not mla.applies(TermKey(stage="decode", stack="torchtpu-vllm", hardware="gpu", kv_dtype=None))
    glue = BY_NAME["moe-glue"]
    assert glue.phase == "decode" and not glue.applies(
        TermKey(stage="prefill", stack="torchtpu-vllm", hardware="tpu", kv_dtype=None)
    )
    mx = BY_NAME["mxfp4-dequant"].when
    fp4 = TermKey(
        stage="decode",
        stack="torchtpu-vllm",
        hardware="tpu",
        kv_dtype=None,
        op_kinds=("grouped_matmul",),
        expert_formats=("mxfp4_f32scale",),
    )
    assert mx.holds(fp4) and not mx.holds(key)  # the routed experts' format is part of the key
    assert not mx.holds(TermKey(**{**msgspec.structs.asdict(fp4), "op_kinds": ("matmul",)}))
    assert not mx.holds(TermKey(**{**msgspec.structs.asdict(fp4), "expert_formats": ("fp8_block",)}))


def test_no_engine_rule_is_left_in_the_speed_package():
    """An engine's name is its folder's data (engines/<engine>/speed.py STACKS), never a literal tested in speed/,
    and no stack name is re-parsed there."""
    from k3plan.engines.stack import STACK_ALIASES, list_stacks

    names = set(list_stacks()) | set(STACK_ALIASES)
    for f in sorted(SPEED.glob("*.py")):
        text = f.read_text()
        for name in names:
            assert f'"{name}"' not in text and f"'{name}'" not in text, (f.name, name)
        for line in text.splitlines():
            if 'split(":")' in line:
                assert "stack" not in line and "engine" not in line, (f.name, line)


def test_the_step_terms_follow_the_set_asked():
    from k3plan.app.setup import setup_from
    from k3plan.speed.serving import ModelAt

    setup = setup_from(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32, ep=None, dp=None, stack=None)
    bare = ModelAt(setup, setup.hardware, evidence=None, terms=frozenset()).speed(1, 8192, 512)
    full = ModelAt(setup, setup.hardware, evidence=None, terms=None).speed(1, 8192, 512)
    over = {o.name: o.expected_s for o in bare.decode.ops if o.kind == "overhead"}
    assert over and all(v == 0.0 for v in over.values())  # only the cited terms: 0 s each
    assert full.decode.expected_s > bare.decode.expected_s
    by_term = {s.term: s for s in full.terms}
    assert [s.term for s in full.terms] == [t.name for t in REGISTRY if t.level == "step"]
    assert sum(s.decode_s for s in full.terms) == pytest.approx(
        sum(o.expected_s for o in full.decode.ops if o.kind == "overhead")
    )
    assert by_term["host"].on and by_term["host"].decode_s > 0 and by_term["host"].source
    assert not by_term["moe-glue"].on or "moe-glue" in default_terms()
