"""Issue 10 item 3: a baseline's expected block is typed (check.baseline.Split, DeviceTerms,
check.names.FoldedGroup), read strictly, and compared field by field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.budget.result import PerDevice
from k3plan.check.baseline import DeviceTerms, Split, load_baseline
from k3plan.check.compare import compare, parse_tolerance
from k3plan.check.measure import measure
from k3plan.check.names import FoldedGroup
from k3plan.errors import K3PlanError
from k3plan.structs import fields

BASELINE = Path(__file__).resolve().parents[2] / "reports" / "baseline" / "k3.json"
ONE = "v7x-2x4x4-tp32-dp2-torchtpu-vllm"


def _write(tmp_path, edit) -> Path:
    data = json.loads(BASELINE.read_text())
    data["configurations"] = [c for c in data["configurations"] if c["name"] == ONE]
    edit(data["configurations"][0]["expected"])
    path = tmp_path / "k3.json"
    path.write_text(json.dumps(data))
    return path


def test_the_shipped_baseline_reads_as_typed_fields():
    e = next(c for c in load_baseline(BASELINE).configurations if c.name == ONE).expected
    assert e is not None
    assert e.parallel == Split(tp=32, ep=64, dp=2) and e.parallel.text() == "{'tp': 32, 'ep': 64, 'dp': 2}"
    assert fields(DeviceTerms) == fields(PerDevice)
    assert all(isinstance(g, FoldedGroup) for g in (*e.replicated.values(), *e.fallbacks.values()))
    norm = e.replicated["language_model.model.layers.*.input_layernorm.weight"]
    assert (norm.layers, norm.count) == ("0-92", 93)  # one norm a layer, 93 layers
    assert norm.bytes == 93 * 7168 * 2  # hidden 7168, bf16, whole on every device


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda e: e["per_device"].update(kv_bytes=-5), "per_device: kv_bytes is -5; expected a byte count"),
        (lambda e: e["per_device"].update(temp_bytes="123"), "per_device.temp_bytes: Expected `int`, got `str`"),
        (lambda e: next(iter(e["replicated"].values())).update(count="3"), ".count: Expected `int`, got `str`"),
        (lambda e: e["parallel"].update(tp=0), "parallel.tp: Expected `int` >= 1"),
    ],
)
def test_a_corrupt_field_is_named(tmp_path, edit, words):
    with pytest.raises(K3PlanError, match="configurations.0.expected.") as err:
        load_baseline(_write(tmp_path, edit))
    assert words in str(err.value)


def test_a_changed_split_and_term_are_findings_under_their_names(tmp_path):
    def edit(e):
        e["parallel"]["dp"] = 1
        e["per_device"]["kv_bytes"] -= 2**30  # the recomputed KV is 1 GiB larger than recorded

    entry = load_baseline(_write(tmp_path, edit)).configurations[0]
    assert entry.expected is not None
    found = compare(entry.name, entry.expected, measure(entry.config), tolerance=parse_tolerance("0.5%"))
    by = {f.check: f for f in found}
    assert (
        by["split"].baseline == "{'tp': 32, 'ep': 64, 'dp': 1}" and by["split"].now == "{'tp': 32, 'ep': 64, 'dp': 2}"
    )
    assert by["kv_bytes"].delta_bytes == 2**30 and by["kv_bytes"].fail
    assert set(by) == {"split", "kv_bytes"}


def test_an_unnamed_configuration_is_labelled_with_exact_tokens():
    """A configuration without a name is called by its label in check's output: the context as the exact
    count every other output prints (131,072), not "128K" with K = 1,024 (issue 10 item 6)."""
    from k3plan.check.baseline import Config

    label = Config(topology="2x2x4", tp=32, context_tokens=131072, batch=4).label()
    assert label == "tpu-v7x 2x2x4 tp32 torchtpu-vllm 131,072 tokens x4"
    assert Config(context_tokens=1_048_576).label().endswith(" 1,048,576 tokens x1")
