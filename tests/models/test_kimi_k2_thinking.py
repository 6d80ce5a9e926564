"""Kimi-K2-Thinking: the bundled config.json against the public checkpoint, to the byte.

Golden figures, typed from public sources (never from the code under test; models/bundled/kimi-k2-thinking/
provenance.json lists them, each with where it was read):

- an audit that re-fetched every shard header of seven Kimi checkpoints at their pinned revisions, K2-Thinking's row:
  62 shards, 208,276 tensors, 1,026,408,232,448 logical parameters (INT4 counted eight an int32 word; scales,
  weight_shape and RoPE buffers not counted; the same figure as K2-Instruct's and K2-Instruct-0905's rows),
  594,205,920,512 payload bytes (``metadata.total_size`` of the index).
- the index's 208,276 entries hold one rotary buffer a layer (61) that k3plan's inventory leaves out (a buffer the
  engines recompute, not a weight): 61 entries and 61 x 64 f32 x 4 B = 15,616 B.
- the K2.6 bring-up log's index walk: 208,215 text tensors (K2.6's text model is this architecture and expert format)
  and 3,456 routed-expert entries a MoE layer (384 experts x 3 projections x weight_packed / weight_scale /
  weight_shape).
- model zoo entries citing the config.json: 61 layers, 384 routed experts top-8, hidden 7168, 262,144 tokens.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from k3plan.errors import K3PlanError
from k3plan.models import load_model
from k3plan.models.inventory import checkpoint_table

NAME = "kimi-k2-thinking"
HF = "moonshotai/Kimi-K2-Thinking"
INDEX_TOTAL_SIZE = 594_205_920_512
INDEX_ENTRIES = 208_276
LOGICAL_PARAMS = 1_026_408_232_448  # K2-Instruct's too: the same text model
LAYERS, ROTARY_F32_A_LAYER = 61, 64  # one rotary_emb.inv_freq a layer in the index, not in k3plan's inventory
K26_TEXT_ENTRIES = 208_215
EXPERT_ENTRIES_A_LAYER = 3_456


@pytest.fixture(scope="module")
def model():
    return load_model(NAME)


def test_index_total_size_less_the_rotary_buffers_exact(model):
    inv = model.inventory
    rotary_bytes = LAYERS * ROTARY_F32_A_LAYER * 4
    assert rotary_bytes == 15_616
    assert sum(t.nbytes for t in inv.tensors) == INDEX_TOTAL_SIZE - rotary_bytes == 594_205_904_896
    table = checkpoint_table(inv)
    assert len(table) == INDEX_ENTRIES - LAYERS == K26_TEXT_ENTRIES
    assert not any("rotary" in n or "inv_freq" in n for n in table)
    assert sum(1 for n in table if n.startswith("model.layers.7.mlp.experts.")) == EXPERT_ENTRIES_A_LAYER


def test_parameters_are_k2s_text_model(model):
    inv = model.inventory
    assert inv.total_params == LOGICAL_PARAMS == load_model("kimi-k2").inventory.total_params
    assert inv.vision_params == 0
    assert model.spec.max_context == 262_144
    assert model.spec.moe.num_experts == 384 and model.spec.num_layers == LAYERS


def test_the_text_bytes_are_k26s_without_the_vision_tower(model):
    """K2.6 'adopts the same native int4 quantization method as Kimi-K2-Thinking': its language_model.* tensors are
    this checkpoint's, name for name and byte for byte."""
    k26 = checkpoint_table(load_model("kimi-k2.6").inventory)
    text = {n.removeprefix("language_model."): v for n, v in k26.items() if n.startswith("language_model.")}
    assert checkpoint_table(model.inventory) == text


def test_only_the_routed_experts_are_int4(model):
    table = checkpoint_table(model.inventory)
    dtypes = Counter(d for d, _ in table.values())
    assert set(dtypes) == {"I32", "BF16", "F32"}
    assert dtypes["F32"] == LAYERS - 1  # e_score_correction_bias of the 60 MoE layers
    assert dtypes["I32"] == (LAYERS - 1) * 384 * 3 * 2  # weight_packed + weight_shape of every routed expert matrix
    e = "model.layers.1.mlp.experts.0."
    assert table[e + "gate_proj.weight_packed"] == ("I32", [2048, 896])
    assert table[e + "gate_proj.weight_scale"] == ("BF16", [2048, 224])
    assert table[e + "down_proj.weight_packed"] == ("I32", [7168, 256])
    assert table["model.layers.0.mlp.down_proj.weight"] == ("BF16", [7168, 18432])  # the dense layer stays BF16
    assert table["lm_head.weight"] == ("BF16", [163840, 7168])
    assert not any(n.startswith(("vision_tower.", "mm_projector.", "language_model.")) for n in table)


def test_the_hugging_face_id_resolves_exactly():
    from k3plan.engines.serve import model_of
    from k3plan.models.hub import bundled_of, hf_id

    assert hf_id(NAME) == HF and bundled_of(HF) == NAME
    assert model_of(HF) == model_of(HF.upper()) == NAME
    for other in ("moonshotai/Kimi-K2-Thinking-Turbo", "moonshotai/Kimi-K2-Thinking-0905", "someone/Kimi-K2-Thinking"):
        with pytest.raises(K3PlanError, match="not a checkpoint k3plan can price"):
            model_of(other)


def test_models_show_cli(cli):
    r = cli("models", "show", NAME, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["total_params"] == LOGICAL_PARAMS and got["vision_params"] == 0
    assert sum(row["bytes"] for row in got["breakdown"].values()) == INDEX_TOTAL_SIZE - LAYERS * ROTARY_F32_A_LAYER * 4


def test_serve_reads_the_recipe_line(cli):
    """vLLM's recipe line (tests/engines/cases/vllm-recipes115-kimi-k2-thinking-h200-tp8.yaml) is read, not refused."""
    serve = (
        f"vllm serve {HF} --tensor-parallel-size 8 --enable-auto-tool-choice --tool-call-parser kimi_k2 "
        "--reasoning-parser kimi_k2 --trust-remote-code"
    )
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve, "--json")
    assert r.exit_code in (0, 1), r.output
    got = json.loads(r.stdout)
    assert got["model"]["name"] == NAME and got["engine"]["max_model_len"] == 262_144
