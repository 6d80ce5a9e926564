"""Issue 48 item 5: a probe record whose figures no measurement can give (a negative or 0 B/s rate, a "nan" a lax
read made a float, a size that is not a number) is refused in one line naming the file and the key, by every
command that reads --probes; it never changes an answer silently nor crashes a curve. A committed record still
reads, and a rate above the spec's peak is still refused where it would be applied."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from k3_testing import one_error_line

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "k3plan" / "evidence" / "probes"  # the shipped device records
HBM = sorted(PROBES.glob("hbm-tpu-v5-lite-*.json"))[0]
MATMUL = sorted(PROBES.glob("matmul-*.json"))[0]
FIT = ("fit", "-t", "2x2x4", "--tp", "32")
COMMANDS = {
    "fit": (*FIT,),
    "roofline": ("roofline", "-t", "2x2x4", "--tp", "32"),
    "report": ("report", "-H", "tpu-v5e", "-c", "131072"),
}


def _hostile(tmp_path: Path, source: Path, change) -> Path:
    rec = json.loads(source.read_text())
    change(rec)
    folder = tmp_path / "probes"
    folder.mkdir()
    (folder / "zz-bad.json").write_text(json.dumps(rec))
    return folder


def _set(where: str, value):
    def change(rec):
        node = rec
        *path, last = where.split(".")
        for key in path:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value

    return change


@pytest.mark.parametrize(
    "source, where, value",
    [
        (HBM, "points.0.value", -6.2e11),  # a negative HBM rate
        (HBM, "points.0.value", 0),  # 0 B/s
        (HBM, "points.0.value", "nan"),  # a lax read made it float('nan')
        (HBM, "points.1.value", "-inf"),
        (HBM, "points.0.params.bytes", "4 MiB"),  # int() crashed the HBM curve
        (HBM, "points.0.params.bytes", "nan"),
        (HBM, "points.0.params.bytes", True),
        (HBM, "points.0.params.bytes", 0),
        (HBM, "points.0.samples_s.per_iter.0", "nan"),
        (HBM, "points.0.stats.p50", "inf"),
        (HBM, "points.0.expected", -1),
        (MATMUL, "points.0.params.size", "big"),
        (MATMUL, "points.0.params.size", -4096),
    ],
)
def test_an_impossible_figure_in_a_probe_record_is_one_line(cli, tmp_path, source, where, value):
    folder = _hostile(tmp_path, source, _set(where, value))
    line = one_error_line(cli(*FIT, "--probes", folder))
    key = where.replace("points.", "points[", 1).replace(".", "].", 1) if where.startswith("points.") else where
    key = key.replace("per_iter.0", "per_iter[0]")
    assert "zz-bad.json" in line and key in line, line


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_reader_of_probes_refuses_it(cli, tmp_path, command):
    folder = _hostile(tmp_path, HBM, _set("points.0.value", -6.2e11))
    args = [*COMMANDS[command], "--probes", folder]
    if command == "report":
        args += ["--out", tmp_path / "r.md"]
    assert "points[0].value is -620000000000.0" in one_error_line(cli(*args))
    assert not (tmp_path / "r.md").exists()


def test_rows_that_are_not_a_number_in_a_kernel_record(cli, tmp_path):
    """Was: int('many') in kernel_times, a traceback from fit on a TPU."""
    source = sorted(PROBES.glob("attnres-*.json"))[0]
    folder = _hostile(tmp_path, source, _set("points.0.params.rows", "many"))
    assert "points[0].params.rows is 'many'" in one_error_line(cli(*FIT, "--probes", folder))


def test_the_committed_records_all_read():
    from k3plan.evidence.probe_records import load_with_paths

    assert len(load_with_paths(PROBES)) == len(list(PROBES.glob("*.json")))


def test_a_rate_above_the_peak_is_still_refused_not_applied(tmp_path):
    """Issue 35 kept: a point faster than the spec's peak reads (the record is well formed) but is skipped."""
    from k3plan.hardware import load_hardware
    from k3plan.speed.curves import build_curves
    from k3plan.speed.peaks import Peaks

    rec = json.loads(HBM.read_text())
    hw = load_hardware("tpu-v5e")
    rec["points"][0]["value"] = 3 * hw.hbm_bw_bytes_per_s_per_device
    folder = tmp_path / "probes"
    folder.mkdir()
    (folder / "fast.json").write_text(json.dumps(rec))
    from k3plan.evidence.probe_records import load_with_paths

    curves = build_curves(load_with_paths(folder), peaks=Peaks.from_hardware(hw))
    assert any("above 1: refused" in s for s in curves.skipped)


# -- a key given twice ----------------------------------------------------------------------------------------

CAL = ROOT / "k3plan" / "evidence" / "calibrations" / "k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml"


