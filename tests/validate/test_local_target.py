"""--target local on CPU (CI has no accelerator): the same code path with the fake CPU devices standing in for
the attached chip -- compiled, run once with real arrays, fit's verdict beside the compiled one, the OOM
boundary searched by doubling the workload (one doubling here, to stay quick)."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.structs import dump
from k3plan.validate import local
from k3plan.validate.run import plan_jobs, validate
from k3plan.validate.targets import Target, parse_target


def test_local_parses_and_needs_an_accelerator():
    t = parse_target("local")
    assert t.local and t.name == "local"
    from k3plan.validate.targets import local_target

    with pytest.raises(K3PlanError, match="no accelerator is attached"):
        local_target(None)  # the tests run on jax's CPU backend


@pytest.fixture(scope="module")
def result(tiny_setup):
    mp = pytest.MonkeyPatch()
    mp.setattr(local, "MAX_DOUBLINGS", 1)
    target = Target(name="local", platform="cpu", hardware="tpu-v7x", topology="2x2x1")
    jobs = plan_jobs(setup=tiny_setup, stage="decode", tokens=[64], batch=2, context=128)
    try:
        yield validate(setup=tiny_setup, target=target, jobs=jobs)
    finally:
        mp.undo()


def test_the_step_runs_once_and_fit_agrees(result):
    (r,) = result.results
    assert r.fits
    lr = r.local_run
    assert lr is not None and lr.measured_step_s is not None and lr.measured_step_s > 0
    assert len(lr.samples_s) == local.TIMED_CALLS
    assert lr.fit_fits and lr.agrees


def test_the_oom_boundary_is_searched(result):
    (r,) = result.results
    b = r.oom_boundary
    assert b is not None and b.axis == "batch" and b.fits_at == 4
    assert "still fits after 1 doublings" in b.verdict
    dumped = dump(r)
    assert "local_run" in dumped and "oom_boundary" in dumped


def test_a_job_that_does_not_fit_is_not_run():
    lr = local.run_once(None, None, {}, job=None, fit_fits=False, fits=False)
    assert lr.measured_step_s is None and lr.agrees and "does not fit" in lr.note
    b = local.oom_boundary(lambda job: None, type("J", (), {"stage": "decode", "batch": 8})(), fits=False)
    assert b.refused_at == 8 and b.fits_at is None
