"""Every command of tests/engines/public_commands.yaml (public recipes, nightly scripts and issue threads, each with
its source) reads through --serve's parser as its engine reads it: no flag of theirs is refused (issue 47 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k3plan.engines.release import parse_release
from k3plan.engines.serve import parse_serve
from k3plan.hardware import load_hardware
from k3plan.units import GiB

COMMANDS = yaml.safe_load((Path(__file__).parent / "public_commands.yaml").read_text())


def test_the_set_is_public_and_spans_the_engines():
    assert len(COMMANDS) >= 70
    assert all(c["source"] and c["command"] and c["ran"] for c in COMMANDS)
    launchers = {c["command"].split(" serve ")[0].split()[-1] for c in COMMANDS if " serve " in c["command"]}
    assert {"vllm", "sglang"} <= launchers


@pytest.mark.parametrize("case", COMMANDS, ids=[f"{i}-{c['hardware']}" for i, c in enumerate(COMMANDS)])
def test_a_public_command_reads(case):
    hw = load_hardware(case["hardware"])
    release = parse_release(case["engine_version"]) if "engine_version" in case else None
    q = parse_serve(
        case["command"],
        platform=hw.kind,
        device_gib=hw.usable_bytes_per_device / GiB,
        device_name=hw.name,
        release=release,
    )
    assert q.model and q.tp >= 1