def _twice_in_yaml(path: Path, text: str, key: str, value: str) -> Path:
    """``text`` with a second ``key:`` line (top level) appended: YAML kept the last one without a word."""
    path.write_text(text.rstrip("\n") + f"\n{key}: {value}\n")
    return path


@pytest.mark.parametrize("reader", ["calibration", "hardware", "stack", "shardspecs"])
def test_a_yaml_key_given_twice_is_refused(cli, tmp_path, reader):
    from k3plan.hardware.loader import SPECS_DIR

    if reader == "calibration":
        path = _twice_in_yaml(tmp_path / "cal.yaml", CAL.read_text(), "decode", "[{context: 4096, temp_gib: 1.0}]")
        args, key = (*FIT, "--calibration", path), "decode"
    elif reader == "hardware":
        path = _twice_in_yaml(tmp_path / "hw.yaml", (SPECS_DIR / "tpu-v7x.yaml").read_text(), "name", "tpu-v7x")
        args, key = ("hardware", "show", path), "name"
    elif reader == "stack":
        text = (ROOT / "k3plan" / "engines" / "jax_native" / "stack.yaml").read_text()
        path = _twice_in_yaml(tmp_path / "stack.yaml", text, "name", "jax-native")
        args, key = (*FIT, "--stack", path), "name"
    else:
        path = tmp_path / "specs.yaml"
        path.write_text("shardspecs:\n  'a.*': [tp]\n  'a.*': [ep]\n")
        args, key = (*FIT, "--shardspecs", path), "a.*"
    line = one_error_line(cli(*args))
    assert f"key {key!r} is given twice" in line and path.name in line, line


@pytest.mark.parametrize("reader", ["config", "probe record", "baseline"])
def test_a_json_key_given_twice_is_refused(cli, tmp_path, reader):
    from k3plan.models.loader import BUNDLED_DIR

    if reader == "config":
        text = (BUNDLED_DIR / "kimi-k3" / "config.json").read_text()
        path = tmp_path / "config.json"
        path.write_text(text.replace('"text_config": {', '"text_config": {"num_hidden_layers": 3, ', 1))
        args, key = ("models", "show", path), "num_hidden_layers"
    elif reader == "probe record":
        (tmp_path / "p").mkdir()
        path = tmp_path / "p" / "rec.json"
        path.write_text(HBM.read_text().replace('"ok": true', '"ok": false, "ok": true', 1))
        args, key = (*FIT, "--probes", path.parent), "ok"
    else:
        text = (ROOT / "reports" / "baseline" / "k3.json").read_text()
        path = tmp_path / "base.json"
        path.write_text(text.replace("{", '{"format_version": 0, ', 1))
        args, key = ("check", "--baseline", path), "format_version"
    line = one_error_line(cli(*args))
    assert f"key {key!r} is given twice" in line and path.name in line, line


def test_a_yaml_merge_may_still_be_overridden():
    """`<<: *base` then the same key is YAML's override, not a key given twice."""
    from k3plan.safeparse import parse_yaml

    text = "base: &b {p: 1, q: 2}\nd:\n  <<: *b\n  p: 3\n"
    assert parse_yaml("x.yaml", text)["d"] == {"p": 3, "q": 2}


# -- a large file is read in linear time ----------------------------------------------------------------------

_REF_JSON = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)  # the old per-character scan: ~1 s a MB on a long string
_REF_YAML = re.compile(r"""'(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|#[^\n]*""")


def _reference_depth(text: str, skip: re.Pattern) -> int:
    depth = deepest = 0
    for ch in re.findall(r"[\[\]{}]", skip.sub("", text)):
        depth = depth + 1 if ch in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


@settings(max_examples=300, deadline=None)
@given(
    doc=st.recursive(
        st.text(alphabet="[]{}\"\\ab\n'é"),
        lambda kids: st.lists(kids) | st.dictionaries(st.text(alphabet='[]{}"\\a'), kids),
        max_leaves=20,
    ),
    ascii_only=st.booleans(),
    numpy=st.booleans(),
)
def test_the_json_depth_scan_counts_as_the_per_character_regex_did(doc, ascii_only, numpy):
    import k3plan.safeparse as sp

    text = json.dumps(doc, ensure_ascii=ascii_only)
    with pytest.MonkeyPatch.context() as mp:
        if numpy:  # the numpy path, chunks and all, on small inputs too
            mp.setattr(sp, "_SMALL", -1)
            mp.setattr(sp, "_CHUNK", 3)
        assert sp._bracket_depth(text) == _reference_depth(text, _REF_JSON)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="[]{}\"\\ab'#\n"), numpy=st.booleans())
