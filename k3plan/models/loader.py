"""Load a model from a bundled name, a config.json path, or a folder holding one."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from k3plan.errors import K3PlanError
from k3plan.models.families import family_for, supported
from k3plan.models.inventory import TensorInventory
from k3plan.models.spec import ModelSpec
from k3plan.resources import data_dir
from k3plan.safeparse import not_a_file, parse_json, read_text
from k3plan.structs import Frozen, replace

BUNDLED_DIR = data_dir("models/bundled")
DEFAULT_MODEL = "kimi-k3"
# A sanity bound, not a model fact: K3's checkpoint is ~1.5 TB; a config whose weights come to more
# than a pebibyte is a typo, and past ~2^63 bytes the array-first code's int64 columns overflow.
MAX_CHECKPOINT_BYTES = 2**50


class Model(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    __coerce__ = False

    spec: ModelSpec
    inventory: TensorInventory
    notes: tuple[str, ...]
    # config fields set over the config it was built from (load_model's ``overrides``); () for the config as it is
    overrides: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name


def bundled_models() -> list[str]:
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / "config.json").is_file())


def bundled_revisions(name: str) -> frozenset[str]:
    """The Hugging Face revisions a bundled model's config was read at: the keys of its provenance.json's
    ``revisions_cited`` (each with the public copies that pin it); empty where the provenance cites none."""
    path = BUNDLED_DIR / name / "provenance.json"
    if name not in bundled_models() or not path.is_file():
        return frozenset()
    cited = parse_json(str(path), read_text(str(path), path)).get("revisions_cited")
    return frozenset(cited) if isinstance(cited, dict) else frozenset()


def resolve_config_path(ref: str) -> tuple[str, Path]:
    """-> (display name, config.json path)."""
    if ref in bundled_models():  # a plain name; an absolute path would escape BUNDLED_DIR / ref
        return ref, BUNDLED_DIR / ref / "config.json"
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise K3PlanError(f"model {ref!r}: folder has no config.json")
        return path.name, path / "config.json"
    if path.is_file():
        return path.parent.name if path.name == "config.json" else path.stem, path
    if "/" in ref or ref.endswith(".json"):
        what = not_a_file(path)
        raise K3PlanError(f"model {ref!r}: {'no such file or folder' if what == 'no such file' else what}")
    raise K3PlanError(f"unknown model {ref!r}; known: {', '.join(bundled_models())} (or a config.json path)")


def read_config(path: Path) -> dict:
    raw = parse_json(str(path), read_text(str(path), path))
    if not isinstance(raw, dict):
        raise K3PlanError(f"{path}: expected a JSON object at the top level")
    return raw


# the config.json fields an override may set (``load_model``'s ``overrides``): whole numbers the families read
# straight into the spec (the decoder layers, how many of them are dense before the MoE ones), whose whole effect is
# the spec's. A serve command's config override (an engine's own reading of it, in its folder) is priced only over
# these. Not max_position_embeddings: vLLM's own longest context may scale it by the rope factor at older releases
# (the config's rope_scaling read beside it), which k3plan does not read, so an override of it is refused
OVERRIDABLE = ("num_hidden_layers", "first_k_dense_replace")
Overrides = tuple[tuple[str, int], ...]


def overridden(raw: dict, overrides: Overrides, source: str) -> dict:
    """``raw`` with ``overrides`` (field -> a whole number, of ``OVERRIDABLE``) set at its top level, as a Hugging
    Face config's update() sets them; a config whose text model reads a ``text_config`` of its own is refused (a
    top-level field is not the text model's)."""
    for key, value in overrides:
        if key not in OVERRIDABLE or isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise K3PlanError(
                f"{source}: override {key}={value!r}: expected a whole number for one of {', '.join(OVERRIDABLE)}"
            )
    if overrides and isinstance(raw.get("text_config"), dict):
        raise K3PlanError(
            f"{source}: override of {', '.join(k for k, _ in overrides)}: the config's text model reads its own "
            "text_config, which a top-level field does not reach; not priced"
        )
    return {**raw, **dict(overrides)}


@lru_cache(maxsize=16)
def load_model(ref: str = DEFAULT_MODEL, overrides: Overrides = ()) -> Model:
    """The model of a bundled name or config.json path; ``overrides``: config fields set over it before it is built
    (``overridden``), the name kept (the model's rules follow it), the overrides in its notes."""
    name, path = resolve_config_path(ref)
    raw = overridden(read_config(path), overrides, str(path))
    family = family_for(raw)
    if family is None:
        got = raw.get("architectures") or raw.get("model_type") or "nothing"
        raise K3PlanError(f"{path}: unsupported architecture {got!r}; supported: {supported()}")
    spec = family.parse(raw, name=name, source=str(path))
    inventory, notes = family.inventory(spec, raw)
    if inventory.checkpoint_bytes > MAX_CHECKPOINT_BYTES:
        raise K3PlanError(
            f"{path}: the weights would take {inventory.checkpoint_bytes:.3g} bytes; expected at most "
            f"{MAX_CHECKPOINT_BYTES:.3g} (check hidden_size, num_experts and the intermediate sizes)"
        )
    if overrides:
        said = ", ".join(f"{k} {v:,}" for k, v in overrides)
        # a bundled config by its place in the package (the answer is the same from any folder or install)
        shown = f"k3plan/models/bundled/{name}/config.json" if path == BUNDLED_DIR / name / "config.json" else path
        notes = (*notes, f"built from {shown} with {said} set over it")
    spec = replace(spec, notes=notes)
    return Model(spec=spec, inventory=inventory, notes=notes, overrides=overrides)
