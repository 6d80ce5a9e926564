"""Bad or partial DeepSeek-V4.1 configs get one line and exit 2 (issue 49's done-when), never a traceback.

Every field of the bundled config.json (nested ones too) is removed, given the wrong type, or an absurd value;
the loader must either build the model (a field it does not read, or one with a default: the totals are then
computed) or refuse it with one K3PlanError line. A sample goes through the CLI to hold the exit code and the
one line; the rest call the loader (the CLI's only path to a config), which keeps the sweep to seconds.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.errors import K3PlanError
from k3plan.models import load_model
from k3plan.resources import data_dir

MUTATIONS: dict[str, object] = {
    "missing": None,
    "string": "x",
    "negative": -3,
    "zero": 0,
    "huge": 10**15,
    "fraction": 2.5,
    "list": [1],
    "null": None,
    "object": {},
}


def base() -> dict:
    return json.loads((data_dir("models/bundled") / "deepseek-v4.1-flash" / "config.json").read_text())


def paths(d: dict, p: tuple[str, ...] = ()):
    for k, v in d.items():
        yield p + (k,)
        if isinstance(v, dict):
            yield from paths(v, p + (k,))


def mutated(path: tuple[str, ...], how: str) -> dict:
    d = copy.deepcopy(base())
    at = d
    for k in path[:-1]:
        at = at[k]
    if how == "missing":
        del at[path[-1]]
    else:
        at[path[-1]] = copy.deepcopy(MUTATIONS[how])
    return d


def loads_or_one_line(file: Path) -> str:
    """'ok' (the model and its totals built) or 'refused' (one line); anything else fails the test."""
    try:
        m = load_model(str(file))
        assert m.inventory.total_params > 0
        m.inventory.engram_params  # noqa: B018 (the Engram census is built too)
        return "ok"
    except K3PlanError as e:
        assert "\n" not in str(e).strip(), str(e)
        return "refused"


CASES = [(p, how) for p in paths(base()) for how in MUTATIONS]


def test_every_field_mutated_loads_or_is_one_line(tmp_path):
    seen = {"ok": 0, "refused": 0}
    for i, (path, how) in enumerate(CASES):
        f = tmp_path / f"case{i}.json"  # a file a case: load_model caches by reference
        f.write_text(json.dumps(mutated(path, how)))
        seen[loads_or_one_line(f)] += 1
    assert seen["refused"] > len(CASES) // 2  # most fields are read and checked


# what the sweep settled, through the CLI: exit 2, one line naming the field
REFUSED = [
    (("text_config", "hidden_size"), "missing", "hidden_size"),
    (("text_config", "num_hidden_layers"), "string", "num_hidden_layers"),
    (("text_config", "compress_ratios"), "list", "compress_ratios"),
    (("text_config", "kv_source_layer_ids"), "huge", "kv_source_layer_ids"),
    (("text_config", "engram_layer_ids"), "missing", "engram_layer_ids"),  # Engram's sizes without its layers
    (("text_config", "engram_num_embeddings"), "negative", "engram_num_embeddings"),
    (("text_config", "engram_head_dim"), "fraction", "engram_head_dim"),
    (("text_config", "candidate_block_size"), "zero", "candidate_block_size"),
    (("text_config", "n_routed_experts"), "zero", "n_routed_experts"),
    (("quantization_config", "expert_dtype"), "string", "quantization_config"),
    (("vision_config", "hidden_size"), "object", "vision_config.hidden_size"),
    (("text_config",), "string", "text_config"),
]


@pytest.mark.parametrize("path,how,field", REFUSED, ids=[f"{'.'.join(p)}-{h}" for p, h, _ in REFUSED])
def test_cli_refuses_in_one_line(tmp_path, path, how, field):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(mutated(path, how)))
    for cmd in (["models", "show", str(f)], ["fit", "-m", str(f), "-H", "nvidia-b200"]):
        out = CliRunner().invoke(app, cmd)
        lines = out.output.strip().splitlines()
        assert out.exit_code == 2 and len(lines) == 1, out.output
        assert lines[0].startswith("error: ") and field in lines[0], lines[0]
        load_model.cache_clear()  # the next command reads the same path afresh


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"architectures": ["DeepseekV41ForCausalLM"]}'])
def test_cli_refuses_a_broken_file_in_one_line(tmp_path, text):
    f = tmp_path / "config.json"
    f.write_text(text)
    out = CliRunner().invoke(app, ["models", "show", str(f)])
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output


def test_no_shared_expert_is_a_model_without_one(tmp_path):
    """n_shared_experts 0 (DeepSeek configs allow none): no shared-expert tensors, not a zero-sized one."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps(mutated(("text_config", "n_shared_experts"), "zero")))
    m = load_model(str(f))
    assert not [t for t in m.inventory.tensors if t.role == "shared_expert"]
