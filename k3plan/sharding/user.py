"""User ShardSpecs: ``FILE.yaml`` (tensor-name regex -> spec) or ``module:function``.

YAML::

    shardspecs:
      'language_model\\.lm_head\\.weight': [tp, null]
      '.*\\.q_proj\\.weight': [tp, null]

A spec lists one entry per checkpoint dimension of the tensor (experts: with the leading expert
axis): null (replicated), a mesh axis (tp, dp) or alias (ep), or a list of them. Patterns are
full-matched against inventory names, first match wins; unmatched tensors follow the stack's
rules. A callable returns {tensor name: spec} directly, so a team can point k3plan at its loader.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path


from k3plan.errors import K3PlanError
from k3plan.models.inventory import TensorInventory
from k3plan.specfile import read_yaml_mapping


def _check_spec(where: str, spec) -> tuple:
    if not isinstance(spec, (list, tuple)) or not all(
        e is None or isinstance(e, str) or (isinstance(e, (list, tuple)) and all(isinstance(a, str) for a in e))
        for e in spec
    ):
        raise K3PlanError(f"{where}: expected a list of null, a mesh axis name, or a list of names; got {spec!r}")
    return tuple(tuple(e) if isinstance(e, list) else e for e in spec)


def load_user_specs(ref: str, inventory: TensorInventory) -> dict[str, tuple]:
    """-> {inventory tensor name: partition}."""
    if ":" in ref and not Path(ref).exists():
        mod_name, _, fn_name = ref.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), fn_name)
        except (ImportError, AttributeError) as err:
            raise K3PlanError(f"--shardspecs {ref}: cannot load {fn_name!r} from module {mod_name!r}: {err}") from None
        raw = fn()
        if not isinstance(raw, dict):
            raise K3PlanError(f"--shardspecs {ref}: the callable must return a dict of tensor name -> spec")
        known = {t.name for t in inventory.text}
        unknown = [n for n in raw if n not in known]
        if unknown:
            raise K3PlanError(f"--shardspecs {ref}: {len(unknown)} name(s) not in the inventory, e.g. {unknown[0]!r}")
        return {n: _check_spec(f"--shardspecs {ref} [{n}]", s) for n, s in raw.items()}
    path = Path(ref).expanduser()
    if not path.is_file():
        raise K3PlanError(f"--shardspecs {ref}: no such file (expected FILE.yaml or module:function)")
    data = read_yaml_mapping(f"--shardspecs {path}", path)
    if not isinstance(data.get("shardspecs"), dict):
        raise K3PlanError(f"--shardspecs {path}: expected a mapping with a 'shardspecs' key of pattern -> spec")
    rules = []
    for pattern, spec in data["shardspecs"].items():
        try:
            rules.append((re.compile(pattern), _check_spec(f"--shardspecs {path} [{pattern}]", spec)))
        except re.error as err:
            raise K3PlanError(f"--shardspecs {path}: bad pattern {pattern!r}: {err}") from None
    out = {}
    for t in inventory.text:
        for rx, spec in rules:
            if rx.fullmatch(t.name):
                out[t.name] = spec
                break
    if rules and not out:
        raise K3PlanError(f"--shardspecs {path}: no pattern matches any tensor of the model")
    return out
