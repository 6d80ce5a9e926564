"""The tiny K3 compiled on 8 fake CPU devices: arguments equal the budget to the byte (or each
byte is explained), the cache is donated, the census sees the collectives."""

from __future__ import annotations

import pytest

from k3plan.validate.run import plan_jobs, prepare_target, validate
from k3plan.validate.targets import parse_target


@pytest.fixture(scope="module")
def result(tiny_setup):
    target = parse_target("cpu")
    prepare_target(target, tiny_setup)
    jobs = plan_jobs(setup=tiny_setup, stage="both", tokens=[128], batch=4, context=256)
    return validate(setup=tiny_setup, target=target, jobs=jobs)


def _term(r, name: str):
    return next(t for t in r.terms if t.name == name)


def test_both_stages_compile_and_fit(result):
    assert [r.stage for r in result.results] == ["prefill", "decode"]
    assert result.fits
    assert result.environment.devices.count == 8
    assert "scan over 1 x (KDA, KDA, KDA, MLA)" in result.layer_plan


def test_weights_match_the_budget_to_the_byte(result):
    for r in result.results:
        w = _term(r, "weights")
        assert w.compiled_bytes == w.predicted_bytes == r.budget.weights_bytes
        assert r.abstract.weights_bytes == r.budget.weights_bytes


def test_every_argument_byte_is_explained(result):
    for r in result.results:
        mem = r.memory
        assert r.unexplained_bytes == 0
        args = _term(r, "arguments")
        assert args.compiled_bytes == mem.argument_bytes
        assert args.unexplained_bytes == 0
        # exactly: weights + kv + dense state + step inputs
        b = r.budget
        pad = [x.bytes for x in _term(r, "cache (KV + KDA state)").reasons if "paging" in x.why]
        assert mem.argument_bytes == b.weights_bytes + b.kv_bytes + b.state_bytes + sum(pad) + r.abstract.inputs_bytes


def test_cache_is_donated_and_aliased(result):
    for r in result.results:
        assert r.memory.alias_bytes == r.abstract.cache_bytes > 0


def test_census_finds_the_collectives(result):
    for r in result.results:
        ops = {o.op: o for o in r.census.ops}
        assert ops["all-reduce"].count > 0  # TP row-parallel outputs + the expert psum
        assert all(s.bytes > 0 for op, s in ops.items() if op != "collective-permute")
        # the JSON keeps its {op: {count, ...}} mapping
        assert r.model_dump(mode="json")["census"]["ops"]["all-reduce"]["count"] == ops["all-reduce"].count