def test_the_yaml_depth_scan_counts_as_the_per_character_regex_did(text, numpy):
    import k3plan.safeparse as sp

    with pytest.MonkeyPatch.context() as mp:
        if numpy:
            mp.setattr(sp, "_SMALL", -1)
            mp.setattr(sp, "_CHUNK", 3)
        assert sp._bracket_depth(text, sp._YAML_SKIP) == _reference_depth(text, _REF_YAML)


LARGE = {
    "one long string": lambda n: '{"a": "' + "x" * n + '"}',
    "dense escapes": lambda n: '{"a": "' + "\\n" * (n // 2) + '"}',
    "unterminated": lambda n: '{"a": "' + "x" * n,
    "deep": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "many brackets": lambda n: "[" + "[1]," * (n // 4) + "[1]]",
}


@pytest.mark.parametrize("kind", list(LARGE))
def test_a_50_mb_config_is_refused_by_its_size(kind):
    """Was ~50 s of CPU for one 50 MB string (the scan before the parse), then ~0.5 s: a JSON document is now refused
    past 8 MiB before any scan (issue 48: a 50 MB input is refused or read in under 1 s; the time of what is still
    read is benchmarks/bench_large_inputs.py's, as a ratio to a floor)."""
    from k3plan.errors import K3PlanError
    from k3plan.safeparse import parse_json

    with pytest.raises(K3PlanError, match=r"more than 8,388,608 bytes; expected a JSON document of at most"):
        parse_json("config.json", LARGE[kind](50 * 2**20))


YAML_SHAPES = {  # the costliest YAML a value: a line, a flow item, a flow mapping's entry
    "keys": lambda n: "".join(f"k{i}: {i}\n" for i in range(n)),
    "block list": lambda n: "- 1\n" * n,
    "flow list": lambda n: "[" + "1," * n + "1]",
    "flow mappings": lambda n: "[" + "{a: 1, b: 2}," * (n // 3) + "1]",  # two commas and a brace an item
}


@pytest.mark.parametrize("shape", list(YAML_SHAPES))
def test_a_yaml_document_is_refused_by_its_count_of_values_before_the_parse(shape):
    """PyYAML's safe loader takes ~5-15 us a value: a 1 MiB flow list of 500k items took 2.8 s, a 50 MB one 190 s
    before the value count refused it after the parse. Counted first now (lines, commas, brackets)."""
    from k3plan.errors import K3PlanError
    from k3plan.safeparse import MAX_YAML_LINES, parse_yaml

    with pytest.raises(K3PlanError, match=r"more than 20,000 lines, commas and brackets; expected a spec of at most"):
        parse_yaml("spec.yaml", YAML_SHAPES[shape](MAX_YAML_LINES + 10))
    parse_yaml("spec.yaml", YAML_SHAPES[shape](MAX_YAML_LINES // 4))  # a quarter of the bound reads


def test_a_json_document_is_refused_by_its_count_of_values_before_the_parse():
    from k3plan.errors import K3PlanError
    from k3plan.safeparse import MAX_NODES, parse_json

    with pytest.raises(K3PlanError, match=r"more than 100,000 values; expected a document of at most 100,000"):
        parse_json("record.json", "[" + "1," * MAX_NODES + "1]")
    assert len(parse_json("record.json", "[" + "1," * (MAX_NODES // 2) + "1]")) == MAX_NODES // 2 + 1


@pytest.mark.parametrize("brk", ["\r", "\x85", "\u2028", "\r\n"])
def test_yaml_lines_count_every_line_break_yaml_reads(brk):
    """A spec of 75,000 keys separated by carriage returns (or NEL, LS) read in ~1 s: no '\\n' to count."""
    from k3plan.errors import K3PlanError
    from k3plan.safeparse import parse_yaml

    with pytest.raises(K3PlanError, match=r"more than 20,000 lines, commas and brackets"):
        parse_yaml("spec.yaml", brk.join(f"k{i}: {i}" for i in range(25_000)))


def test_a_flow_nesting_behind_an_apostrophe_is_refused_before_the_composer():
    """`x: it's` opens no string to YAML, but the scan that skips strings paired its apostrophe with one in `b'c`
    and saw no bracket between: 500,000 nested '[' crashed libyaml's composer (SIGSEGV, exit 139). The nesting is now
    read from libyaml's own events (no recursion) where the text holds more than 64 openers."""
    from k3plan.errors import K3PlanError
    from k3plan.safeparse import parse_yaml

    hidden = "x: it's\ny: " + "[" * 9_000 + "]" * 9_000 + "\nz: b'c\n"
    with pytest.raises(K3PlanError, match=r"nests deeper than 64 levels; expected a plain YAML document$"):
        parse_yaml("spec.yaml", hidden)
    assert parse_yaml("spec.yaml", "x: it's\ny: " + "[" * 60 + "]" * 60 + "\nz: b'c\n")["z"] == "b'c"
