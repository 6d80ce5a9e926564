"""README's score table (issue 46 item 3) is what benchmarks/score_speed.py prints now, computed from the shipped
serving benchmarks and the model as it is (no ratio typed in)."""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _score():
    spec = importlib.util.spec_from_file_location("score_speed", ROOT / "benchmarks" / "score_speed.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["score_speed"] = mod  # a dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


SCORE = _score()


@functools.cache
def rows():
    """The score's rows, computed once a process and only where a test asks (about 40 s on the 2-core machine:
    never at collection, which every xdist worker does)."""
    return SCORE.score_rows()


def test_the_readme_table_is_the_script_s_output():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- score:begin -->\n")[1].split("<!-- score:end -->")[0]
    assert table == SCORE.markdown(rows())


def test_every_shipped_benchmark_is_a_row_and_every_ratio_is_model_over_measured():
    from k3plan.evidence.benchmarks import load_benchmarks

    assert {r.case for r in rows()} == {Path(b.path).stem for b in load_benchmarks()}
    assert len(rows()) >= 15
    for r in rows():
        assert r.tpot_ratio is None or math.isclose(r.tpot_ratio, r.tpot_model_ms / r.tpot_measured_ms)
        assert (r.ttft_ratio is None) == (r.ttft_model_ms is None or r.ttft_measured_ms is None)
        assert r.held_out_tpot_ratio == r.tpot_ratio  # nothing fitted to TPOT
        if r.ttft_ratio is not None and r.ttft_floor_ms is not None:  # the floor: refitted without the case
            base = r.ttft_model_ms - r.ttft_floor_ms
            assert math.isclose(r.held_out_ttft_ratio, (base + r.held_out_ttft_floor_ms) / r.ttft_measured_ms)
        elif r.ttft_ratio is not None:  # nothing fitted: the held-out ratio is the ratio
            assert r.held_out_ttft_ratio == r.ttft_ratio


@functools.cache
def rows_with_floor():
    """The rows with the fitted TTFT floor ON whatever admitted.json decides (the floor's own mechanics)."""
    from k3plan.speed.terms import default_terms

    return SCORE.score_rows(terms=default_terms() | {"floor"})


def test_the_floor_is_refitted_without_each_case():
    """True leave-one-out: the held-out floor of a case is the one fitted on the others, never on itself -- its own
    engine's others where engine-floor is ON, its engine x hardware's (else its engine's) where a family floor term is
    (hardware-floor, lowc-floor, family-min-floor: the family's cases and count it asks for). The floor is fitted on
    the request's own run + F (the rows before the
    term prefill-pass serves SGLang's runs again with each prefill step holding the case's held-out F), so the pairs
    are those rows'; the rows scored keep the floors fitted there."""
    from k3plan.app.score import engine_of, family_rule, floor_level
    from k3plan.speed.terms import default_terms

    fitted_on = {
        r.case: r
        for r in SCORE.score_rows(terms=(default_terms() | {"floor"}) - {"prefill-pass"})
        if r.ttft_floor_ms is not None
    }
    with_floor = [r for r in rows_with_floor() if r.ttft_floor_ms is not None]
    assert len(with_floor) >= 10 and {r.case for r in with_floor} == set(fitted_on)
    per = floor_level(default_terms())
    rule = family_rule(per)  # a family floor: which of the family's cases, and how many besides the one left out
    groups = (lambda q: q.family, engine_of) if rule else (engine_of,) if per == "engine" else ()
    for r in with_floor:
        pairs = [(q, (q.ttft_model_ms - q.ttft_floor_ms, q.ttft_measured_ms)) for q in fitted_on.values()]
        others = [v for q, v in pairs if q.case != r.case]
        for i, group in enumerate(groups):  # the finest group with enough other published TTFTs, else all
            family = rule is not None and i == 0
            mine = [v for q, v in pairs if q.case != r.case and group(q) == group(r) and (not family or rule[0](q))]
            if len(mine) >= (rule[1] if family else 1):
                others = mine
                break
        assert r.held_out_ttft_floor_ms == SCORE.fit_floor(others)
        assert r.ttft_floor_ms == fitted_on[r.case].ttft_floor_ms


def test_the_frame_has_a_row_a_case():
    frame = SCORE.score_frame(rows())
    assert list(frame["case"]) == [r.case for r in rows()]
    assert {"tpot_ratio", "ttft_ratio", "held_out_tpot_ratio", "priced_as"} <= set(frame.columns)


def test_a_case_k3plan_cannot_price_says_why():
    import msgspec

    from k3plan.evidence.benchmarks import load_benchmarks

    (b,) = [b for b in load_benchmarks() if b.name.startswith("sglang kimi-k3 B300 Low-Latency MXFP4")][:1]
    odd = msgspec.structs.replace(b, split=msgspec.structs.replace(b.split, pp=2), path="x/pp2.yaml")
    (row,) = SCORE.score_rows((odd,))
    assert row.priced_as.startswith("not priced: pipeline parallel 2") and row.tpot_ratio is None


def test_the_api_gives_the_score_as_a_dataframe():
    """k3plan.api.score() is the same rows (k3plan.app.score, which the script prints), one column a Row field."""
    from dataclasses import fields

    import k3plan.api as k3
    from k3plan.app.score import Row
    from k3plan.speed.terms import default_terms

    table = k3.ScoreTable(rows(), default_terms())
    frame = table.to_pandas()
    assert list(frame.columns) == [f.name for f in fields(Row)]
    assert list(frame["case"]) == [r.case for r in rows()]
    assert "score" in k3.__all__ and SCORE.score_rows is k3plan_score_rows()


def k3plan_score_rows():
    from k3plan.app.score import score_rows

    return score_rows
