"""Reading JSON and YAML that a user hands k3plan: one guard for every reader.

Python's ``json`` and PyYAML both recurse per nesting level (a few thousand levels raise
``RecursionError``); Python refuses to convert integers of more than 4,300 digits (``ValueError``);
``json`` accepts ``NaN``/``Infinity`` and turns ``1e400`` into ``inf``; YAML aliases can make a
small file expand into a huge tree (and can refer to themselves). Every reader (config.json, spec
YAML, calibration, probe records, baselines) goes through ``parse_json``/``parse_yaml``: the text
is bounded in size, the parse cannot recurse past ``MAX_DEPTH``, and the result is walked once,
without recursion, checking depth, node count, finite floats and integer range. Any problem is a
``K3PlanError`` naming the file, the key path where there is one, and what was expected.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

from k3plan.errors import K3PlanError

MAX_BYTES = 64 * 2**20  # a file read as bytes (a safetensors index, decoded by msgspec at ~1 GB/s)
# Issue 48: a 50 MB input is refused or read in under a second. Parsed documents are bounded by what a parse
# costs, not by what a disk holds: json.loads with its checks takes ~0.6-1.3 us a value and PyYAML's safe loader
# ~5-7 us, so 1M values was a second of JSON and 3-190 s of YAML (a flow list of 26M items) before the value
# count refused it. The largest document k3plan ships is a 32 KB baseline (~2,000 values), its largest YAML a
# 28 KB stack (320 lines): the bounds below are 30x those and keep every parse near a tenth of a second.
MAX_TEXT_BYTES = 8 * 2**20  # a JSON document (config.json, a probe record, a baseline)
MAX_YAML_BYTES = 2**20  # a YAML document (a spec, a stack, a calibration, a benchmark, ShardSpecs)
MAX_DEPTH = 64  # nesting levels; real configs and specs nest fewer than 10
MAX_NODES = 100_000  # values in one file, before the parse (counted) and after it (YAML aliases expanded)
# YAML's lines, commas and brackets outside quoted scalars and comments, counted before the parse (a line of
# `key: value` is two values and ~15 us with the duplicate-key check: 20,000 lines ~0.3 s; the largest stack: 320)
MAX_YAML_LINES = 20_000
MAX_INT = 2**63 - 1  # every count and byte size fits an int64


def not_a_file(path: Path) -> str:
    """What ``path`` is when it is not a regular file, for a reader's one-line error: 'no such file', 'a
    folder', 'a FIFO', 'a device' (/dev/null was 'no such file'), or 'not a regular file'."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "no such file"
    return "a folder" if stat.S_ISDIR(mode) else not_regular(mode)


def not_regular(mode: int) -> str:
    """What a file of ``mode`` that is neither regular nor a folder is, in a reader's words."""
    return "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) else "not a regular file"


