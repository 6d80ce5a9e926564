"""Fuzz every reader k3plan has (hypothesis): config.json, hardware spec YAML, calibration YAML,
probe records, baselines, topology strings. A generated malformed input must give exit 2 and one
line on stderr (`one_error_line`: no traceback), never exit 0 with numbers.

Each test starts from a good file and breaks one thing the reader uses, so that "accepted" can
only mean the reader missed it. The CLI runs in-process (CliRunner), examples are few: the whole
module runs in seconds.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k3_testing import bundled_raw, one_error_line, tiny_kimi_raw
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware, parse_topology
from k3plan.hardware.loader import SPECS_DIR

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RUNNER = CliRunner()


def run(*args):
    return RUNNER.invoke(app, [str(a) for a in args])


# one folder for the module's inputs, removed when the run ends (each mkdtemp below it was left in /tmp before)
_BASE = tempfile.TemporaryDirectory(prefix="k3fuzz-")


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(dir=_BASE.name))


# JSON text for values no reader may accept where a positive count or a size is expected.
HOSTILE_JSON = [
    "-1",
    "0",
    "1.5",
    '"64"',
    "true",
    "[]",
    "{}",
    "null",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    str(2**63),
    "1" + "0" * 30,
    "9" * 5000,
    "[" * 200 + "]" * 200,
]
# YAML text for values no reader may accept where a figure or a size is expected.
HOSTILE_YAML = [
    ".nan",
    ".inf",
    "-.inf",
    "'1e400GiB'",
    "1.0e+400",
    "9" * 5000,
    "9" * 30,
    "true",
    "[]",
    "{}",
    "null",
    "'abc'",
    "-5",
    "''",
    "[" * 200 + "]" * 200,
    "&a [*a]",
]


def substitute(text: str, snippet: str) -> str:
    return text.replace('"__HOSTILE__"', snippet).replace("__HOSTILE__", snippet)


# -- config.json ----------------------------------------------------------------------------------

CONFIG_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "num_experts",
    "num_experts_per_token",
    "moe_intermediate_size",
    "intermediate_size",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
]
CONFIG_KEYS = [k for k in CONFIG_KEYS if k != "num_key_value_heads"]  # not read by the kimi_linear family


@FUZZ
@given(key=st.sampled_from(CONFIG_KEYS), value=st.sampled_from(HOSTILE_JSON))
def test_config_field_hostile_value_is_one_error(key, value):
    raw = tiny_kimi_raw()
    raw["text_config"][key] = "__HOSTILE__"
    path = tmpdir() / "config.json"
    path.write_text(substitute(json.dumps(raw), value))
    line = one_error_line(run("models", "show", path))
    assert "config.json" in line


@FUZZ
@given(
    where=st.sampled_from(
        [
            "quantization_config",
            "quantization_config.quant_method",
            "quantization_config.format",
            "quantization_config.ignore",
        ]
    ),
    value=st.sampled_from(['"fp8"', "[]", "1", "null", '"awq"', '["re:("]', "{}", "NaN"]),
)
def test_config_quantization_hostile_is_one_error(where, value):
    raw = tiny_kimi_raw()
    raw["text_config"]["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized",
        "ignore": [],
    }
    parent, *rest = where.split(".")
    node = raw["text_config"]
    if rest:
        node = node[parent]
        parent = rest[0]
    if parent == "quantization_config" and value == "null":
        value = "1"  # an absent quantization_config is a plain bf16 checkpoint, legitimately
    if parent == "ignore" and value in ("[]", "null"):
        value = "[1]"  # an empty or absent ignore list is fine
    node[parent] = "__HOSTILE__"
    path = tmpdir() / "config.json"
    path.write_text(substitute(json.dumps(raw), value))
    one_error_line(run("models", "show", path))


@FUZZ
@given(
    block=st.sampled_from(
        [
            "[0, 0]",
            "[]",
            '"128"',
            '["128", 128]',
            "[128]",
            "[64, 64]",
            "[128, 128, 128]",
            "[true, 128]",
            "[128.0, 128]",
            "null",
        ]
    )
)
def test_deepseek_block_size_hostile_is_one_error(block):
    raw = bundled_raw("deepseek-v3")
    raw["quantization_config"]["weight_block_size"] = "__HOSTILE__"
    path = tmpdir() / "config.json"
    path.write_text(substitute(json.dumps(raw), block if block != "null" else '"null"'))
    one_error_line(run("models", "show", path))


json_docs = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@FUZZ
@given(doc=json_docs)
def test_config_random_json_is_one_error(doc):
    path = tmpdir() / "config.json"
    path.write_text(json.dumps(doc))
    one_error_line(run("models", "show", path))


@FUZZ
@given(blob=st.binary(max_size=200))
def test_config_random_bytes_is_one_error(blob):
    path = tmpdir() / "config.json"
    path.write_bytes(blob)
    one_error_line(run("models", "show", path))


@FUZZ
@given(depth=st.integers(65, 5_000), kind=st.sampled_from(["[", '{"a":']))
def test_deep_nesting_is_one_error_everywhere(depth, kind):
    close = "]" if kind == "[" else "}"
    d = tmpdir()
    (d / "config.json").write_text(kind * depth + "1" + close * depth)
    assert "nests deeper" in one_error_line(run("models", "show", d / "config.json"))
    (d / "hw.yaml").write_text("a: " + "[" * depth + "]" * depth + "\n")
    assert "nests deeper" in one_error_line(run("hardware", "show", d / "hw.yaml"))


# -- hardware spec YAML ----------------------------------------------------------------------------

HW_FIGURES = [
    "hbm_per_device",
    "usable_hbm_per_device",
    "hbm_bw_per_device",
    "devices_per_chip",
    "chips_per_host",
    "max_chips",
    "scale_up.bw_per_chip",
    "scale_up.latency",
    "scale_out.bw_per_chip",
    "scale_out.latency",
    "flops_per_device.bf16",
]


@FUZZ
@given(figure=st.sampled_from(HW_FIGURES), value=st.sampled_from(HOSTILE_YAML))
def test_hardware_figure_hostile_value_is_one_error(figure, value):
    spec = yaml.safe_load((SPECS_DIR / "tpu-v7x.yaml").read_text())
    node = spec
    *parents, last = figure.split(".")
    for p in parents:
        node = node[p]
    node[last]["value"] = "__HOSTILE__"
    path = tmpdir() / "hw.yaml"
    path.write_text(substitute(yaml.safe_dump(spec, sort_keys=False), value))
    line = one_error_line(run("hardware", "show", path))
    assert "hw.yaml" in line


@FUZZ
@given(text=st.text(max_size=24) | st.from_regex(r"[0-9*x]{1,16}", fullmatch=True))
def test_topology_strings_parse_or_refuse(text):
    """Any string: a K3PlanError, or a topology made of a slice shape the spec lists."""
    hw = load_hardware("tpu-v7x")
    try:
        t = parse_topology(hw, text)
    except K3PlanError as err:
        assert "\n" not in str(err)
        return
    assert "x".join(map(str, t.dims)) in hw.standard_topologies
    assert text.isascii() or not any(c.isdigit() and not c.isascii() for c in text)


# -- calibration YAML ------------------------------------------------------------------------------

GOOD_CAL = {
    "model": "kimi-k3",
    "hardware": "tpu-v7x",
    "topology": "2x2x4",
    "tp": 32,
    "stack": "vllm-tpu",
    "backend": "tpu",
    "available_hbm_gib": 94.75,
    "argument_gib": 47.2,
    "prefill": [{"tokens": 8192, "temp_gib": 5.0}],
    "decode": [{"context": 131072, "temp_gib": 1.0}],
}
CAL_FIELDS = [
    "tp",
    "available_hbm_gib",
    "argument_gib",
    "prefill",
    "prefill.0.tokens",
    "prefill.0.temp_gib",
    "prefill.0.fits",
    "decode.0.context",
    "decode.0.temp_gib",
]
# the same file as validate writes it since issue 10: sizes in int bytes a device
GOOD_CAL_BYTES = {
    **{k: v for k, v in GOOD_CAL.items() if not k.endswith("_gib")},
    "available_hbm_bytes": 101_737_037_824,
    "argument_bytes": 50_680_000_000,
    "prefill": [{"tokens": 8192, "temp_bytes": 5 * 2**30}],
    "decode": [{"context": 131072, "temp_bytes": 2**30}],
}
CAL_BYTES_FIELDS = ["available_hbm_bytes", "argument_bytes", "prefill.0.temp_bytes", "decode.0.temp_bytes"]


def _hostile_calibration(good: dict, field: str, value: str) -> None:
    cal = copy.deepcopy(good)
    node = cal
    *parents, last = field.split(".")
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[int(last) if last.isdigit() else last] = "__HOSTILE__"
    path = tmpdir() / "cal.yaml"
    path.write_text(substitute(yaml.safe_dump(cal, sort_keys=False), value))
    line = one_error_line(run("fit", "-t", "2x2x4", "--tp", "32", "--calibration", path))
    assert "cal.yaml" in line


@FUZZ
@given(field=st.sampled_from(CAL_FIELDS), value=st.sampled_from(HOSTILE_YAML + ["0", "-0.5", "'5'"]))
def test_calibration_hostile_value_is_one_error(field, value):
    if field.endswith("temp_gib") and value == "0" or field == "prefill.0.fits" and value == "true":
        value = "-1"  # a zero temporary, a fitting point: legitimate
    if field.endswith("_gib") and "." not in field and value == "null":
        value = "-1"  # available_hbm_gib / argument_gib are optional: null is "not recorded"
    _hostile_calibration(GOOD_CAL, field, value)


@FUZZ
@given(
    field=st.sampled_from(CAL_BYTES_FIELDS),
    value=st.sampled_from(HOSTILE_YAML + ["0", "-0.5", "'5'", "5.0", str(2**50 + 1)]),
)
def test_calibration_bytes_hostile_value_is_one_error(field, value):
    """The bytes spelling: ints only (5.0 is not a byte count), within 2^50; a point's null is no size."""
    if field.endswith("temp_bytes") and value == "0":
        value = "-1"  # a zero temporary: legitimate
    if "." not in field and value == "null":
        value = "-1"  # available_hbm_bytes / argument_bytes are optional: null is "not recorded"
    _hostile_calibration(GOOD_CAL_BYTES, field, value)


