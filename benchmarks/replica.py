"""A header-exact synthetic replica of the released K3 checkpoint, for the census benchmarks.

96 shards named ``model-000NN-of-000096.safetensors`` (one decoder layer a shard, then globals,
projector, vision, as in the release) holding the 497,220 tensor headers the K3 inventory expands
to, plus ``model.safetensors.index.json`` and K3's ``config.json``. Data sections are sparse holes
(``truncate``): the files have their true ~1.56 TB total size but take no blocks, and a census only
ever reads headers. Needs a filesystem with sparse files (ext4, xfs, tmpfs).
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

ITEMSIZE = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def write_shard(path: Path, tensors: list[tuple[str, str, tuple[int, ...]]]) -> int:
    """-> header bytes. Offsets contiguous in header order, as safetensors writes them."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        n = ITEMSIZE[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)  # sparse: the data section takes no blocks
    return len(blob)


def build_k3_checkpoint(folder: Path) -> tuple[int, int, int]:
    """-> (shards, tensors, header bytes)."""
    from k3plan.models import load_model
    from k3plan.models.loader import BUNDLED_DIR

    inv = load_model("kimi-k3").inventory
    groups: dict[str, list] = {}
    for t in inv.tensors:
        if t.layer is not None:
            key = f"layer{t.layer:03d}"
        elif t.kind == "vision":
            key = "zz_vision" if t.name.startswith("vision_tower.") else "zy_projector"
        else:
            key = "zx_global"
        groups.setdefault(key, []).extend(t.checkpoint_tensors())
    total = len(groups)
    weight_map, header_bytes = {}, 0
    for k, key in enumerate(sorted(groups), 1):
        fname = f"model-{k:05d}-of-{total:06d}.safetensors"
        header_bytes += write_shard(folder / fname, groups[key])
        weight_map.update({name: fname for name, _, _ in groups[key]})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    shutil.copy(BUNDLED_DIR / "kimi-k3" / "config.json", folder / "config.json")
    return total, len(weight_map), header_bytes
