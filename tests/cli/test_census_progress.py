"""census shows a progress bar over shards on a terminal, and nothing when stderr is piped."""

from __future__ import annotations

import io
import json

from rich.console import Console

import k3plan.cli.census as cli_census
from k3plan.models.census import census


def test_progress_over_shards_on_a_terminal(monkeypatch, tmp_path, write_st):
    for k in range(3):
        write_st(tmp_path / f"model-{k + 1:05d}-of-00003.safetensors", {f"t{k}": ("F32", (2, 2))})
    calls = []
    census(tmp_path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    buf = io.StringIO()
    monkeypatch.setattr(cli_census, "err_console", Console(file=buf, force_terminal=True, width=100))
    with cli_census.shard_progress() as progress:
        assert progress is not None
        census(tmp_path, progress=progress)
    assert "reading headers" in buf.getvalue() and "3/3" in buf.getvalue()


def test_no_progress_when_piped(cli, tmp_path, write_st):
    write_st(tmp_path / "m.safetensors", {"t": ("F32", (2,))})
    r = cli("census", tmp_path / "m.safetensors", "--json")
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)["tensors"] == 1
