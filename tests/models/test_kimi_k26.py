"""Kimi-K2.6 (and K2.5, the same checkpoint layout): the bundled config.json against the public checkpoint, to the byte.

Golden figures, typed from public sources (never from the code under test; models/bundled/kimi-k2.6/provenance.json
lists them, each with where it was read):

- ``model.safetensors.index.json`` of moonshotai/Kimi-K2.6: ``metadata.total_size`` 595,148,192,736 B in 64 shards (a
  bring-up log read from the repository's non-weight files; a fetch script pinning revision
  7eb5002f6aadc958aed6a9177b7ed26bb94011bb; Ollama's cloud list's kimi-k2.6 size).
- an audit that re-fetched every shard header of K2.5 and of K2.6: 208,550 tensors each, 1,026,879,376,368 logical
  parameters (INT4 counted eight an int32 word; scales and weight_shape not counted), 595,148,192,736 payload bytes;
  Kimi-K2-Instruct's text model in the same audit 1,026,408,232,448 parameters (the same text architecture).
- the K2.6 bring-up log's index walk: 208,215 text tensors and 335 others (the vision tower and projector); 3,456
  routed-expert entries a MoE layer (384 experts x 3 projections x weight_packed / weight_scale / weight_shape).
- the K2.5 census: group_size 32, weight_packed int32 [out, in/8], weight_scale bf16 [out, in/32], weight_shape int32
  [2]; the router's e_score_correction_bias F32, everything else BF16.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from k3plan.errors import K3PlanError
from k3plan.models import load_model
from k3plan.models.inventory import checkpoint_table
from k3plan.models.loader import BUNDLED_DIR

NAME = "kimi-k2.6"
INDEX_TOTAL_SIZE = 595_148_192_736
INDEX_ENTRIES = 208_550
LOGICAL_PARAMS_WITH_VISION = 1_026_879_376_368
TEXT_PARAMS = 1_026_408_232_448  # Kimi-K2-Instruct's, the same text model
TEXT_ENTRIES, OTHER_ENTRIES = 208_215, 335
EXPERT_ENTRIES_A_LAYER = 3_456


@pytest.fixture(scope="module")
def model():
    return load_model(NAME)


def test_index_total_size_and_entry_count_exact(model):
    inv = model.inventory
    assert sum(t.nbytes for t in inv.tensors) == INDEX_TOTAL_SIZE
    table = checkpoint_table(inv)
    assert len(table) == INDEX_ENTRIES
    assert sum(1 for n in table if n.startswith("language_model.")) == TEXT_ENTRIES
    assert sum(1 for n in table if not n.startswith("language_model.")) == OTHER_ENTRIES
    assert sum(1 for n in table if n.startswith("language_model.model.layers.7.mlp.experts.")) == EXPERT_ENTRIES_A_LAYER


def test_parameters_text_and_vision(model):
    inv = model.inventory
    assert inv.total_params == TEXT_PARAMS == load_model("kimi-k2").inventory.total_params
    assert inv.total_params + inv.vision_params == LOGICAL_PARAMS_WITH_VISION
    assert model.spec.max_context == 262_144 and model.spec.moe.num_experts == 384


def test_only_the_routed_experts_are_int4(model):
    table = checkpoint_table(model.inventory)
    dtypes = Counter(d for d, _ in table.values())
    assert set(dtypes) == {"I32", "BF16", "F32"}
    assert dtypes["F32"] == 60  # e_score_correction_bias of the 60 MoE layers
    assert dtypes["I32"] == 60 * 384 * 3 * 2  # weight_packed + weight_shape of every routed expert matrix
    e = "language_model.model.layers.1.mlp.experts.0."
    assert table[e + "gate_proj.weight_packed"] == ("I32", [2048, 896])
    assert table[e + "gate_proj.weight_scale"] == ("BF16", [2048, 224])
    assert table[e + "down_proj.weight_packed"] == ("I32", [7168, 256])
    assert table[e + "down_proj.weight_scale"] == ("BF16", [7168, 64])
    assert table[e + "up_proj.weight_shape"] == ("I32", [2])
    assert table["language_model.model.layers.1.mlp.gate.weight"] == ("BF16", [384, 7168])
    assert table["mm_projector.proj.2.weight"] == ("BF16", [7168, 4608])
    assert table["vision_tower.encoder.blocks.26.wqkv.weight"] == ("BF16", [3456, 1152])
    # one expert matrix: 4 bits a weight + a bf16 scale a 32 + the 8-byte shape = 4.5 bits a parameter + 8 B
    w = model.inventory.get("language_model.model.layers.1.mlp.experts.{e}.gate_proj.weight")
    assert w.nbytes == 384 * (2048 * 7168 * 9 // 16 + 8)


def test_models_show_cli():
    from k3plan.cli.app import app

    out = CliRunner().invoke(app, ["models", "show", NAME, "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["total_params"] == TEXT_PARAMS and got["vision_params"] == LOGICAL_PARAMS_WITH_VISION - TEXT_PARAMS
    assert sum(r["bytes"] for r in got["breakdown"].values()) == INDEX_TOTAL_SIZE


def _bad(mutate) -> dict:
    raw = json.loads((BUNDLED_DIR / NAME / "config.json").read_text())
    mutate(raw)
    return raw


def _weights(r: dict) -> dict:
    return r["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]


BAD = {
    "group 64": (lambda r: _weights(r).__setitem__("group_size", 64), "config_groups"),
    "8-bit": (lambda r: _weights(r).__setitem__("num_bits", 8), "config_groups"),
    "asymmetric": (lambda r: _weights(r).__setitem__("symmetric", False), "config_groups"),
    "no groups": (lambda r: r["text_config"]["quantization_config"].pop("config_groups"), "config_groups"),
    "unknown format": (
        lambda r: r["text_config"]["quantization_config"].__setitem__("format", "marlin-24"),
        "quantization_config.format",
    ),
    "unknown projector": (
        lambda r: r["vision_config"].__setitem__("mm_projector_type", "mlp"),
        "vision_config.mm_projector_type",
    ),
    "missing hidden_size": (lambda r: r["text_config"].pop("hidden_size"), "text_config.hidden_size"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_one_line(tmp_path, case):
    mutate, field = BAD[case]
    (tmp_path / "config.json").write_text(json.dumps(_bad(mutate)))
    load_model.cache_clear()
    with pytest.raises(K3PlanError, match=field.replace(".", r"\.")):
        load_model(str(tmp_path))
