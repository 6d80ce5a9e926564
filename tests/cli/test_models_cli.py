"""`k3plan models` / `models show`: fields, breakdowns, loading from paths, and bad input."""

from __future__ import annotations

import json

import pytest
from k3_testing import one_error_line

from k3plan.models.loader import BUNDLED_DIR

BUNDLED = [
    "deepseek-r1-0528-fp4-v2",
    "deepseek-r1-0528-mxfp4",
    "deepseek-v3",
    "deepseek-v4-flash",
    "deepseek-v4-flash-0731",
    "deepseek-v4-pro",
    "deepseek-v4-pro-0813",
    "deepseek-v4.1-flash",
    "kimi-k2",
    "kimi-k2-thinking",
    "kimi-k2.6",
    "kimi-k3",
    "kimi-linear-48b-a3b",
]


def show_json(cli, *args) -> dict:
    r = cli("models", "show", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_show_k3_json_fields(cli):
    out = show_json(cli, "kimi-k3")
    assert out["name"] == "kimi-k3" and out["family"] == "kimi_linear"
    assert out["total_params"] == 2_779_484_478_208
    assert out["active_params"] == 104_189_614_848
    assert out["vision_params"] == 447_358_976
    assert out["layers"] == {"total": 93, "kda": 69, "mla": 24, "moe": 92}
    by_fmt = out["checkpoint_bytes_by_format"]
    assert set(by_fmt) == {"bf16", "f32", "mxfp4"}
    assert sum(by_fmt.values()) == out["checkpoint_bytes"]
    assert by_fmt["mxfp4"] == 92 * 896 * 17_547_264
    assert out["breakdown_by"] == "role"
    assert out["breakdown"]["expert"]["params"] == 2_722_740_830_208
    assert any("quantiz" in n for n in out["notes"])


def test_show_defaults_to_k3(cli):
    assert show_json(cli)["name"] == "kimi-k3"


@pytest.mark.parametrize("by,key", [("role", "expert"), ("kind", "kda"), ("format", "mxfp4")])
def test_show_by(cli, by, key):
    out = show_json(cli, "kimi-k3", "--by", by)
    rows = out["breakdown"]
    assert key in rows
    text = {k: v for k, v in rows.items() if k not in ("vision", "mtp")}
    assert sum(v["params"] for v in text.values()) == out["total_params"]
    if by == "format":
        assert {k: v["bytes"] for k, v in rows.items()} == out["checkpoint_bytes_by_format"]
    else:
        assert rows["vision"]["params"] == out["vision_params"]


def test_show_table(cli):
    r = cli("models", "show", "kimi-k3", "--by", "kind")
    assert r.exit_code == 0, r.output
    assert "2,779,484,478,208" in r.stdout and "104,189,614,848" in r.stdout
    assert "447,358,976" in r.stdout and "note:" in r.stdout


def test_show_and_list_print_gib(cli):
    """Bytes in GiB (2^30 B) as every other command prints them, never GB."""
    r = cli("models", "show", "kimi-k3", "--by", "format")
    assert r.exit_code == 0, r.output
    assert "bytes (GiB)" in r.stdout and " GB" not in r.stdout and "(GB)" not in r.stdout
    mxfp4 = 92 * 896 * 17_547_264  # 92 MoE layers x 896 experts x one expert's packed bytes (test above)
    assert f"{mxfp4 / 2**30:,.3f}" in r.stdout  # 1,347.117
    r = cli("models")
    assert r.exit_code == 0 and " GiB" in r.stdout and " GB" not in r.stdout


def test_show_deepseek_mtp_separate(cli):
    out = show_json(cli, "deepseek-v3")
    assert out["mtp_params"] > 0
    assert abs(out["total_params"] - 671.03e9) <= 0.01e9
    assert "fp8_block" in out["checkpoint_bytes_by_format"]


def test_list_models(cli):
    r = cli("models", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == BUNDLED
    r = cli("models")
    assert r.exit_code == 0
    for name in BUNDLED[:3]:
        assert name in r.stdout
    assert "kimi-linear" in r.stdout and "…" not in r.stdout  # a long name folds, never truncates


def test_models_list_is_models_as_hardware_list_is_hardware(cli):
    # `k3plan hardware list` exists, so a new user types `k3plan models list` too: same answer as `models`
    listed, plain = cli("models", "list", "--json"), cli("models", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == json.loads(plain.stdout)
    assert cli("models", "list").stdout == cli("models").stdout


def test_load_from_config_path_and_folder(cli, tmp_path, k3_raw):
    folder = tmp_path / "my-k3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(k3_raw))
    by_path = show_json(cli, folder / "config.json")
    by_folder = show_json(cli, folder)
    assert by_path["name"] == by_folder["name"] == "my-k3"
    for out in (by_path, by_folder):
        assert out["total_params"] == 2_779_484_478_208
    other = tmp_path / "renamed.json"
    other.write_text(json.dumps(k3_raw))
    assert show_json(cli, other)["name"] == "renamed"


def test_version_and_help(cli):
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.startswith("k3plan ")
    r = cli("models", "show", "--help")
    assert r.exit_code == 0 and "Examples" in r.stdout


# --- bad input: one line, exit 2, no traceback ---------------------------------------------------


def _write(tmp_path, raw, name="config.json"):
    d = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    p = d / name
    p.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return p


def test_missing_file(cli, tmp_path):
    line = one_error_line(cli("models", "show", tmp_path / "nope" / "config.json"))
    assert "no such file" in line


def test_folder_without_config(cli, tmp_path):
    line = one_error_line(cli("models", "show", tmp_path))
    assert "config.json" in line


def test_invalid_json(cli, tmp_path):
    p = _write(tmp_path, '{"hidden_size": 7168,,}')
    line = one_error_line(cli("models", "show", p))
    assert "invalid JSON" in line and "line 1" in line


@pytest.mark.parametrize("payload", ["[1, 2]", '"text"', "\udcff"])
def test_not_an_object(cli, tmp_path, payload):
    p = _write(tmp_path, "{}")
    p.write_bytes(payload.encode("utf-8", "surrogateescape"))
    one_error_line(cli("models", "show", p))


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "vocab_size", "kv_lora_rank", "num_experts"])
def test_required_field_missing_is_named(cli, tmp_path, k3_raw, field):
    del k3_raw["text_config"][field]
    line = one_error_line(cli("models", "show", _write(tmp_path, k3_raw)))
    assert f"text_config.{field}" in line and "missing" in line


def test_nested_field_missing_is_named(cli, tmp_path, k3_raw):
    del k3_raw["text_config"]["linear_attn_config"]["num_heads"]
    line = one_error_line(cli("models", "show", _write(tmp_path, k3_raw)))
    assert "linear_attn_config.num_heads" in line


@pytest.mark.parametrize(
    "field,value",
    [
        ("hidden_size", 0),
        ("hidden_size", -7168),
        ("num_experts", 0),
        ("moe_intermediate_size", -1),
        ("vocab_size", 1.5),
        ("num_attention_heads", "96"),
        ("q_lora_rank", 0),
    ],
)
def test_bad_dimension_is_named(cli, tmp_path, k3_raw, field, value):
    k3_raw["text_config"][field] = value
    line = one_error_line(cli("models", "show", _write(tmp_path, k3_raw)))
    assert f"text_config.{field}" in line


def test_bad_dimension_deepseek(cli, tmp_path):
    raw = json.loads((BUNDLED_DIR / "deepseek-v3" / "config.json").read_text())
    raw["n_routed_experts"] = -256
    line = one_error_line(cli("models", "show", _write(tmp_path, raw)))
    assert "n_routed_experts" in line


@pytest.mark.parametrize(
    "key,value",
    [
        ("patch_size", 0),
        ("vt_num_hidden_layers", -1),
        ("vt_intermediate_size", "4096"),
        ("merge_kernel_size", [2]),
        ("merge_kernel_size", 2),
    ],
)
def test_bad_vision_dimension_is_named(cli, tmp_path, k3_raw, key, value):
    k3_raw["vision_config"][key] = value
    line = one_error_line(cli("models", "show", _write(tmp_path, k3_raw)))
    assert f"vision_config.{key}" in line


def test_layer_lists_must_cover_layers(cli, tmp_path, k3_raw):
    k3_raw["text_config"]["linear_attn_config"]["full_attn_layers"].append(94)
    line = one_error_line(cli("models", "show", _write(tmp_path, k3_raw)))
    assert "kda_layers" in line


def test_top_k_above_experts(cli, tmp_path, k3_raw):
    k3_raw["text_config"]["num_experts_per_token"] = 1000
    one_error_line(cli("models", "show", _write(tmp_path, k3_raw)))


def test_unknown_model_lists_known(cli):
    line = one_error_line(cli("models", "show", "kimi-k9"))
    assert "kimi-k9" in line
    for name in BUNDLED:
        assert name in line


@pytest.mark.parametrize(
    "arch",
    [
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
        {"architectures": "KimiK3", "model_type": 7},
        {"architectures": 5},
    ],
)
def test_unsupported_architecture_names_supported(cli, tmp_path, arch):
    line = one_error_line(cli("models", "show", _write(tmp_path, {**arch, "hidden_size": 4096})))
    assert "unsupported architecture" in line
    assert "kimi_linear" in line and "deepseek_v3" in line and "DeepseekV3ForCausalLM" in line


def test_by_nonsense(cli):
    line = one_error_line(cli("models", "show", "kimi-k3", "--by", "nonsense"))
    assert "nonsense" in line and "role" in line
