"""An engine's rules are in its folder only (issue 51, Build item 2): an engine is a folder of k3plan/engines/,
found by the registry, and no module outside that folder names the engine (a string equal to its name or an old
name) or re-splits a stack reference (``ref.split(":")[0]``: StackRef.parse does it once). A module that must
still name engines is allow-listed below with its reason; the goal is none outside engines/."""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from pathlib import Path

import pytest

from k3plan.engines.engine import Engine
from k3plan.engines.registry import (
    ENGINES_DIR,
    StackRef,
    canonical,
    discover,
    engine_rules,
    engines,
    find_engine,
    registry,
)
from k3plan.errors import K3PlanError

PACKAGE = Path(__file__).resolve().parents[2] / "k3plan"

# module (path under k3plan/) -> why it may still name engines or split a stack reference
ALLOWED: dict[str, str] = {
    "glossary.py": "the user-facing words `k3plan explain` accepts for a stack (aliases people type)",
    "engines/engine.py": "the launcher vocabulary (Launcher: the commands `vllm serve`, SGLang's launch_server, "
    "MaxText), whose names are two engines' names",
    "engines/flags.py": "gathers the folders' flag tables and KV spellings by launcher (FLAG_SOURCES['vllm'], "
    "kv_table): the launcher vocabulary, whose names are two engines' names",
    "engines/launch.py": "picks a folder's launch line by launcher (cfg.engine == 'sglang' / 'jax'): the launcher "
    "vocabulary",
}


ALLOWED_NOW = tuple(ALLOWED)


def _names() -> dict[str, Engine]:
    return registry()


def _module_paths() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _folder_engine(rel: Path) -> str | None:
    """The engine whose folder holds ``rel`` (a path under k3plan/), or None."""
    parts = rel.parts
    if len(parts) >= 3 and parts[0] == "engines":
        for e in engines():
            if e.package == parts[1]:
                return e.name
    return None


def _split_colon_head(node: ast.AST) -> bool:
    """``<a stack>.split(":")[0]`` (or ``.partition(":")[0]``): the split of an expression that names a stack."""
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr in ("split", "partition")
        and len(node.value.args) >= 1
        and isinstance(node.value.args[0], ast.Constant)
        and node.value.args[0].value == ":"
        and "stack" in ast.unparse(node.value.func.value)
    )


