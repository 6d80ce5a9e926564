"""HLO verification: the op asked for must be the op that runs, or the record says so loudly."""

from __future__ import annotations

import pytest

from k3plan.probes.hlo import VerificationError, collective_counts, require_collective, verify_collective

TUPLE_A2A = """
  %all-to-all = (f32[4]{0}, f32[4]{0}, /*index=2*/f32[4]{0}) all-to-all(%s0, %s1, %s2), channel_id=1, replica_groups={{0,1,2}}
  %get-tuple-element.16 = f32[4]{0} get-tuple-element(%all-to-all), index=0
"""
REPLACED = "%all-reduce.3 = f32[256]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add\n"


def test_tuple_form_and_async_ops_are_counted_once():
    text = TUPLE_A2A + "%ags = f32[8] all-gather-start(%y)\n%agd = f32[8] all-gather-done(%ags)\n"
    assert collective_counts(text) == {"all-to-all": 1, "all-gather": 1}
    assert verify_collective(text, expected_op="all-to-all").ok


def test_replaced_collective_fails_loudly():
    result = verify_collective(REPLACED, expected_op="all-gather")
    assert not result.ok and result.replaced_by == "all-reduce" and result.found_ops == {"all-reduce": 1}
    with pytest.raises(VerificationError, match="replaced it by all-reduce"):
        require_collective(REPLACED, expected_op="all-gather")


def test_compiled_function_without_a_collective_fails():
    import jax
    import jax.numpy as jnp

    text = jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones(8)).compile().as_text()
    result = verify_collective(text, expected_op="all-to-all")
    assert not result.ok and result.replaced_by is None and "no collective at all" in result.detail


def test_probe_marks_record_and_exits_1_when_op_is_missing(monkeypatch, run_probe_cli):
    import k3plan.probes.collectives.ops as ops

    real = ops._collective
    monkeypatch.setattr(ops, "_collective", lambda op, n: (lambda y: y * 2.0) if op == "all-to-all" else real(op, n))
    result, records, out = run_probe_cli("a2a", "--bytes", "64", "--mode", "chained", "--iters", "1,2")
    assert result.exit_code == 1
    assert "has none" in result.stderr and "all-to-all" in result.stderr
    (record,) = records
    assert record["verified"] is False and not record["verification"][0]["ok"]
    assert any("VERIFICATION FAILED" in n for n in record["notes"])
