"""Census of a safetensors checkpoint from its headers alone (never the tensor data).

A safetensors file starts with an 8-byte little-endian header length N, then N bytes of JSON:
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``, then the
data region. Names are compared with the inventory's checkpoint names as they are (experts expanded
from their ``{e}`` template, see ``inventory.checkpoint_table``); no renaming is applied.

Speed (issue 12): a K3 checkpoint has 497,220 tensors in 76 MB of headers. Each header is decoded
by msgspec straight into small typed structs (types and signs checked in C), then ONE Python loop
a tensor checks it against the file and the inventory and counts it; no other per-tensor object is
built. Shards are read ahead by a thread pool (the decode holds the GIL; the reads need not).

Checks (issue 11): every header must agree with its file -- dtype known, shape of non-negative
ints, ``data_offsets`` of non-negative ints whose span is dtype x shape bytes, spans contiguous and
non-overlapping and covering exactly the data region, ``__metadata__`` an object of strings, no
tensor in two shards. A mismatch is a K3PlanError naming the shard and the tensor (exit 2).
"""

from __future__ import annotations

import gc
import math
import operator
import os
import re
import struct
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import compress, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NamedTuple, cast

import msgspec

from k3plan.errors import K3PlanError
from k3plan.models.inventory import TensorInventory, checkpoint_table
from k3plan.safeparse import json_strings, not_a_file, open_regular, read_bytes

if TYPE_CHECKING:
    from k3plan.models.census_result import CensusComparison, CensusResult

MAX_HEADER_BYTES = 512 * 2**20  # a header larger than this is corrupt, not big (safetensors: 100 MB)
READ_AHEAD_THREADS = 8

# Bits an element of each safetensors dtype (the Dtype enum of huggingface/safetensors,
# safetensors/src/tensor.rs); F4/F6 are sub-byte, so a tensor's bits must be a whole number of bytes.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

_NonNeg = Annotated[int, msgspec.Meta(ge=0)]


class _Entry(msgspec.Struct, gc=False):
    """One header entry as decoded; fields default to None so that ``__metadata__`` (other keys)
    decodes too -- a tensor lacking a field is caught in the loop."""

    dtype: str | None = None
    shape: list[_NonNeg] | None = None
    data_offsets: tuple[_NonNeg, _NonNeg] | None = None


class _KnownEntry(_Entry, gc=False):
    """The same entry with its dtype one of DTYPE_BITS, checked in C, each decoded to one shared string (not a new one
    a tensor); a header this refuses is decoded again as ``_Entry``, so that the checks name what is wrong as before."""

    dtype: Literal[tuple(DTYPE_BITS)] | None = None  # type: ignore[valid-type]


class _Meta(msgspec.Struct, gc=False):
    metadata: dict[str, str] | None = msgspec.field(name="__metadata__", default=None)


class _Index(msgspec.Struct, gc=False):
    weight_map: msgspec.Raw  # decoded apart: its entries are counted against its keys (a key given twice)


_INDEX = msgspec.json.Decoder(_Index)
_WEIGHT_MAP = msgspec.json.Decoder(dict[str, str])
_DTYPE, _SHAPE, _OFFSETS = (operator.attrgetter(f) for f in ("dtype", "shape", "data_offsets"))
_BEGIN, _END = operator.itemgetter(0), operator.itemgetter(1)
_DTYPE_WANTED, _SHAPE_WANTED = operator.itemgetter(0), operator.itemgetter(1)
_ENTRIES = msgspec.json.Decoder(dict[str, _Entry])
_KNOWN_ENTRIES = msgspec.json.Decoder(dict[str, _KnownEntry])
_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENTRY = msgspec.json.Decoder(_Entry)
_META = msgspec.json.Decoder(_Meta)
_META_MAP = msgspec.json.Decoder(dict[str, str])


class HeaderTensor(NamedTuple):
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


