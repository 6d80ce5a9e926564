"""`k3plan validate` through the real CLI: JSON output, exit 1 when it does not fit, exit 2 (one
line) on bad input, and the deviceless TPU compile when libtpu is installed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app

from .conftest import has_libtpu


def invoke(*args):
    return CliRunner().invoke(app, ["validate", *map(str, args)])


def test_json_decode_on_cpu(tiny_config):
    r = invoke(
        "--model",
        tiny_config,
        "-t",
        "2x2x1",
        "--tp",
        8,
        "--stage",
        "decode",
        "--batch",
        2,
        "--context",
        128,
        "--target",
        "cpu",
        "--json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["environment"]["backend"] == "cpu" and out["fits"]
    (res,) = out["results"]
    assert res["stage"] == "decode" and res["unexplained_bytes"] == 0
    assert next(t for t in res["terms"] if t["name"] == "weights")["delta_bytes"] == 0


def test_exceeding_hbm_exits_1(tiny_config):
    # 512 sequences of 4M tokens: the whole latent cache on every device is far beyond 94.75 GiB
    r = invoke(
        "--model",
        tiny_config,
        "-t",
        "2x2x1",
        "--tp",
        8,
        "--stage",
        "decode",
        "--batch",
        512,
        "--context",
        4194304,
        "--json",
    )
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["fits"] is False


@pytest.mark.parametrize(
    "args, words",
    [
        (("--target", "gpu"), "--target"),
        (("--target", "tpu9x:2x2x1"), "unknown TPU generation"),
        (("-t", "2x2x1", "--tp", 3), "--tp 3"),
        (("--stage", "train"), "--stage"),
        (("--tokens", "4q"), "--tokens"),  # 4k is 4,096 tokens since issue 36
        (("--layers", 99), "--layers"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_config, args, words):
    r = (
        invoke("--model", tiny_config, "-t", "2x2x1", "--tp", 8, *args)
        if "-t" not in args
        else invoke("--model", tiny_config, *args)
    )
    assert r.exit_code == 2, r.output
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_libtpu_missing_says_how_to_install(tiny_config, monkeypatch):
    import k3plan.validate.targets as targets

    monkeypatch.setattr(targets, "libtpu_version", lambda: None)
    r = invoke("--model", tiny_config, "--tp", 8, "--target", "tpu7x:2x2x1")
    assert r.exit_code == 2
    assert "install 'k3plan[tpu]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1  # pip or pipx (issue 36)


def test_fit_does_not_import_jax():
    import subprocess
    import sys

    # --context 8192: the shipped compiled temps (read through the evidence registry) leave no room
    # for 128K on 2x2x4; the fit must still run whole, evidence included, without jax
    code = (
        "import sys; from k3plan.cli.app import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['fit', '-t', '2x2x4', '--tp', '32', '--context', '8192', '--json']); "
        "assert r.exit_code == 0, r.output; assert 'vllm-tpu-compiled.yaml' in r.output, r.output; "
        "print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not has_libtpu(), reason='libtpu not installed: pip install -e ".[tpu]"')
def test_deviceless_tpu_compile(tiny_config):
    r = invoke(
        "--model",
        tiny_config,
        "--tp",
        8,
        "--target",
        "tpu7x:2x2x1",
        "--stage",
        "decode",
        "--batch",
        2,
        "--context",
        128,
        "--json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["environment"]["backend"] == "tpu" and out["environment"]["libtpu_version"]
    (res,) = out["results"]
    assert res["unexplained_bytes"] == 0  # the only extra bytes are the TPU's layout padding, computed
    cache = next(t for t in res["terms"] if t["name"] == "cache (KV + KDA state)")
    assert any("TPU layout padding" in x["why"] for x in cache["reasons"])


@pytest.mark.skipif(not has_libtpu(), reason='libtpu not installed: pip install -e ".[tpu]"')
def test_unknown_tpu_topology_exits_2(tiny_config):
    r = invoke("--model", tiny_config, "--tp", 8, "--target", "tpu7x:3x3x3")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1


def test_validate_shares_fits_workload_defaults():
    """validate compiles the workload fit budgets unless told otherwise (issue 10 item 6: one set of
    defaults): its --context is fit's, its --tokens fit's prefill chunk (131,072 and 8,192 tokens)."""
    import inspect

    import msgspec

    import k3plan.cli.fit as cli_fit
    import k3plan.cli.validate as cli_validate
    from k3plan.budget.fit import Workload

    chunk_default = next(f.default for f in msgspec.structs.fields(Workload) if f.name == "prefill_chunk_tokens")
    v = inspect.signature(cli_validate.command).parameters
    f = inspect.signature(cli_fit.command).parameters
    assert v["context"].default == f["context"].default == 131072
    assert int(v["tokens"].default) == chunk_default == 8192
