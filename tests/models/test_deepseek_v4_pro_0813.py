"""DeepSeek-V4-Pro-0813: the bundled config.json is the public file, and the id resolves to it.

Golden figures, typed from public sources (never from the code under test; the bundled provenance.json lists them):

- config.json of deepseek-ai/DeepSeek-V4-Pro-0813 at revision 72e1d3230f6c080a530b0a1d46f8eb4602340597: 1,967 bytes,
  SHA-256 9dd2a89255469e120b333668ef5a169b7ae46c00f6bbab786bf0be457546aec0 (a release record, code index file id
  68833358482: config_bytes / config_sha256 measured with sha256sum over the downloaded snapshot; the same digest in a
  serving gate, id 62840393938, a model-IR test, id 59318955656, and a download policy test, id 58477213997).
- model.safetensors.index.json at that revision: metadata.total_size 892,727,580,904 B over 149,782 weight_map entries
  in 66 shards (the release record: "its weight_map has exactly the same 149,782 names, and its metadata.total_size is
  892,727,580,904"), 7,009 of them under mtp.0-2, the DSpark stages (the serving gate: DSPARK_TENSORS = 7009).
- what differs from the April release (a public re-serialised copy, maoxx241/se-tools@5afb8948
  models/deepseek-v4-pro-0813/config.json; the release record's config_scalars): expert_dtype "fp4", compress_ratios
  64 entries ending 0, 0, 0, and dspark_block_size 5, dspark_noise_token_id 128799, dspark_target_layer_ids
  [58, 59, 60], dspark_markov_rank 512.
"""

from __future__ import annotations

import hashlib
import json

from k3plan.engines.serve import model_of
from k3plan.models import load_model
from k3plan.models.hub import bundled_of, hf_id
from k3plan.models.inventory import checkpoint_table
from k3plan.models.loader import BUNDLED_DIR

NAME = "deepseek-v4-pro-0813"
CONFIG_BYTES = 1_967
CONFIG_SHA256 = "9dd2a89255469e120b333668ef5a169b7ae46c00f6bbab786bf0be457546aec0"
INDEX_TOTAL_SIZE = 892_727_580_904
INDEX_ENTRIES = 149_782
DSPARK_STAGE_ENTRIES = 7_009
DSPARK_KEYS = {
    "dspark_block_size": 5,
    "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [58, 59, 60],
    "dspark_markov_rank": 512,
}


def _raw(name: str) -> dict:
    return json.loads((BUNDLED_DIR / name / "config.json").read_text())


def test_config_is_the_public_file_byte_for_byte():
    data = (BUNDLED_DIR / NAME / "config.json").read_bytes()
    assert len(data) == CONFIG_BYTES
    assert hashlib.sha256(data).hexdigest() == CONFIG_SHA256


def test_config_differs_from_april_in_the_dspark_stages_and_expert_dtype():
    new, old = _raw(NAME), _raw("deepseek-v4-pro")
    assert {k: v for k, v in new.items() if k in DSPARK_KEYS} == DSPARK_KEYS
    changed = {k for k in set(new) | set(old) if new.get(k) != old.get(k)}
    assert changed == {"compress_ratios", "expert_dtype"} | set(DSPARK_KEYS)
    assert new["expert_dtype"] == "fp4" and "expert_dtype" not in old
    assert new["compress_ratios"] == old["compress_ratios"] + [0, 0]
    assert len(new["compress_ratios"]) == 64 and len(old["compress_ratios"]) == 62


def test_the_id_resolves_to_its_own_bundle():
    for text in ("deepseek-ai/DeepSeek-V4-Pro-0813", "deepseek-ai/deepseek-v4-pro-0813", "deepseek-v4-pro-0813"):
        assert model_of(text) == NAME
    assert model_of("deepseek-ai/DeepSeek-V4-Pro") == "deepseek-v4-pro"
    assert hf_id(NAME) == "deepseek-ai/DeepSeek-V4-Pro-0813"
    assert bundled_of("DEEPSEEK-AI/DEEPSEEK-V4-PRO-0813") == NAME


def test_index_total_size_and_entry_counts_exact():
    model = load_model(NAME)
    table = checkpoint_table(model.inventory)
    assert sum(t.nbytes for t in model.inventory.tensors) == INDEX_TOTAL_SIZE
    assert len(table) == INDEX_ENTRIES
    assert sum(1 for n in table if n.startswith("mtp.")) == DSPARK_STAGE_ENTRIES
    assert {int(n.split(".")[1]) for n in table if n.startswith("mtp.")} == {0, 1, 2}


def test_spec_reads_the_dspark_stages_over_the_april_backbone():
    model, april = load_model(NAME), load_model("deepseek-v4-pro")
    s = model.spec
    ds = s.dsv4.dspark
    assert s.mtp_layers == 3 and s.num_layers == 61
    assert (ds.block_size, ds.target_layer_ids, ds.markov_rank) == (5, (58, 59, 60), 512)
    assert s.dsv4.mtp_compress_ratios == (0, 0, 0)
    assert s.dsv4.compress_ratios == april.spec.dsv4.compress_ratios
    ours = {t.name: (t.shape, t.fmt) for t in model.inventory.tensors if t.kind != "mtp"}
    theirs = {t.name: (t.shape, t.fmt) for t in april.inventory.tensors if t.kind != "mtp"}
    assert ours == theirs
