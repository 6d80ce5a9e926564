"""Layers point down (docs/architecture.md): each package imports only the layers below it, and the module
import graph has no cycle. Read from the source with ``ast`` (every import a module runs, function-local ones
included; imports under ``if TYPE_CHECKING:`` are annotations only and do not count), so a new upward import
fails here with the importing module, the imported one and both layers named."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "k3plan"

# top first; a module belongs to the layer of its longest matching prefix
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cli", ("k3plan.cli", "k3plan.__main__")),
    ("app", ("k3plan.app", "k3plan.api")),
    ("presentation", ("k3plan.report", "k3plan.check")),
    ("search", ("k3plan.plan", "k3plan.advice", "k3plan.deploy")),
    ("measurement", ("k3plan.validate", "k3plan.probes")),
    ("terms", ("k3plan.budget", "k3plan.roofline", "k3plan.speed", "k3plan.tiers", "k3plan.workload")),
    ("evidence", ("k3plan.evidence",)),
    ("setup", ("k3plan.setup",)),
    ("step", ("k3plan.step",)),
    ("sharding", ("k3plan.sharding",)),
    ("engines", ("k3plan.engines",)),
    ("specs", ("k3plan.hardware", "k3plan.models")),
    (
        "ground",
        (
            "k3plan",
            "k3plan.errors",
            "k3plan.units",
            "k3plan.safeparse",
            "k3plan.io_safe",
            "k3plan.resources",
            "k3plan.specfile",
            "k3plan.libtpu_env",
            "k3plan.columns",
            "k3plan.tables",
            "k3plan.tokencount",
            "k3plan.extras",
            "k3plan.glossary",
        ),
    ),
)
# (importer, imported) pairs allowed to point up, each with its reason; the goal is none
ALLOWED_UP: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _type_only(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(sub) for sub in ast.walk(node))
    return skip


def import_graph() -> dict[str, set[str]]:
    """module -> the k3plan modules it imports at run time."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                hits = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                found = hits or ([target] if target in mods else [])
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name in mods]
            else:
                continue
            graph[name].update(f for f in found if f != name)
    return graph


def layer_of(module: str) -> tuple[int, str]:
    best: tuple[int, int, str] | None = None
    for rank, (layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix), layer)
    assert best is not None, f"{module}: in no layer of tests/test_layering.py LAYERS; add it where it belongs"
    return best[0], best[2]


def test_every_module_has_a_layer():
    for module in _modules():
        layer_of(module)


def test_imports_point_down():
    up = []
    for importer, imported in sorted(import_graph().items()):
        for target in sorted(imported):
            (low, low_name), (high, high_name) = layer_of(importer), layer_of(target)
            if low > high and (importer, target) not in ALLOWED_UP:
                up.append(f"{importer} ({low_name}) imports {target} ({high_name})")
    assert not up, "upward imports (move the formula down, or the caller up):\n" + "\n".join(up)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_check_sees_an_upward_import_and_a_cycle():
    """The checks above would fail on what they guard against (a check that cannot see the error is none)."""
    graph = {"k3plan.step.ops": {"k3plan.plan.search"}, "k3plan.plan.search": {"k3plan.step.ops"}}
    assert layer_of("k3plan.step.ops")[0] > layer_of("k3plan.plan.search")[0]
    assert _cycles(graph) == [["k3plan.plan.search", "k3plan.step.ops"]]
