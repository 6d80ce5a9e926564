"""DeepSeek-V4-Flash-0731: the bundled config.json is the public file, and the id resolves to it.

Golden figures, typed from public sources (never from the code under test; the bundled provenance.json lists them):

- config.json of deepseek-ai/DeepSeek-V4-Flash-0731 at revision 7872f01b1d1fe23eabc4c98b48bffcef5a386062: 1,888
  bytes, SHA-256 6c8f3d2d3b48707541b88f32f22ef3f0f8a6b57d8523281e2b8d3cdb0ae9a023 (a Rust crate's container
  contract, DEEPSEEK_V4_CONFIG_BYTES / DEEPSEEK_V4_CONFIG_SHA256, code index file id 59258988294).
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
from k3plan.errors import K3PlanError
from k3plan.models.hub import bundled_of, hf_id
from k3plan.models.loader import BUNDLED_DIR

NAME = "deepseek-v4-flash-0731"
CONFIG_BYTES = 1_888
CONFIG_SHA256 = "6c8f3d2d3b48707541b88f32f22ef3f0f8a6b57d8523281e2b8d3cdb0ae9a023"
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
    assert model_of("deepseek-ai/DeepSeek-V4-Pro-0813") == "deepseek-v4-pro"
    assert hf_id(NAME) == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert bundled_of("DEEPSEEK-AI/DEEPSEEK-V4-FLASH-0731") == NAME


def test_neighbouring_ids_are_still_refused():
    # a release k3plan bundles no config for is refused by name, never priced as the 0731 or April config
    for text in ("deepseek-ai/DeepSeek-V4-Flash-0732", "deepseek-ai/DeepSeek-V4-Flash-DSpark"):
        with pytest.raises(K3PlanError):
            model_of(text)
