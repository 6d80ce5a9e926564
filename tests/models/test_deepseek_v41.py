"""DeepSeek-V4.1-Flash: the bundled config.json against the public checkpoint, to the byte.

Golden figures, typed from public sources (never from the code under test; the bundled provenance.json lists
them with their commits):

- ``model.safetensors.index.json`` of deepseek-ai/DeepSeek-V4.1-Flash: ``metadata.total_size``
  510,286,023,000 B over 96,085 weight_map entries in 48 shards (899ms/ai-infra-book
  calculations/research/deepseek-v41-flash/README.md @ 7d095c36ee957bfa27890da881b1820c9a053c6b, which read the
  index and all 48 shard headers at revision df42c109...; Unjuno/DeepSeeker-V4.1's storage summary of revision
  dba1be0a40aa45a94ad051997016db3960a90277 @ 9a4013d9928549f71ed2b87bc39a7a7ba42bb8cd gives the same).
- the shard headers' dtype counts (the DeepSeeker summary): BF16 520, F32 387, F8_E8M0 47,589, F8_E4M3 357,
  I8 47,232; Engram 12 tensors, 203,073,076,240 B; routed experts 15,360 of 18,800,640 B each.
- parameters and bytes by part, from the headers (ai-infra-book calculations/results/v41-flash-n8192-b1.md, scales
  excluded from parameters, I8-packed FP4 counted two a byte): backbone 551,566,180,464 / 298,309,535,168 B;
  Engram with its projections 196,928,504,320 / 203,073,076,240 B (tables alone 196,613,849,600); vision and
  aligner 485,268,480 / 970,536,960 B; DSpark 14,225,362,530 / 7,932,874,632 B.
- the model card's labels (as quoted there): 552B backbone, ~197B (196.9B) Engram n-gram memory.
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

NAME = "deepseek-v4.1-flash"

INDEX_TOTAL_SIZE = 510_286_023_000
INDEX_ENTRIES = 96_085
HEADER_DTYPES = {"BF16": 520, "F32": 387, "F8_E8M0": 47_589, "F8_E4M3": 357, "I8": 47_232}
# part -> (parameters, checkpoint bytes)
PARTS = {
    "backbone": (551_566_180_464, 298_309_535_168),
    "engram": (196_928_504_320, 203_073_076_240),
    "vision": (485_268_480, 970_536_960),
    "dspark": (14_225_362_530, 7_932_874_632),
}
ENGRAM_TABLE_PARAMS = 196_613_849_600
EXPERT_BYTES = 18_800_640  # one routed expert: w1, w2, w3 with their scales


@pytest.fixture(scope="module")
def model():
    return load_model(NAME)


def _part(t) -> str:
    return {"engram": "engram", "vision": "vision", "mtp": "dspark"}.get(t.kind, "backbone")


def test_index_total_size_and_entry_count_exact(model):
    assert sum(t.nbytes for t in model.inventory.tensors) == INDEX_TOTAL_SIZE
    assert len(checkpoint_table(model.inventory)) == INDEX_ENTRIES


def test_header_dtype_counts(model):
    assert dict(Counter(dtype for dtype, _ in checkpoint_table(model.inventory).values())) == HEADER_DTYPES


def test_census_by_part_params_and_bytes(model):
    params, nbytes = Counter(), Counter()
    for t in model.inventory.tensors:
        params[_part(t)] += t.params
        nbytes[_part(t)] += t.nbytes
    assert {p: (params[p], nbytes[p]) for p in PARTS} == PARTS
    tables = [t for t in model.inventory.of_kind("engram") if t.name.endswith("engram.embed")]
    assert sum(t.params for t in tables) == ENGRAM_TABLE_PARAMS
    assert (
        len(checkpoint_table(model.inventory))
        - len(
            checkpoint_table(type(model.inventory).of(tuple(t for t in model.inventory.tensors if t.kind != "engram")))
        )
        == 12
    )  # the storage summary's 12 Engram tensors


def test_bytes_by_format_sum_to_the_index(model):
    by_fmt = model.inventory.breakdown("fmt", include_extra=True)
    assert sum(int(v["bytes"]) for v in by_fmt.values()) == INDEX_TOTAL_SIZE
    # the Engram tables are the only e4m3 rows with a scale a 32 of a row: 768,022,850 rows x 264 B
    assert int(by_fmt["ds_fp8_row32"]["bytes"]) == (384_006_168 + 384_016_682) * 264
    expert = model.inventory.get("layers.0.ffn.experts.{e}.w1")
    per_expert = sum(model.inventory.get(f"layers.0.ffn.experts.{{e}}.{w}").nbytes for w in ("w1", "w2", "w3"))
    assert per_expert == EXPERT_BYTES * expert.n_experts


def test_published_totals_within_one_percent(model):
    inv = model.inventory
    assert inv.total_params == PARTS["backbone"][0]  # text totals = the backbone
    assert abs(inv.total_params / 552e9 - 1) < 0.01
    assert abs(inv.engram_params / 196.9e9 - 1) < 0.01
    assert inv.engram_bytes == PARTS["engram"][1]
    assert inv.vision_params == PARTS["vision"][0] and inv.mtp_params == PARTS["dspark"][0]


def test_spec_reads_csa2_engram_dspark(model):
    d = model.spec.dsv4
    assert d is not None and d.csa2 is not None and d.engram is not None and d.dspark is not None
    assert d.csa2.kv_source_layer_ids == (2, 8, 14, 20)
    assert d.engram.layer_ids == (1, 14) and d.engram.rows_per_token_layer == 24
    assert d.dspark.block_size == 5 and d.dspark.target_layer_ids == (37, 38, 39)
    assert model.spec.num_layers == 40 and model.spec.mtp_layers == 3
    assert len(d.compress_ratios) == 40 and d.mtp_compress_ratios == (0, 0, 0)


def test_models_show_cli_golden():
    from k3plan.cli.app import app

    out = CliRunner().invoke(app, ["models", "show", NAME, "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["total_params"] == PARTS["backbone"][0]
    assert got["mtp_params"] == PARTS["dspark"][0] and got["vision_params"] == PARTS["vision"][0]
    assert got["breakdown"]["engram"]["params"] == PARTS["engram"][0]
    assert got["breakdown"]["engram"]["bytes"] == PARTS["engram"][1]
    assert sum(r["bytes"] for r in got["breakdown"].values()) == INDEX_TOTAL_SIZE


def _raw() -> dict:
    return json.loads((BUNDLED_DIR / NAME / "config.json").read_text())


def _bad(mutate) -> dict:
    raw = _raw()
    mutate(raw)
    return raw


BAD = {
    "no text_config": (lambda r: r.pop("text_config"), "text_config"),
    "text_config a list": (lambda r: r.__setitem__("text_config", [1]), "text_config"),
    "short compress_ratios": (
        lambda r: r["text_config"].__setitem__("compress_ratios", [0] * 40),
        "compress_ratios",
    ),
    "kv source out of range": (
        lambda r: r["text_config"].__setitem__("kv_source_layer_ids", [2, 8, 14, 99]),
        "kv_source_layer_ids",
    ),
    "kv source on a window-only layer": (
        lambda r: r["text_config"].__setitem__("kv_source_layer_ids", [0, 8, 14, 20]),
        "kv_source_layer_ids",
    ),
    "engram rows mismatch": (
        lambda r: r["text_config"].__setitem__("engram_num_embeddings", [384006168]),
        "engram_num_embeddings",
    ),
    "missing hidden_size": (lambda r: r["text_config"].pop("hidden_size"), "hidden_size"),
    "128-block fp8": (
        lambda r: r["quantization_config"].__setitem__("weight_block_size", [128, 128]),
        "quantization_config",
    ),
    "engram rows not in 32-blocks": (
        lambda r: r["text_config"].__setitem__("engram_head_dim", 100),
        "engram_head_dim",
    ),
    "hidden not in 32-blocks": (lambda r: r["text_config"].__setitem__("hidden_size", 5121), "hidden_size"),
    "candidate source not a KV source": (
        lambda r: r["text_config"].__setitem__("candidate_source_layer_id", 24),
        "candidate_source_layer_id",
    ),
    "bad vision": (lambda r: r["vision_config"].__setitem__("hidden_size", "wide"), "vision_config.hidden_size"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_or_partial_config_one_line(tmp_path, case):
    mutate, field = BAD[case]
    (tmp_path / "config.json").write_text(json.dumps(_bad(mutate)))
    with pytest.raises(K3PlanError, match=field):
        load_model(str(tmp_path))


def test_bad_config_cli_exit_2_one_line(tmp_path):
    from k3plan.cli.app import app

    raw = _bad(lambda r: r["text_config"].pop("engram_num_embeddings"))
    (tmp_path / "config.json").write_text(json.dumps(raw))
    out = CliRunner().invoke(app, ["models", "show", str(tmp_path)])
    assert out.exit_code == 2
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "engram_num_embeddings" in lines[0] and "Traceback" not in out.output