def _oneline(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def read_blob(path: Path) -> tuple[bytes, int]:
    """-> (header JSON bytes, data region bytes), checking the length prefix against the file."""
    try:
        with open_regular(str(path), path) as f:  # a FIFO named *.safetensors blocked a plain open for ever
            head = f.read(8)
            if len(head) < 8:
                raise K3PlanError(f"{path}: truncated safetensors file (no 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise K3PlanError(f"{path}: corrupt safetensors header: length {n:,} B but file is {size:,} B")
            blob = f.read(n)
    except OSError as err:
        raise K3PlanError(f"{path}: cannot read: {err}") from None
    return blob, size - 8 - n


def decode(path: Path, blob: bytes) -> dict[str, _Entry]:
    """The header's entries (``__metadata__`` included, as an empty entry), types checked."""
    try:
        return _decode(path, blob)
    except RecursionError:  # msgspec's decoder recurses a level a nested value
        raise K3PlanError(
            f"{path}: corrupt safetensors header: values nested too deep to decode; expected tensor entries of dtype, "
            "shape and data_offsets"
        ) from None


def _decode(path: Path, blob: bytes) -> dict[str, _Entry]:
    bad = f"{path}: corrupt safetensors header"
    try:
        entries = cast(dict[str, _Entry], _KNOWN_ENTRIES.decode(blob))
    except msgspec.ValidationError:  # an unknown dtype (named by shard()), or malformed
        entries = _decode_any(path, blob)
    except msgspec.DecodeError as err:
        raise K3PlanError(f"{bad}: not valid JSON ({_oneline(str(err))})") from None
    if "__metadata__" in entries and not _metadata_first_and_flat(blob):
        try:
            _META.decode(blob)
        except msgspec.ValidationError as err:
            raise K3PlanError(f"{bad}: __metadata__ must map strings to strings ({_oneline(str(err))})") from None
    return entries


def _decode_any(path: Path, blob: bytes) -> dict[str, _Entry]:
    """A header the fast decoder refused, decoded as before it (any dtype string), to name what is wrong."""
    try:
        return _ENTRIES.decode(blob)
    except msgspec.ValidationError:
        return _decode_slow(path, blob)  # to name the tensor (or metadata keys that look like fields)
    except msgspec.DecodeError as err:
        raise K3PlanError(f"{path}: corrupt safetensors header: not valid JSON ({_oneline(str(err))})") from None


_META_FIRST = re.compile(rb'\s*\{\s*"__metadata__"\s*:\s*\{')


def _metadata_first_and_flat(blob: bytes) -> bool:
    """True when ``__metadata__`` is the header's first key (as safetensors writes it) and its
    object, up to the first ``}``, decodes as strings to strings: then that ``}`` closed it (a cut
    inside a string or a nested value would not decode) and the second pass over the whole header
    is not needed. False means: check it the long way."""
    m = _META_FIRST.match(blob)
    if m is None or blob.find(b'"__metadata__"', m.end()) != -1:  # a second one: JSON's last one wins
        return False
    end = blob.find(b"}", m.end())
    try:
        _META_MAP.decode(blob[m.end() - 1 : end + 1])
    except msgspec.DecodeError:
        return False
    return True


def _decode_slow(path: Path, blob: bytes) -> dict[str, _Entry]:
    """Entry by entry: the first one that does not decode is named in the error."""
    try:
        raw = _RAW.decode(blob)
    except msgspec.ValidationError as err:
        raise K3PlanError(
            f"{path}: corrupt safetensors header: expected a JSON object ({_oneline(str(err))})"
        ) from None
    except msgspec.DecodeError as err:  # a typed decode stops at the first bad value, before a later syntax error
        raise K3PlanError(f"{path}: corrupt safetensors header: not valid JSON ({_oneline(str(err))})") from None
    out = {}
    for name, item in raw.items():
        if name != "__metadata__":
            try:
                out[name] = _ENTRY.decode(item)
            except msgspec.ValidationError as err:
                raise _bad(path, name, f"is malformed: {_oneline(str(err))}") from None
    out["__metadata__"] = _Entry()
    return out


def _bad(path: Path, name: str, what: str) -> K3PlanError:
    return K3PlanError(f"{path}: corrupt safetensors header: tensor {_oneline(repr(name))} {what}")


def _check_spans(
    path: Path,
    entries: dict[str, _Entry],
    spans: list[tuple[int, int]],
    data_bytes: int,
    begins: list[int] | None = None,
    ends: list[int] | None = None,
) -> None:
    """Spans sorted must tile [0, data_bytes) exactly: no gap, no overlap, nothing past the end. Every span's
    size is known non-negative (checked against dtype x shape first), so spans that tile in header order (as
    safetensors writes them: data order) are already sorted, and the sort is skipped."""
    if spans:
        if begins is None or ends is None:
            begins, ends = list(map(_BEGIN, spans)), list(map(_END, spans))
        if begins[0] == 0 and begins[1:] == ends[:-1]:
            _check_end(path, entries, ends[-1], data_bytes)
            return
    spans = sorted(spans)
    pos = spans[-1][1] if spans else 0
    if spans and (spans[0][0] != 0 or list(map(_BEGIN, spans[1:])) != list(map(_END, spans[:-1]))):
        pos = 0
        for begin, end in spans:
            if begin != pos:
                name = next(n for n, e in entries.items() if e.data_offsets == (begin, end))
                what = (
                    "overlaps the tensor before it" if begin < pos else f"leaves a gap of {begin - pos:,} B before it"
                )
                raise _bad(path, name, f"data_offsets [{begin}, {end}] {what}")
            pos = end
    _check_end(path, entries, pos, data_bytes)


def _check_end(path: Path, entries: dict[str, _Entry], pos: int, data_bytes: int) -> None:
    if pos != data_bytes:
        if pos > data_bytes:
            name = next(n for n, e in entries.items() if e.data_offsets and e.data_offsets[1] == pos)
            raise _bad(path, name, f"data_offsets end at {pos:,} B, beyond the {data_bytes:,} B data region")
        raise K3PlanError(
            f"{path}: corrupt safetensors header: tensors cover {pos:,} B of a {data_bytes:,} B data region"
        )


def read_header(path: Path) -> list[HeaderTensor]:
    """Every tensor of one file, checked (a convenience API; the census does not build these)."""
    blob, data_bytes = read_blob(path)
    result = _Scan()
    entries = decode(path, blob)
    result.shard(path, entries, data_bytes)
    out = []
    for n, e in entries.items():
        if n == "__metadata__":
            continue
        assert e.dtype is not None and e.shape is not None and e.data_offsets is not None  # shard() checked them
        out.append(HeaderTensor(n, e.dtype, tuple(e.shape), e.data_offsets[1] - e.data_offsets[0], path.name))
    return out


class _Scan:
    """Running totals over shards, and the comparison with the inventory as shards arrive."""

    def __init__(self, expected: dict[str, tuple[str, list[int]]] | None = None) -> None:
        self.expected = expected
        self.remaining = dict(expected) if expected is not None else None
        self.totals: dict[str, list[int]] = {}  # dtype -> [tensors, bytes]
        self.seen: set[str] = set()
        self.first: dict[str, _Entry] | None = None  # the first shard's tensors: its keys are its names, hashed
        self.extra: list[str] = []
        self.shape_mismatch: list[tuple[str, list[int], list[int]]] = []
        self.dtype_mismatch: list[tuple[str, str, str]] = []

    def shard(self, path: Path, entries: dict[str, _Entry], data_bytes: int) -> None:
        """Check one shard's entries and count them. K3 has ~500k tensors, so every pass over them
        is a C-level map or comparison; Python loops run only to name what a failed check found."""
        entries.pop("__metadata__", None)  # checked by decode()
        if not entries:
            _check_spans(path, entries, [], data_bytes)
            return
        names = list(entries)
        values = list(entries.values())
        dtypes = list(map(_DTYPE, values))
        shapes = list(map(_SHAPE, values))
        offsets = list(map(_OFFSETS, values))
        n = len(values)
        try:  # a missing field (None) or an unknown dtype fails in here; then name the tensor
            begins, ends = list(map(_BEGIN, offsets)), list(map(_END, offsets))
            sizes = list(map(operator.sub, ends, begins))
            if dtypes.count(dtypes[0]) == n:  # one dtype (most shards): no lookup or count a tensor
                kinds: dict[str, int] = {dtypes[0]: n}
                each = DTYPE_BITS[dtypes[0]]
                if each % 8 == 0:  # whole bytes an element: compare bytes, no x 8 a tensor
                    have, want = sizes, list(map(operator.mul, map(math.prod, shapes), repeat(each // 8, n)))
                else:
                    have = list(map(operator.mul, sizes, repeat(8, n)))
                    want = list(map(operator.mul, map(math.prod, shapes), repeat(each, n)))
            else:
                kinds = Counter(dtypes)
                have = list(map(operator.mul, sizes, repeat(8, n)))
                want = list(map(operator.mul, map(math.prod, shapes), map(DTYPE_BITS.__getitem__, dtypes)))
        except (TypeError, KeyError):
            raise self._diagnose(path, entries) from None
        if have != want:
            i = next(i for i, (h, w) in enumerate(zip(have, want)) if h != w)
            begin, end = offsets[i]
            bits = math.prod(shapes[i]) * DTYPE_BITS[dtypes[i]]
            raise _bad(
                path,
                names[i],
                f"holds {end - begin:,} B at data_offsets [{begin}, {end}] but "
                f"{dtypes[i]} x {shapes[i]} is {bits / 8:,g} B",
            )
        _check_spans(path, entries, offsets, data_bytes, begins, ends)
        if self.first is None:
            self.first = entries  # a one-shard checkpoint builds no set of its names (0.04 s for 500k tensors)
        else:
            seen = self.seen
            if not seen:
                seen.update(self.first)
            if not seen.isdisjoint(names):
                raise _bad(path, next(n for n in names if n in seen), "is also in an earlier shard")
            seen.update(names)
        most = max(kinds, key=kinds.__getitem__)
        others = {d: sum(compress(sizes, map(d.__eq__, dtypes))) for d in kinds if d != most}
        others[most] = data_bytes - sum(others.values())  # the spans tile the data region exactly
        for dtype, n in kinds.items():
            row = self.totals.setdefault(dtype, [0, 0])
            row[0] += n
            row[1] += others[dtype]
        if self.remaining is not None:
            self._compare(self.remaining, names, dtypes, shapes)

    @staticmethod
    def _diagnose(path: Path, entries: dict[str, _Entry]) -> K3PlanError:
        for name, e in entries.items():
            if None in (e.dtype, e.shape, e.data_offsets):
                return _bad(path, name, "lacks a dtype, shape or data_offsets")
            if e.dtype not in DTYPE_BITS:
                return _bad(
                    path, name, f"has unknown dtype {_oneline(repr(e.dtype))}; expected one of {', '.join(DTYPE_BITS)}"
                )
        return K3PlanError(f"{path}: corrupt safetensors header")

    def _compare(
        self,
        remaining: dict[str, tuple[str, list[int]]],
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
    ) -> None:
        wants = list(map(remaining.pop, names, repeat(None, len(names))))
        if None in wants:
            self.extra.extend(n for n, w in zip(names, wants) if w is None)
            keep = [i for i, w in enumerate(wants) if w is not None]
            names, dtypes, shapes = [names[i] for i in keep], [dtypes[i] for i in keep], [shapes[i] for i in keep]
            wants = [wants[i] for i in keep]
        found = cast(list[tuple[str, list[int]]], wants)  # the Nones (extra tensors) are dropped above
        if list(map(_SHAPE_WANTED, found)) != shapes:
            self.shape_mismatch.extend((n, w[1], s) for n, w, s in zip(names, found, shapes) if s != w[1])
        if list(map(_DTYPE_WANTED, found)) != dtypes:
            self.dtype_mismatch.extend((n, w[0], d) for n, w, d in zip(names, found, dtypes) if d != w[0])

    def comparison(self, *, max_listed: int) -> CensusComparison:
        from k3plan.models.census_result import CensusComparison, DtypeMismatch, ShapeMismatch

        # called only for a census against an inventory, which sets both
        assert self.remaining is not None and self.expected is not None
        missing = list(self.remaining)
        expected = len(self.expected)
        return CensusComparison(
            expected_tensors=expected,
            matched=expected - len(missing),
            missing_count=len(missing),
            missing=missing[:max_listed],
            extra_count=len(self.extra),
            extra=self.extra[:max_listed],
            shape_mismatch_count=len(self.shape_mismatch),
            shape_mismatch=[
                ShapeMismatch(name=n, expected=list(w), found=list(g)) for n, w, g in self.shape_mismatch[:max_listed]
            ],
            dtype_mismatch_count=len(self.dtype_mismatch),
            dtype_mismatch=[DtypeMismatch(name=n, expected=w, found=g) for n, w, g in self.dtype_mismatch[:max_listed]],
            ok=not (missing or self.extra or self.shape_mismatch or self.dtype_mismatch),
        )


def _weight_map(index: Path) -> dict[str, str]:
    """The index's weight_map (tensor -> shard file). A tensor named twice is refused: JSON readers keep the last
    entry (transformers' json.load, msgspec), so a shard named only by the first would drop out of the census
    unseen; an index written from a dict (huggingface_hub's save_torch_state_dict: ``tensor_to_filename``) names
    each tensor once."""
    try:
        raw = _INDEX.decode(read_bytes(str(index), index)).weight_map
        weight_map = _WEIGHT_MAP.decode(raw)
    except (msgspec.DecodeError, OSError, RecursionError):
        raise K3PlanError(f"{index}: invalid index (expected JSON with a 'weight_map' object of file names)") from None
    if json_strings(bytes(raw)) != 2 * len(weight_map):  # a key and a file name an entry
        import json

        seen: set[str] = set()
        twice = "?"
        for key, _ in json.loads(bytes(raw), object_pairs_hook=lambda pairs: pairs):
            if key in seen:
                twice = key
                break
            seen.add(key)
        raise K3PlanError(
            f"{index}: weight_map names tensor {_oneline(repr(twice))} twice; expected each tensor once "
            "(JSON keeps the last entry, and a shard only the first names would go unread)"
        )
    return weight_map


def _files_in(folder: Path) -> frozenset[str]:
    """The names of the regular files in ``folder`` (symlinks followed, as Path.is_file does), in one listing."""
    with os.scandir(folder) as entries:
        return frozenset(e.name for e in entries if e.is_file())


def checkpoint_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        what = not_a_file(path)
        raise K3PlanError(f"census: {path}: {'no such file or folder' if what == 'no such file' else what}")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _weight_map(index)
        names = sorted(set(weight_map.values()))  # as strings: sorting 500,000 Paths took seconds
        present = _files_in(path)  # one listing: an index naming 500,000 missing shards took 9 s in a stat each
        missing = [n for n in names if not (n in present if "/" not in n else (path / n).is_file())]
        if missing:
            raise K3PlanError(f"{index}: names {len(missing)} shard(s) that are not there, e.g. {missing[0]}")
        return [path / n for n in names]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise K3PlanError(f"census: {path}: no *.safetensors files and no model.safetensors.index.json")
    return files


def census(
    path: Path,
    inventory: TensorInventory | None = None,
    *,
    max_listed: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> CensusResult:
    """Tensors and bytes by dtype over every shard, each header checked against its file, and
    (with an inventory) what is missing, extra or mis-shaped. ``progress(done, total)`` per shard."""
    files = checkpoint_files(path)
    gc_was_on = gc.isenabled()
    gc.disable()  # ~1M small containers, none cyclic: collections would only rescan them
    try:
        return _census(path, files, inventory, max_listed=max_listed, progress=progress)
    finally:
        if gc_was_on:
            gc.enable()


def _census(
    path: Path,
    files: list[Path],
    inventory: TensorInventory | None,
    *,
    max_listed: int,
    progress: Callable[[int, int], None] | None,
) -> CensusResult:
    scan = _Scan(checkpoint_table(inventory) if inventory is not None else None)
    with ThreadPoolExecutor(max_workers=min(READ_AHEAD_THREADS, len(files))) as pool:
        blobs = pool.map(read_blob, files) if len(files) > 1 else map(read_blob, files)
        for done, (f, (blob, data_bytes)) in enumerate(zip(files, blobs), 1):
            scan.shard(f, decode(f, blob), data_bytes)
            if progress is not None:
                progress(done, len(files))
    from k3plan.models.census_result import CensusResult, DtypeCount

    result = CensusResult(
        path=str(path),
        files=len(files),
        tensors=sum(t for t, _ in scan.totals.values()),
        bytes=sum(b for _, b in scan.totals.values()),
        by_dtype=tuple(DtypeCount(dtype=d, tensors=t, bytes=b) for d, (t, b) in scan.totals.items()),
        comparison=None if inventory is None else scan.comparison(max_listed=max_listed),
    )
    return result
