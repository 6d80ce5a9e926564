"""`k3plan hardware` through the real CLI."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app

runner = CliRunner()


def test_list_table_and_json():
    result = runner.invoke(app, ["hardware", "list"])
    assert result.exit_code == 0, result.output
    assert "tpu-v7x" in result.output and "94.75" in result.output
    result = runner.invoke(app, ["hardware", "list", "--json"])
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["tpu-v7x"]["devices_per_chip"] == 2
    assert rows["tpu-v7x"]["usable_bytes_per_device"] == round(94.75 * 2**30)


def test_bare_group_lists():
    result = runner.invoke(app, ["hardware"])
    assert result.exit_code == 0 and "nvidia-h200" in result.output


def test_show_with_topology_json():
    result = runner.invoke(app, ["hardware", "show", "tpu-v7x", "--topology", "2x2x4", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["topology"]["chips"] == 16 and data["topology"]["devices"] == 32 and data["topology"]["hosts"] == 4
    assert data["sources"]["usable_hbm_per_device"].startswith("[XLA]")


def test_show_table_has_sources():
    result = runner.invoke(app, ["hardware", "show", "tpu-v6e", "-t", "4x4"])
    assert result.exit_code == 0, result.output
    assert "source:" in result.output and "16 devices" in result.output and "not used" in result.output


def test_unknown_hardware_exit_2_one_line():
    result = runner.invoke(app, ["hardware", "show", "tpu-v8"])
    assert result.exit_code == 2
    assert "unknown hardware 'tpu-v8'" in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if "error" in line]) == 1


def test_malformed_topology_exit_2():
    result = runner.invoke(app, ["hardware", "show", "tpu-v7x", "--topology", "2x2x"])
    assert result.exit_code == 2
    assert "topology '2x2x'" in result.output and "Traceback" not in result.output
