"""validate reports its phases (devices, then build, lower, compile a job); libtpu is quieted only
off a TPU VM and never overrides what the user set."""

from __future__ import annotations

import io
import os

from k3plan.libtpu_env import GOOGLE_PCI_VENDOR, QUIET_ENV, quiet_libtpu


def test_phases_in_order(tiny_setup):
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    target = parse_target("cpu")
    prepare_target(target, tiny_setup)
    jobs = plan_jobs(setup=tiny_setup, stage="decode", tokens=[128], batch=2, context=256)
    seen = []
    validate(
        setup=tiny_setup,
        target=target,
        jobs=jobs,
        layers=1,
        on_phase=lambda job, phase: seen.append((job.stage, phase)),
    )
    assert seen == [("decode", "devices"), ("decode", "build"), ("decode", "lower"), ("decode", "compile")]


def test_phase_display_prints_each_phase_with_seconds(monkeypatch):
    from rich.console import Console

    import k3plan.cli.validate as cli_validate
    from k3plan.validate.run import Job

    buf = io.StringIO()
    monkeypatch.setattr(cli_validate, "err_console", Console(file=buf, force_terminal=True, width=120))
    job = Job("prefill", 4096, 1, 8192)
    with cli_validate.phase_display(total=1) as (on_job, on_phase):
        on_job(job, None)
        for phase in ("devices", "build", "lower", "compile"):
            on_phase(job, phase)
        on_job(job, {"fits": True})
    out = buf.getvalue()
    for phase in ("devices", "build", "lower", "compile"):
        assert f"{phase} " in out
    assert "prefill 4,096 tokens (context 8,192): compile" in out and " s" in out


def test_phase_display_off_a_terminal_prints_plain_phase_lines(monkeypatch):
    """A log (CI, a pipe) gets one plain line as each phase starts and one with its seconds as it
    ends: a minutes-long compile is not silent there (issue 12 item 4); no bar, no control codes."""
    from rich.console import Console

    import k3plan.cli.validate as cli_validate
    from k3plan.validate.run import Job

    buf = io.StringIO()
    monkeypatch.setattr(cli_validate, "err_console", Console(file=buf, force_terminal=False, width=80))
    job = Job("decode", 256, 1, 8192)
    with cli_validate.phase_display(total=1) as (on_job, on_phase):
        on_job(job, None)
        for phase in ("devices", "build", "lower", "compile"):
            on_phase(job, phase)
        on_job(job, {"fits": True})
    lines = buf.getvalue().splitlines()
    assert "\x1b" not in buf.getvalue()
    assert lines[0] == "starting jax and the target's devices ..."
    assert lines[-2] == f"{job.label}: compiling ..."
    ends = [ln for ln in lines if ln.endswith(" s")]
    assert [ln.rsplit(" ", 2)[0] for ln in ends] == [
        "devices",
        f"{job.label}: build",
        f"{job.label}: lower",
        f"{job.label}: compile",
    ]
    assert len(lines) == 8


def _pci(tmp_path, vendors):
    for i, v in enumerate(vendors):
        d = tmp_path / f"0000:00:{i:02x}.0"
        d.mkdir()
        (d / "vendor").write_text(v + "\n")
    return tmp_path


def test_quiet_libtpu_sets_only_unset_variables_off_a_tpu_vm(tmp_path, monkeypatch):
    for k in QUIET_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2,10.0.0.3")  # the user's own: kept
    set_now = quiet_libtpu(pci_root=_pci(tmp_path, ["0x8086", "0x10de"]))
    assert "TPU_WORKER_HOSTNAMES" not in set_now and os.environ["TPU_WORKER_HOSTNAMES"] == "10.0.0.2,10.0.0.3"
    assert set(set_now) == set(QUIET_ENV) - {"TPU_WORKER_HOSTNAMES"}
    assert all(os.environ[k] == QUIET_ENV[k] for k in set_now)


def test_quiet_libtpu_leaves_a_tpu_vm_alone(tmp_path, monkeypatch):
    for k in QUIET_ENV:
        monkeypatch.delenv(k, raising=False)
    assert quiet_libtpu(pci_root=_pci(tmp_path, ["0x8086", GOOGLE_PCI_VENDOR])) == []
    assert not any(k in os.environ for k in QUIET_ENV)


def test_libtpu_log_levels_are_set_on_a_tpu_vm_too_unless_the_user_set_them(tmp_path, monkeypatch):
    """Issue 48: libtpu's start-up warnings printed before k3plan's own first line."""
    from k3plan.libtpu_env import LOG_ENV

    for k in LOG_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user's choice stays
    quiet_libtpu(pci_root=_pci(tmp_path, ["0x8086", GOOGLE_PCI_VENDOR]))
    assert os.environ["TPU_STDERR_LOG_LEVEL"] == "2" and os.environ["TPU_MIN_LOG_LEVEL"] == "2"
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
