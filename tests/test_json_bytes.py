"""Issue 10 item 3: bytes are ints everywhere. Every command's --json (small, cheap invocations) is walked:
each key that names a byte count (``bytes``, ``*_bytes``, ``bytes_*``, ``*_bytes_*``; not a rate
``*_per_s``) holds an int, or None, or a list / object of them (``bytes_per_device``: {weights, ...})."""

from __future__ import annotations

import json

RUNS = (
    ("fit", "--json"),
    ("fit", "-t", "2x4x4", "--tp", "32", "--pp", "2", "--json"),
    ("roofline", "-t", "2x2x4", "--tp", "32", "--context", "8192", "--json"),
    ("roofline", "-t", "2x4x4", "--tp", "32", "--pp", "2", "--context", "16384", "--json"),
    ("plan", "-H", "tpu-v7x", "--stacks", "torchtpu-vllm", "--max-chips", "32", "--json"),
    ("curve", "-t", "2x2x4", "--tp", "32", "--context", "8192", "--json"),
    ("models", "show", "kimi-k3", "--json"),
    ("hardware", "show", "tpu-v7x", "--topology", "2x2x4", "--json"),
)


def names_bytes(key: str) -> bool:
    if key.endswith("_per_s") or "_per_s_" in key:
        return False  # a rate: bytes a second are floats
    return key == "bytes" or key.endswith("_bytes") or key.startswith("bytes_") or "_bytes_" in key


def leaves(value, path: str):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def byte_counts(value, path: str = ""):
    """(path, value) of every leaf under a key that names a byte count."""
    if isinstance(value, dict):
        for k, v in value.items():
            if names_bytes(k):
                yield from leaves(v, f"{path}.{k}")
            else:
                yield from byte_counts(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from byte_counts(v, f"{path}[{i}]")


def strict(text: str):
    """json.loads, refusing NaN and Infinity (Python's json reads and writes them; JSON has neither)."""

    def refuse(constant: str):
        raise AssertionError(f"{constant} in a --json output")

    return json.loads(text, parse_constant=refuse)


def is_int(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def test_every_byte_count_in_every_json_output_is_an_int(cli, tmp_path):
    assert names_bytes("bytes_per_chip_per_step") and names_bytes("kv_bytes") and names_bytes("bytes")
    assert names_bytes("pipeline_bytes_per_chip_per_step") and not names_bytes("link_bw_bytes_per_s")
    assert not names_bytes("comm_bytes_per_s_per_chip") and not is_int(12944112.0) and not is_int(True)
    runs = [*RUNS, ("report", "-H", "tpu-v7x", "-c", "8192", "--max-chips", "16", "--out", tmp_path / "r.md", "--json")]
    bad, seen = [], set()
    for args in runs:
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
        found = list(byte_counts(strict(r.stdout)))  # no NaN / Infinity either: JSON has neither
        assert found, f"{args[0]}: no byte count in its JSON (the walk would check nothing)"
        seen.update(p for p, _ in found)
        bad += [f"{' '.join(map(str, args[:2]))}: {p} = {v!r}" for p, v in found if not is_int(v)]
    # the figures issue 10 named: the roofline's comm bytes and its step bytes, decode and prefill
    for p in (
        ".decode.comm.bytes_per_chip_per_step",
        ".prefill.comm.pipeline_bytes_per_chip_per_step",
        ".decode.bytes_per_device.experts",
        ".decode.ideal_bytes_per_step.experts",
    ):
        assert p in seen
    assert bad == []