# -- probe records ---------------------------------------------------------------------------------


@FUZZ
@given(
    body=st.sampled_from(
        [
            "[1, 2]",
            "{}",
            '{"probe": "hbm"',
            "NaN",
            '{"probe": "hbm", "backend": 1}',
            "",
            "[" * 500 + "]" * 500,
            "9" * 5000,
        ]
    )
    | st.binary(min_size=1, max_size=64).map(repr)
)
def test_bad_probe_record_names_the_file(body):
    d = tmpdir()
    for good in (ROOT / "k3plan" / "evidence" / "probes").glob("hbm-*.json"):
        (d / good.name).write_text(good.read_text())
    (d / "zz-bad.json").write_text(body)
    line = one_error_line(run("fit", "-t", "2x2x4", "--tp", "32", "--probes", d))
    assert "zz-bad.json" in line


# -- baselines -------------------------------------------------------------------------------------


@FUZZ
@given(
    where=st.sampled_from(
        [
            "configurations",
            "configurations.0.config.tp",
            "configurations.0.expected.fits",
            "configurations.0.expected.per_device.weights_bytes",
            "configurations.0.expected.kv_bytes_per_token",
            "format_version",
        ]
    ),
    value=st.sampled_from(HOSTILE_JSON[:-2] + ['"1"', "1.5"]),
)
def test_baseline_hostile_value_is_one_error(where, value):
    data = json.loads((ROOT / "reports" / "baseline" / "k3.json").read_text())
    data["configurations"] = data["configurations"][:1]
    if where.endswith(("tp", "fits")) and value == "null":
        value = "1.5"  # tp: null is "the stack's default"; keep the value hostile
    if where.endswith(("weights_bytes", "kv_bytes_per_token")) and value == "0":
        value = "-1"  # zero bytes is a valid count (`check` then reports a regression, exit 1)
    if where.endswith("fits") and value == "true":
        value = "1"  # true is the recorded verdict
    node = data
    *parents, last = where.split(".")
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if last not in node and not last.isdigit():
        last = next(iter(node))  # per_device keys differ by version: break the first
    node[last] = "__HOSTILE__"
    path = tmpdir() / "k3.json"
    path.write_text(substitute(json.dumps(data), value))
    line = one_error_line(run("check", "--baseline", path))
    assert "k3.json" in line
