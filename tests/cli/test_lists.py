"""Option values a user types: comma-separated lists have one parser (k3plan.cli.lists) for every command; an empty item is bad input,
not silently dropped (`-H a,,b` and `--stacks vllm,` ran with one value fewer than typed)."""

from __future__ import annotations

import pytest

from k3plan.cli.lists import items, names, whole_numbers
from k3plan.errors import K3PlanError
from tests.k3_testing import one_error_line


def test_items_strip_and_keep_order():
    assert items("-H", " tpu-v7x , nvidia-b200") == ["tpu-v7x", "nvidia-b200"]
    assert whole_numbers("--chunks", "2048, 8192") == [2048, 8192]
    assert names("--op", "reduce,copy", allowed=("copy", "reduce")) == ["reduce", "copy"]


@pytest.mark.parametrize("text", ["", ",", " , ", "a,,b", "a,", ",a"])
def test_empty_or_missing_items_are_refused(text):
    with pytest.raises(K3PlanError, match="-H"):
        items("-H", text)


@pytest.mark.parametrize(
    "text, why", [("8,x", "'x' is not a whole number"), ("8,4", "4 is below 8"), ("1.5", "not a whole")]
)
def test_whole_numbers_name_the_bad_item(text, why):
    with pytest.raises(K3PlanError, match=why):
        whole_numbers("--size", text, minimum=8)


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "-H", "tpu-v7x,,nvidia-b200"],
        ["plan", "--stacks", "vllm,"],
        ["plan", "--kv-dtypes", ",bf16"],
        ["plan", "--chunks", "2048,,8192"],
        ["report", "-H", "tpu-v7x,", "--out", "r.md"],
        ["report", "-c", "131072,,1048576", "--out", "r.md"],
        ["report", "-s", "tpu=vllm-tpu,,gpu=sglang", "--out", "r.md"],
        ["curve", "-t", "2x2x4", "--tp", "32", "--chunks", "1,,2"],
        ["validate", "--tokens", "4096,"],
        ["probe", "a2a", "--bytes", "1KB,,2KB"],
        ["probe", "hbm", "--op", "copy,"],
    ],
)
def test_every_command_refuses_an_empty_item(cli, args):
    assert "empty item" in one_error_line(cli(*args))


@pytest.mark.parametrize(
    "args",
    [
        ["report", "-c", "131072,131072", "--out", "r.md"],  # wrote every section twice
        ["report", "-H", "tpu-v7x,tpu-v7x", "--out", "r.md"],
        ["plan", "--stacks", "sglang,sglang"],  # ranked each configuration twice
        ["plan", "--chunks", "8192,8192"],
        ["curve", "-t", "2x2x4", "--tp", "32", "--chunks", "4096,04096"],
        ["validate", "--tokens", "4096,4096"],
        ["probe", "a2a", "--bytes", "1KB,1KB"],
    ],
)
def test_every_command_refuses_an_item_given_twice(cli, args):
    assert "listed twice" in one_error_line(cli(*args))


@pytest.mark.parametrize(
    "args, said",
    [
        (["check", "--baseline", "{d}"], "a folder; expected a baseline JSON file"),
        (["hardware", "show", "{d}"], "a folder; expected a hardware spec YAML file"),
        (["fit", "-H", "{d}", "-t", "2x2x4"], "a folder; expected a hardware spec YAML file"),
    ],
)
def test_a_folder_where_a_file_is_expected_is_named_as_one(cli, tmp_path, args, said):
    """It said 'no such file' of a folder that exists."""
    assert said in one_error_line(cli(*[a.format(d=tmp_path) for a in args]))
