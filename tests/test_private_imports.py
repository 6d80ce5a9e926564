"""Issue 10 item 4: no module imports another module's private name (``from k3plan.x import _y``).
A helper two commands share is public where it belongs (k3plan.tiers.prefix.check_prefix_options,
k3plan.report.prefix_table.render_prefix_hit); a module's own underscored helpers stay its own."""

import ast
from pathlib import Path

import k3plan

ROOT = Path(k3plan.__file__).parent

# same-package imports of a private helper that predate this rule (package-internal, not CLI)
INTERNAL = {
    ("report/capacity_plots.py", "k3plan.report.plots", "_pyplot"),
    ("validate/layouts.py", "k3plan.validate.hlo_census", "_ITEM"),
    ("validate/steps.py", "k3plan.validate.abstract_model", "_batch_axis"),
}


def _private_imports():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("k3plan"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        yield rel, node.module, alias.name


def test_no_private_import_across_packages():
    found = set(_private_imports())
    assert found <= INTERNAL, sorted(found - INTERNAL)
    for rel, module, _ in found:  # the exceptions stay inside their own package, never the CLI's
        assert not rel.startswith("cli/") and module.split(".")[1] == rel.split("/")[0]
