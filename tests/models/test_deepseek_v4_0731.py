"""DeepSeek-V4-Flash-0731: the bundled config.json is the public file, and the id resolves to it.

Golden figures, typed from public sources (never from the code under test; the bundled provenance.json lists them):

- config.json of deepseek-ai/DeepSeek-V4-Flash-0731 at revision 7872f01b1d1fe23eabc4c98b48bffcef5a386062: 1,888
  bytes, SHA-256 6c8f3d2d3b48707541b88f32f22ef3f0f8a6b57d8523281e2b8d3cdb0ae9a023 (a Rust crate's container
  contract, DEEPSEEK_V4_CONFIG_BYTES / DEEPSEEK_V4_CONFIG_SHA256, code index file id 59258988294).
- model.safetensors.index.json at that revision: metadata.total_size 166,878,536,440 B over 72,317 weight_map
  entries in 48 shards, 4,705 of them under mtp.0-2 (the DSpark stages) and 4,721 in layers 40-42 (the same
  contract: DEEPSEEK_V4_TENSOR_PAYLOAD_BYTES, DEEPSEEK_V4_TENSOR_COUNT, DSPARK_STAGE_TENSOR_COUNT,
  DSPARK_TARGET_LAYER_TENSOR_COUNT; an inventory checker, code index file id 58610037895: 67,612 main + 4,705 mtp).
- what differs from the April release (the model dossier, code index file id 62111843830: "44 entries in the preview
  -> 46 here"; the speculative-decoding note, id 62110633194: the four dspark_* keys): compress_ratios gains two
  trailing zeros, and dspark_block_size 5, dspark_noise_token_id 128799, dspark_target_layer_ids [40, 41, 42],
  dspark_markov_rank 256 are added.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from k3plan.engines.serve import model_of
from k3plan.engines.vllm.spec import SpecServe, draft_pricing
from k3plan.errors import K3PlanError
from k3plan.models import load_model
from k3plan.models.families.deepseek_v4 import nextn_block
from k3plan.models.hub import bundled_of, hf_id
from k3plan.models.inventory import checkpoint_table
from k3plan.models.loader import BUNDLED_DIR

NAME = "deepseek-v4-flash-0731"
CONFIG_BYTES = 1_888
CONFIG_SHA256 = "6c8f3d2d3b48707541b88f32f22ef3f0f8a6b57d8523281e2b8d3cdb0ae9a023"
INDEX_TOTAL_SIZE = 166_878_536_440
INDEX_ENTRIES = 72_317
DSPARK_STAGE_ENTRIES = 4_705
TARGET_LAYER_ENTRIES = 4_721  # layers 40-42
DSPARK_KEYS = {
    "dspark_block_size": 5,
    "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [40, 41, 42],
    "dspark_markov_rank": 256,
}


def _raw(name: str) -> dict:
    return json.loads((BUNDLED_DIR / name / "config.json").read_text())


def test_config_is_the_public_file_byte_for_byte():
    data = (BUNDLED_DIR / NAME / "config.json").read_bytes()
    assert len(data) == CONFIG_BYTES
    assert hashlib.sha256(data).hexdigest() == CONFIG_SHA256


def test_config_differs_from_april_only_in_the_dspark_stages():
    new, old = _raw(NAME), _raw("deepseek-v4-flash")
    assert {k: v for k, v in new.items() if k in DSPARK_KEYS} == DSPARK_KEYS
    assert not any(k.startswith("dspark") for k in old)
    changed = {k for k in set(new) | set(old) if new.get(k) != old.get(k)}
    assert changed == {"compress_ratios"} | set(DSPARK_KEYS)
    assert new["compress_ratios"] == old["compress_ratios"] + [0, 0]
    assert len(new["compress_ratios"]) == 46 and len(old["compress_ratios"]) == 44


@pytest.mark.parametrize(
    "text",
    [
        "deepseek-ai/DeepSeek-V4-Flash-0731",
        "deepseek-ai/deepseek-v4-flash-0731",
        "deepseek-ai/DeepSeek-V4-Flash-0731/",
        " deepseek-ai/DeepSeek-V4-Flash-0731 ",
        "deepseek-v4-flash-0731",
    ],
)
def test_0731_id_resolves_to_its_own_bundle(text):
    assert model_of(text) == NAME


def test_ids_of_the_other_releases_are_unchanged():
    assert model_of("deepseek-ai/DeepSeek-V4-Flash") == "deepseek-v4-flash"
    assert model_of("deepseek-ai/DeepSeek-V4-Pro-0813") == "deepseek-v4-pro-0813"  # bundled on its own too
    assert hf_id(NAME) == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert bundled_of("DEEPSEEK-AI/DEEPSEEK-V4-FLASH-0731") == NAME


def test_neighbouring_ids_are_still_refused():
    # a release k3plan bundles no config for is refused by name, never priced as the 0731 or April config
    for text in ("deepseek-ai/DeepSeek-V4-Flash-0732", "deepseek-ai/DeepSeek-V4-Flash-DSpark"):
        with pytest.raises(K3PlanError):
            model_of(text)


@pytest.fixture(scope="module")
def model():
    return load_model(NAME)


def test_index_total_size_and_entry_counts_exact(model):
    table = checkpoint_table(model.inventory)
    assert sum(t.nbytes for t in model.inventory.tensors) == INDEX_TOTAL_SIZE
    assert len(table) == INDEX_ENTRIES
    assert sum(1 for n in table if n.startswith("mtp.")) == DSPARK_STAGE_ENTRIES
    assert sum(1 for n in table if n.split(".")[:2] in (["layers", "40"], ["layers", "41"], ["layers", "42"])) == (
        TARGET_LAYER_ENTRIES
    )
    assert {int(n.split(".")[1]) for n in table if n.startswith("mtp.")} == {0, 1, 2}


def test_spec_reads_the_dspark_stages(model):
    s = model.spec
    ds = s.dsv4.dspark
    assert s.mtp_layers == 3 and s.num_layers == 43
    assert (ds.block_size, ds.target_layer_ids, ds.markov_rank) == (5, (40, 41, 42), 256)
    # no dspark_n_routed_experts key: the stages route over the model's own experts (SGLang's DSparkV4Stage is a
    # DeepseekV4DecoderLayer over the target config)
    assert (ds.n_routed_experts, ds.num_experts_per_tok) == (256, 6)
    assert ds.nextn_layers == 1  # the config's num_nextn_predict_layers, kept from April
    assert s.dsv4.mtp_compress_ratios == (0, 0, 0)
    april = load_model("deepseek-v4-flash").spec
    assert april.dsv4.dspark is None and april.mtp_layers == 1
    assert s.dsv4.compress_ratios == april.dsv4.compress_ratios


def test_the_backbone_is_the_april_backbone(model):
    # the 43 layers and the root tensors are the April release's, name for name and byte for byte
    april = load_model("deepseek-v4-flash")
    ours = {t.name: (t.shape, t.fmt) for t in model.inventory.tensors if t.kind != "mtp"}
    theirs = {t.name: (t.shape, t.fmt) for t in april.inventory.tensors if t.kind != "mtp"}
    assert ours == theirs


def test_vllm_mtp_on_0731_builds_the_april_mtp_block(model):
    # vLLM 0.26.0 builds num_nextn_predict_layers (1) MTP layers of V4's shape whatever mtp.* hold
    # (vllm/models/deepseek_v4/nvidia/mtp.py DeepSeekV4MultiTokenPredictor): vllm-project/vllm#51041 served 0731 so
    april = load_model("deepseek-v4-flash")
    block = nextn_block(model.spec, model.inventory)
    assert [(t.name, t.shape, t.fmt) for t in block] == [
        (t.name, t.shape, t.fmt) for t in april.inventory.of_kind("mtp")
    ]
    spec = SpecServe(method="mtp", num_speculative_tokens=None, given="method mtp")
    ours, theirs = (draft_pricing(spec, m, tp=2, ep=1) for m in (model, april))
    assert ours.bytes_per_device == theirs.bytes_per_device
    assert ours.dsv4_mtp_ratios == theirs.dsv4_mtp_ratios == (0,)
    assert ours.num_speculative_tokens == theirs.num_speculative_tokens == 1


def test_dspark_target_layers_outside_the_model_are_one_line_errors(tmp_path):
    raw = _raw(NAME)
    raw["dspark_target_layer_ids"] = [40, 41, 43]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(K3PlanError, match="dspark_target_layer_ids"):
        load_model(str(path))
