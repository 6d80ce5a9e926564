"""Layers point down (docs/architecture.md): each package imports only the layers below it, no two packages
import each other (siblings in one layer included), the package graph has no cycle and the module import graph
has none. Read from the source with ``ast``: every import a module holds counts, function-local ones and those
under ``if TYPE_CHECKING:`` included (an annotation-only import still ties the two packages together: whoever
reads or moves one must read the other), so a new upward or sideways import fails here with the importing
module, the imported one and the layers or packages named."""

from __future__ import annotations

import ast
import functools
import sys
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


def _modules(package: Path | None = None) -> dict[str, Path]:
    package = package or PACKAGE
    mods = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the k3plan modules it imports (at run time or for type checking only): a copy of the package's
    graph, read once a test process (four checks read it; parsing the ~370 modules took ~2.5 s of a loaded 2-core
    run each time)."""
    return {m: set(found) for m, found in _import_graph(PACKAGE).items()}


@functools.cache
def _import_graph(package: Path) -> dict[str, frozenset[str]]:
    mods = _modules(package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
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
    return {m: frozenset(found) for m, found in graph.items()}


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


def package_of(module: str) -> str:
    """k3plan.a.b.c -> k3plan.a (a top-level module is its own package; k3plan itself is k3plan)."""
    return ".".join(module.split(".")[:2])


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(importing package, imported package) -> the (importer, imported) module pairs behind it."""
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for importer, imported in sorted(graph.items()):
        for target in sorted(imported):
            pair = (package_of(importer), package_of(target))
            if pair[0] != pair[1]:
                edges.setdefault(pair, []).append((importer, target))
    return edges


def _why(edges: dict[tuple[str, str], list[tuple[str, str]]], pair: tuple[str, str]) -> list[str]:
    return [f"  {importer} imports {target}" for importer, target in edges[pair]]


def mutual_packages(graph: dict[str, set[str]]) -> list[str]:
    """Every pair of packages importing each other, with the module imports behind both directions."""
    edges = package_edges(graph)
    out = []
    for a, b in sorted(edges):
        if a < b and (b, a) in edges:
            out += [f"{a} <-> {b}:", *_why(edges, (a, b)), *_why(edges, (b, a))]
    return out


def package_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle among packages (of any length), with the module imports inside it."""
    edges = package_edges(graph)
    packages = sorted({p for pair in edges for p in pair})
    pgraph: dict[str, set[str]] = {p: set() for p in packages}
    for a, b in edges:
        pgraph[a].add(b)
    out = []
    for comp in _cycles(pgraph):
        inside = set(comp)
        out.append(f"cycle among {', '.join(comp)}:")
        for pair in sorted(edges):
            if pair[0] in inside and pair[1] in inside:
                out += _why(edges, pair)
    return out


_MOVE_DOWN = (
    "move the shared formula or type down, into the lower package or a small module both import "
    "(not a local, string or TYPE_CHECKING import: those still tie the two together)"
)


def test_no_two_packages_import_each_other():
    mutual = mutual_packages(import_graph())
    assert not mutual, f"packages importing each other ({_MOVE_DOWN}):\n" + "\n".join(mutual)


def test_packages_form_a_dag():
    cycles = package_cycles(import_graph())
    assert not cycles, f"package import cycles ({_MOVE_DOWN}):\n" + "\n".join(cycles)


def test_the_check_sees_an_upward_import_and_a_cycle():
    """The checks above would fail on what they guard against (a check that cannot see the error is none)."""
    graph = {"k3plan.step.ops": {"k3plan.plan.search"}, "k3plan.plan.search": {"k3plan.step.ops"}}
    assert layer_of("k3plan.step.ops")[0] > layer_of("k3plan.plan.search")[0]
    assert _cycles(graph) == [["k3plan.plan.search", "k3plan.step.ops"]]


def test_the_check_sees_siblings_a_package_cycle_and_a_type_only_import(tmp_path, monkeypatch):
    """Two packages of one layer importing each other from deep modules, a three-package cycle with no
    mutual pair, and an import under ``if TYPE_CHECKING:`` are all seen."""
    siblings = {"k3plan.budget.fit.x": {"k3plan.roofline.comm"}, "k3plan.roofline.comm": {"k3plan.budget.dtypes"}}
    assert package_of("k3plan.budget.fit.x") == "k3plan.budget"
    assert mutual_packages(siblings) == [
        "k3plan.budget <-> k3plan.roofline:",
        "  k3plan.budget.fit.x imports k3plan.roofline.comm",
        "  k3plan.roofline.comm imports k3plan.budget.dtypes",
    ]
    ring = {"k3plan.a.x": {"k3plan.b.y"}, "k3plan.b.y": {"k3plan.c.z"}, "k3plan.c.z": {"k3plan.a.w"}}
    assert not mutual_packages(ring)
    assert package_cycles(ring) == [
        "cycle among k3plan.a, k3plan.b, k3plan.c:",
        "  k3plan.a.x imports k3plan.b.y",
        "  k3plan.b.y imports k3plan.c.z",
        "  k3plan.c.z imports k3plan.a.w",
    ]
    pkg = tmp_path / "k3plan"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("")
    (pkg / "high.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from k3plan.low import x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    assert import_graph()["k3plan.high"] == {"k3plan.low"}