def open_regular(label: str, path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (symlinks followed); K3PlanError naming
    `label` otherwise. Opened without blocking and checked with fstat: a FIFO (``mkfifo x.json`` in a
    --probes folder) blocked a plain open for ever, and a link to /dev/zero read until memory ran out."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise K3PlanError(f"{label}: cannot read: {err.strerror or err}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise K3PlanError(f"{label}: is a folder; expected a file")
        raise K3PlanError(f"{label}: {not_regular(mode)}; expected a regular file")
    return os.fdopen(fd, "rb")


def read_bytes(label: str, path: Path, limit: int = MAX_BYTES) -> bytes:
    """The regular file's bytes, at most ``limit`` whatever its size claims (/proc files say 0): a larger file is
    refused after ``limit`` + 1 bytes are read, whatever its size."""
    with open_regular(label, path) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise K3PlanError(f"{label}: cannot read: {err.strerror or err}") from None
    if len(data) > limit:
        raise K3PlanError(_too_large(label, "file", limit))
    return data


def _too_large(label: str, what: str, limit: int) -> str:
    return f"{label}: more than {limit:,} bytes; expected a {what} of at most {limit:,} bytes ({limit / 2**20:g} MiB)"


def read_text(label: str, path: Path, limit: int = MAX_TEXT_BYTES) -> str:
    """The file as UTF-8 text, at most ``limit`` bytes; K3PlanError naming `label` otherwise."""
    data = read_bytes(label, path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise K3PlanError(f"{label}: not UTF-8 text (byte {err.start}); expected a text file") from None


# YAML's quoted scalars and comments, each branch a single run of a character class (unrolled: no per-character
# alternation, which cost ~1 s a MB in re's backtracking stack)
_YAML_SKIP = re.compile(r"""'[^']*(?:''[^']*)*'|"[^"\\]*(?:\\.[^"\\]*)*"|#[^\n]*""")
# UTF-8 puts no ASCII byte inside a multi-byte character: these tables keep a text's brackets, commas (and quotes)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{},")
_NOT_JSON_SYNTAX = bytes(b for b in range(256) if b not in b'[]{}",')
_NOT_YAML_SYNTAX = bytes(b for b in range(256) if b not in b"[]{},\n")
_SMALL = 1 << 16  # brackets counted in a Python loop below this many; numpy above, a chunk at a time
_CHUNK = 1 << 22


def _outside_strings(text: str, skip: re.Pattern | None = None) -> bytes:
    """The brackets and commas of ``text`` outside its strings (and YAML comments), in order. Linear by
    construction (a 50 MB config.json took ~50 s in a per-character regex alternation): JSON's escaped
    backslashes, then escaped quotes go (bytes.replace), so every quote left opens or closes a string;
    bytes.translate keeps the brackets, commas and quotes; every other piece between quotes is outside. YAML's
    quoted scalars and comments go by a regex whose every branch is one character-class run."""
    if skip is not None:
        return skip.sub("", text).encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    data = text.encode("utf-8", "surrogatepass")
    syntax = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_JSON_SYNTAX)
    return b"".join(syntax.split(b'"')[0::2])


def json_strings(data: bytes) -> int:
    """How many strings a valid JSON text (as bytes) holds, keys included: its quotes less the escaped ones, halved.
    Linear bytes methods (an object of strings to strings decoded by msgspec keeps a key given twice once: its
    entries are this count halved)."""
    return data.replace(b"\\\\", b"").replace(b'\\"', b"").count(b'"') // 2


def _bracket_depth(text: str, skip: re.Pattern | None = None) -> int:
    """Deepest bracket nesting, strings (and YAML comments) skipped; a scan, not a parse. YAML's
    scanner slows with each open flow level, so deep '[[[' is refused before PyYAML sees it.
    A closer without an opener counts as nothing (the depth stays at 0)."""
    return _depth(_outside_strings(text, skip).translate(None, b","))


def _depth(brackets: bytes) -> int:
    """The deepest nesting of a run of brackets (past MAX_DEPTH on a long run: the depth where it passed it)."""
    if len(brackets) <= _SMALL:
        depth = deepest = 0
        for ch in brackets:
            depth = depth + 1 if ch in b"[{" else max(0, depth - 1)
            deepest = max(deepest, depth)
        return deepest
    import numpy as np  # each opener a +1, each closer a -1 (bit 1 of '[' and '{' is set, of ']' and '}' clear)

    code = np.frombuffer(brackets, dtype=np.uint8)
    depth = deepest = 0
    for at in range(0, len(code), _CHUNK):
        walk = depth + np.cumsum((code[at : at + _CHUNK] & 2).astype(np.int32) - 1, dtype=np.int64)
        held = walk - np.minimum(np.minimum.accumulate(walk), 0)  # the walk held at 0: less its lowest below 0
        deepest = max(deepest, int(held.max()))
        if deepest > MAX_DEPTH:  # refused whatever the rest holds
            break
        depth = int(held[-1])
    return deepest


def _bad_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows; expected a finite number")


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: an object that gives a key twice is refused (json keeps the last silently: a
    second "decode" in a record, a second "num_hidden_layers" in a config.json, would win without a word)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def parse_json(label: str, text: str) -> Any:
    if len(text) > MAX_TEXT_BYTES:
        raise K3PlanError(_too_large(label, "JSON document", MAX_TEXT_BYTES))
    outside = _outside_strings(text)
    if outside.count(b",") >= MAX_NODES:  # as many values at least: check_tree would refuse it after the parse
        raise K3PlanError(_too_many(label, MAX_NODES))
    if _depth(outside.translate(None, b",")) > MAX_DEPTH:
        raise K3PlanError(f"{label}: nests deeper than {MAX_DEPTH} levels; expected a plain JSON document")
    import json

    try:
        data = json.loads(text, parse_constant=_bad_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as err:
        raise K3PlanError(
            f"{label}: key {err.args[0]!r} is given twice in one object; expected each key once"
        ) from None
    except json.JSONDecodeError as err:
        raise K3PlanError(f"{label}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except (ValueError, RecursionError) as err:  # >4300-digit integers, NaN/Infinity
        raise K3PlanError(f"{label}: invalid JSON: {_why(err)}") from None
    check_tree(label, data)
    return data


def _too_many(label: str, limit: int) -> str:
    return f"{label}: more than {limit:,} values; expected a document of at most {limit:,}"


def parse_yaml(label: str, text: str) -> Any:
    if len(text) > MAX_YAML_BYTES:
        raise K3PlanError(_too_large(label, "YAML document", MAX_YAML_BYTES))
    # Counted on the raw text, quoted scalars and comments included: a quote inside a plain scalar (`x: it's`) opens
    # no string to YAML, so a scan that skips strings could be led to skip the whole document
    openers = text.count("[") + text.count("{")
    breaks = sum(text.count(c) for c in "\n\r\x85\u2028\u2029")  # YAML's line breaks (1.1, as PyYAML reads them)
    if breaks + text.count(",") + openers >= MAX_YAML_LINES:  # each opens a value or two (a line: `key: value`)
        raise K3PlanError(
            f"{label}: more than {MAX_YAML_LINES:,} lines, commas and brackets; "
            f"expected a spec of at most {MAX_YAML_LINES:,}"
        )
    too_deep = f"{label}: nests deeper than {MAX_DEPTH} levels; expected a plain YAML document"
    if _block_prefix(text) > MAX_BLOCK_PREFIX:
        raise K3PlanError(too_deep)
    if openers > MAX_DEPTH and (_bracket_depth(text, _YAML_SKIP) > MAX_DEPTH or _flow_depth(text) > MAX_DEPTH):
        raise K3PlanError(too_deep)
    import yaml

    try:
        data = yaml.load(text, Loader=_loader())  # libyaml's safe loader, or a depth-limited SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or _first_line(err)
        raise K3PlanError(f"{label}: invalid YAML{where}: {problem}") from None
    except _TooDeep:
        raise K3PlanError(f"{label}: nests deeper than {MAX_DEPTH} levels; expected a plain YAML document") from None
    except (ValueError, TypeError, RecursionError, OverflowError) as err:  # >4300-digit ints, odd tags
        raise K3PlanError(f"{label}: invalid YAML: {_why(err)}") from None
    check_tree(label, data)
    return data


class _TooDeep(Exception):
    pass


def _flow_depth(text: str) -> int:
    """The deepest nesting of collections libyaml's parser reads in ``text``, stopping past MAX_DEPTH. Its event
    parser keeps its own stack (no recursion); the composer that builds the tree recurses in C a level a node, and
    a flow nesting hidden from the string-skipping scan (`x: it's` then 500,000 '[' then `b'c`) crashed it
    (SIGSEGV). Run only where the text holds more than MAX_DEPTH openers, the least such a nesting needs."""
    import yaml

    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                deepest = max(deepest, depth)
                if deepest > MAX_DEPTH:
                    break
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        pass  # the load that follows words the error
    return deepest


_LOADER = None


def _block_prefix(text: str) -> int:
    """Widest run of indentation and block indicators ('- ', '? ', ': ') opening a line. A block
    collection nests only by opening further right than its parent, so this bounds the block depth
    before libyaml's composer (which recurses in C, a level a node) sees the text."""
    return max((len(m) for m in _PREFIX.findall(text)), default=0)


# 4 columns a level for 64 levels: far wider than any real spec, far shallower than the C stack
MAX_BLOCK_PREFIX = 4 * MAX_DEPTH
_PREFIX = re.compile(r"^(?:[ \t]|[-?:](?=[ \t]|$))+", re.MULTILINE)


def _loader():
    """A safe loader that refuses a mapping giving a key twice (PyYAML keeps the last silently: a second
    `decode:` in a calibration won without a word). libyaml's CSafeLoader (a tenth of the pure-Python parse
    time) once _block_prefix and _bracket_depth have bounded the nesting; where PyYAML was built without
    libyaml, a SafeLoader that stops composing past MAX_DEPTH (its composer recurses a level a node)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class UniqueKeys:
            def flatten_mapping(self, node):
                if not getattr(node, "_k3_keys_checked", False):  # its own keys, before merges (<<) join them
                    node._k3_keys_checked = True
                    seen = set()
                    for key_node, _ in node.value:
                        if key_node.tag == "tag:yaml.org,2002:merge":
                            continue  # a key a merge brings may be given again: that is what `<<` is for
                        key = self.construct_object(key_node)
                        try:
                            duplicate = key in seen
                        except TypeError:  # an unhashable key: the constructor's own error says so
                            continue
                        if duplicate:
                            raise yaml.constructor.ConstructorError(
                                None,
                                None,
                                f"key {key!r} is given twice in one mapping; expected each key once",
                                key_node.start_mark,
                            )
                        seen.add(key)
                return super().flatten_mapping(node)

        if getattr(yaml, "CSafeLoader", None) is not None:

            class UniqueKeysCLoader(UniqueKeys, yaml.CSafeLoader):
                pass

            _LOADER = UniqueKeysCLoader
            return _LOADER

        class DepthLimitedLoader(UniqueKeys, yaml.SafeLoader):
            def compose_node(self, parent, index):
                self._k3_depth = getattr(self, "_k3_depth", 0) + 1
                try:
                    if self._k3_depth > MAX_DEPTH:
                        raise _TooDeep()
                    return super().compose_node(parent, index)
                finally:
                    self._k3_depth -= 1

        _LOADER = DepthLimitedLoader
    return _LOADER


def check_tree(label: str, data: Any) -> None:
    """Walk a loaded document without recursion: depth, size, finite floats, int64 integers."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    nodes = 0
    while stack:
        value, where, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise K3PlanError(
                f"{label}: more than {MAX_NODES:,} values (YAML aliases expand); expected a plain document"
            )
        if depth > MAX_DEPTH:
            raise K3PlanError(f"{label}: nests deeper than {MAX_DEPTH} levels at {where or 'the top'}")
        if isinstance(value, str):
            _check_text(label, where, value)
            continue
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise K3PlanError(f"{label}: {_key(where)} is {value!r}; expected a finite number")
        elif isinstance(value, int):
            if abs(value) > MAX_INT:
                raise K3PlanError(
                    f"{label}: {_key(where)} has {len(str(abs(value)))} digits; expected an integer below 2^63"
                )
        elif isinstance(value, dict):
            for k, v in value.items():
                key = f"{where}.{k}" if where else str(k)
                if isinstance(k, str):
                    _check_text(label, key, k)
                stack.append((v, key, depth + 1))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                stack.append((v, f"{where}[{i}]", depth + 1))


# C0 controls but tab, newline and carriage return; DEL; C1 controls. No spec, config or record needs one,
# and printed (a hardware name, a source) an ESC sequence would recolour, move or retitle the user's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _check_text(label: str, where: str, text: str) -> None:
    """A string value, or a key (``where`` then ends with it), free of control characters."""
    m = _CONTROL.search(text)
    if m:
        raise K3PlanError(f"{label}: {_key(where)} holds the control character {m.group()!r}; expected printable text")


def _key(where: str) -> str:
    return f"key {where!r}" if where else "the document"


def _why(err: BaseException) -> str:
    if "integer string conversion" in str(err):
        return "an integer with thousands of digits; expected an integer below 2^63"
    return _first_line(err)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
