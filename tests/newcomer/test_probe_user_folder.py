"""Issue 36 point 6: probe writes to a user folder by default (./k3plan-probes, not the checkout's
committed reports/probes) and ends by printing the --probes flag that uses the records."""

from __future__ import annotations

import pytest


def test_probe_writes_to_k3plan_probes_and_says_the_flag(cli, monkeypatch, tmp_path):
    pytest.importorskip("jax")
    monkeypatch.chdir(tmp_path)
    r = cli("probe", "hbm", "--size", "1MiB", "--op", "copy", "--repeats", "1", "--warmup", "0")
    assert r.exit_code == 0, r.output[-800:]
    written = list((tmp_path / "k3plan-probes").glob("hbm-*.json"))
    assert len(written) == 1 and not (tmp_path / "reports").exists()
    last = [x for x in r.stdout.splitlines() if x.strip()][-1]
    assert last.startswith("use these records: --probes k3plan-probes --allow-cpu-probes")


def test_the_default_is_the_user_folder():
    from k3plan.cli.probe import USER_OUT
    from k3plan.probes.store import DEFAULT_DIR

    assert USER_OUT == DEFAULT_DIR and str(DEFAULT_DIR) == "k3plan-probes"