def _launchers(tree: ast.AST) -> set[int]:
    """ids of the constants that name a family, not an engine: a launcher (``launcher=``, ``launcher_on=``: the
    command that starts it) or an engine loop (``engine_loop=``: whose published host time a step it runs)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("launcher", "launcher_on", "engine_loop"):
            out |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return out


@functools.cache
def _hits(text: str, filename: str, names: frozenset[str]) -> tuple[tuple[int, str], ...]:
    """(line, the engine name) of each string constant in ``text`` that is one of ``names`` (a launcher's or an engine
    loop's excepted), and (line, "") of each stack reference it splits, in the tree's walk order: each module read
    once a test process (two checks read the whole package; parsing its ~370 modules took ~2 s of a loaded 2-core run
    each time), keyed by its text, so a test that swaps a module's source sees its own."""
    tree = ast.parse(text, filename)
    launchers = _launchers(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in launchers:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            out.append((node.lineno, node.value))
        elif _split_colon_head(node):
            out.append((node.lineno, ""))
    return tuple(out)


def violations() -> list[str]:
    names = _names()
    out = []
    for path in _module_paths():
        rel = path.relative_to(PACKAGE)
        if rel.as_posix() in ALLOWED:
            continue
        own = _folder_engine(rel)
        for line, name in _hits(path.read_text(), str(path), frozenset(names)):
            if name and names[name].name != own:
                out.append(f"k3plan/{rel}:{line}: names engine {name!r} outside its folder")
            elif not name and not rel.parts[0] == "engines":
                out.append(f"k3plan/{rel}:{line}: splits a stack reference (use StackRef.parse)")
    return out


def test_no_engine_is_named_outside_its_folder():
    found = violations()
    assert not found, (
        "an engine's rules belong in k3plan/engines/<engine>/ (read them through its Engine, "
        "k3plan.engines.registry):\n" + "\n".join(found)
    )


def test_every_allowance_is_still_needed(monkeypatch):
    """An allow-listed module that names no engine any more leaves the list (the list only shrinks)."""
    monkeypatch.setattr(sys.modules[__name__], "ALLOWED", {})
    found = violations()
    stale = [m for m in ALLOWED_NOW if not any(f.startswith(f"k3plan/{m}:") for f in found)]
    assert not stale, f"allowed but naming no engine: {stale}; remove them from ALLOWED"


def test_the_check_sees_a_name_and_a_split(tmp_path, monkeypatch):
    """The check fails on what it guards against (a check that cannot see the error is none)."""
    bad = PACKAGE / "plan" / "_rooms_probe.py"
    monkeypatch.setattr(sys.modules[__name__], "_module_paths", lambda: [bad])
    src = 'def f(stack):\n    return stack.split(":")[0] == "sglang"\n'
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: src if self == bad else real_read(self, *a, **k))
    found = violations()
    assert any("names engine 'sglang'" in f for f in found) and any("StackRef.parse" in f for f in found)


def test_every_folder_is_an_engine_and_every_engine_a_folder():
    folders = {p.parent.name for p in ENGINES_DIR.glob("*/stack.yaml")}
    assert folders == {e.package for e in engines()}
    for e in engines():
        assert e.stack_path == ENGINES_DIR / e.package / "stack.yaml"
        assert find_engine(e.name) is e and all(find_engine(a) is e for a in e.aliases)
        assert find_engine(f"{e.name}:opt=1") is e  # a reference's options do not change its engine


def test_an_unnamed_stack_takes_the_rules_of_one_engine():
    assert sum(e.prices_unnamed for e in engines()) == 1
    assert engine_rules("/some/where/my-stack.yaml").prices_unnamed


def test_adding_an_engine_is_adding_a_folder(tmp_path, monkeypatch):
    """A throwaway package with one engine folder is found by the same discovery the shipped engines are."""
    pkg = tmp_path / "fake_engines"
    folder = pkg / "my_engine"
    folder.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (folder / "stack.yaml").write_text("name: my-engine\n")
    (folder / "__init__.py").write_text(
        "from pathlib import Path\n"
        "from k3plan.engines.engine import Engine\n"
        "from k3plan.engines.vllm import dsv4\n"
        "ENGINE = Engine(name='my-engine', package='my_engine', stack_path=Path(__file__).parent / 'stack.yaml',\n"
        "                launcher='vllm', dsv4=dsv4.LAYOUT, engram=dsv4.ENGRAM, aliases=('my-old-engine',))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    found = discover(pkg, "fake_engines")
    assert set(found) == {"my-engine", "my-old-engine"} and found["my-engine"].package == "my_engine"

    (pkg / "stray").mkdir()
    (pkg / "stray" / "stack.yaml").write_text("name: stray\n")
    (pkg / "stray" / "__init__.py").write_text("")
    with pytest.raises(K3PlanError, match="defines no ENGINE"):
        discover(pkg, "fake_engines")


def test_a_stack_reference_is_parsed_once_into_a_name_and_options():
    assert StackRef.parse("sglang") == StackRef(name="sglang")
    got = StackRef.parse("sglang:moe_a2a_backend=none+mem_fraction_static=0.85")
    assert got.name == "sglang" and got.options == {"moe_a2a_backend": "none", "mem_fraction_static": "0.85"}
    assert StackRef.parse("/a/b.yaml").name == "/a/b.yaml"
    with pytest.raises(K3PlanError, match="given twice"):
        StackRef.parse("sglang:a=1,a=2")
    assert canonical("vllm-tpu") == "torchtpu-vllm" and canonical("mine") == "mine"


def test_a_new_folder_is_a_stack_fit_can_load(tmp_path, monkeypatch):
    """A folder added beside the shipped ones (here a copy of vLLM's, under a new name) is a stack --stack takes:
    the registry finds it and the loader reads its stack.yaml, with no table elsewhere to edit."""
    from k3plan.engines import registry as reg
    from k3plan.engines import stack as stack_mod

    pkg = tmp_path / "more_engines"
    folder = pkg / "my_engine"
    folder.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    text = find_engine("vllm").stack_path.read_text()
    (folder / "stack.yaml").write_text(text.replace("name: vllm\n", "name: my-engine\n", 1))
    (folder / "__init__.py").write_text(
        "from pathlib import Path\n"
        "from k3plan.engines.engine import Engine\n"
        "from k3plan.engines.sglang import dsv4\n"
        "ENGINE = Engine(name='my-engine', package='my_engine', stack_path=Path(__file__).parent / 'stack.yaml',\n"
        "                launcher='vllm', dsv4=dsv4.LAYOUT, engram=dsv4.ENGRAM, expert_form='ragged')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    both = {**registry(), **discover(pkg, "more_engines")}
    monkeypatch.setattr(reg, "registry", lambda: both)
    monkeypatch.setattr(stack_mod, "registry", lambda: both)
    stack_mod.parse_stack.cache_clear()
    stack_mod.load_stack.cache_clear()
    try:
        st = stack_mod.load_stack("my-engine")
        assert st.name == "my-engine" and "my-engine" in reg.engine_names()
        assert engine_rules("my-engine").expert_form == "ragged"
    finally:
        stack_mod.parse_stack.cache_clear()
        stack_mod.load_stack.cache_clear()
