"""Writes k3plan/engines/vllm/serve_flags.py: every ``--`` option string the parser of ``vllm serve`` registers, read
from each release's wheel without importing it (no torch needed). The parser (vllm/entrypoints/cli/serve.py
subparser_init -> make_arg_parser in vllm/entrypoints/openai/cli_args.py, from 0.34.0 vllm/entrypoints/common/
cli_args.py) is a FlexibleArgumentParser (vllm/utils/argparse_utils.py) built with argparse's allow_abbrev left on.
It registers:

- every literal option of an ``add_argument`` call in make_arg_parser's file and in vllm/engine/arg_utils.py
  (EngineArgs.add_cli_args, AsyncEngineArgs.add_cli_args), with ``--no-X`` beside X where the call's action is
  argparse.BooleanOptionalAction, given as ``action=`` or through ``**X_kwargs["field"]`` (``X_kwargs =
  get_kwargs(SomeConfig)``) of a field whose annotation holds ``bool`` and is not ``bool | str | None``
  (arg_utils.py _compute_kwargs: the optional-valued flag);
- every field of FrontendArgs and the classes it derives from (FrontendArgs.add_cli_args: ``--`` + the field name with
  '-' for '_'), ``--no-X`` beside a bool one;
- where the release's argparse_utils.py has EnableDisableAction (registered for BooleanOptionalAction), the inverse
  of a ``--enable-X`` / ``--disable-X`` switch and its ``--no-`` form;
- --help.

Given several releases it writes their union, with the first and last release read of each option not in all of
them.

    python3 benchmarks/vllm_serve_flags.py EXTRACTED_WHEEL_0.11.2:0.11.2 ... EXTRACTED_WHEEL_0.34.0:0.34.0 \\
        > k3plan/engines/vllm/serve_flags.py && ruff format k3plan/engines/vllm/serve_flags.py

(EXTRACTED_WHEEL: a folder holding the release wheel's vllm/ (at least vllm/engine/, vllm/entrypoints/, vllm/config*,
vllm/utils/); the releases oldest first.)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _names(node: ast.AST) -> set[str]:
    """The type names an annotation holds (``None`` as 'None')."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Constant) and n.value is None:
            out.add("None")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):  # a string annotation
            try:
                out |= _names(ast.parse(n.value, mode="eval"))
            except SyntaxError:
                pass
    return out


def _is_bool(annotation: ast.AST) -> bool:
    """A BooleanOptionalAction field as _compute_kwargs decides it (bool among its types, not bool | str | None)."""
    names = _names(annotation) - {"Optional", "Union"}
    return "bool" in names and names != {"bool", "str", "None"}


def _fields(tree: ast.Module) -> dict[str, tuple[list[str], dict[str, ast.AST]]]:
    """class name -> (its bases' names, field -> annotation) for every class of a module."""
    out: dict[str, tuple[list[str], dict[str, ast.AST]]] = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            fields = {
                n.target.id: n.annotation
                for n in cls.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and not n.target.id.startswith("_")
            }
            bases = [b.id for b in cls.bases if isinstance(b, ast.Name)]
            out[cls.name] = (bases, fields)
    return out


def _all_fields(classes: dict[str, tuple[list[str], dict[str, ast.AST]]], name: str) -> dict[str, ast.AST]:
    bases, own = classes.get(name, ([], {}))
    out: dict[str, ast.AST] = {}
    for b in bases:
        out.update(_all_fields(classes, b))
    out.update(own)
    return out


def _negations(option: str, enable_disable: bool) -> set[str]:
    out = {"--no-" + option[2:]}
    if enable_disable:
        for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
            if option.startswith(prefix):
                other = inverse + option.removeprefix(prefix)
                out |= {other, "--no-" + other[2:]}
    return out


def add_argument_options(
    tree: ast.Module, classes: dict[str, tuple[list[str], dict[str, ast.AST]]], enable_disable: bool
) -> set[str]:
    """The literal ``--`` options of a module's add_argument calls, with their negations where the action is
    BooleanOptionalAction (given, or from a bool config field through ``**X_kwargs["field"]``)."""
    kwargs_of: dict[str, str] = {}
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and getattr(n.value.func, "id", None) == "get_kwargs"
            and n.value.args
            and isinstance(n.value.args[0], ast.Name)
        ):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    kwargs_of[t.id] = n.value.args[0].id
    flags: set[str] = set()
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument"):
            continue
        names = [a.value for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        flags.update(names)
        boolean = False
        for k in n.keywords:
            if k.arg == "action" and "BooleanOptional" in ast.unparse(k.value):
                boolean = True
            elif k.arg is None:  # **X_kwargs["field"], or inside **{**X_kwargs["field"], ...}
                for sub in ast.walk(k.value):
                    if not (
                        isinstance(sub, ast.Subscript)
                        and isinstance(sub.value, ast.Name)
                        and isinstance(sub.slice, ast.Constant)
                    ):
                        continue
                    cls = kwargs_of.get(sub.value.id)
                    ann = _all_fields(classes, cls).get(sub.slice.value) if cls else None
                    if ann is not None and _is_bool(ann) and not any(kk.arg == "action" for kk in n.keywords):
                        boolean = True
        if boolean:
            for x in names:
                flags |= _negations(x, enable_disable)
    return flags


def release_options(root: str) -> set[str]:
    """A release's ``vllm serve`` options from its unzipped wheel at ``root`` (holding vllm/)."""
    vllm = Path(root) / "vllm"
    enable_disable = "class EnableDisableAction" in (vllm / "utils" / "argparse_utils.py").read_text(encoding="utf-8")
    config = sorted((vllm / "config").glob("*.py")) if (vllm / "config").is_dir() else [vllm / "config.py"]
    classes: dict[str, tuple[list[str], dict[str, ast.AST]]] = {}
    for path in config:
        classes.update(_fields(ast.parse(path.read_text(encoding="utf-8"))))
    front_path = next(
        p
        for p in (vllm / "entrypoints" / "common" / "cli_args.py", vllm / "entrypoints" / "openai" / "cli_args.py")
        if p.exists() and "def make_arg_parser" in p.read_text(encoding="utf-8")
    )
    front = ast.parse(front_path.read_text(encoding="utf-8"))
    front_classes = _fields(front)
    classes.update(front_classes)
    flags = {"--help"}
    flags |= add_argument_options(front, classes, enable_disable)
    flags |= add_argument_options(
        ast.parse((vllm / "engine" / "arg_utils.py").read_text(encoding="utf-8")), classes, enable_disable
    )
    serve = vllm / "entrypoints" / "cli" / "serve.py"
    if serve.exists():
        flags |= add_argument_options(ast.parse(serve.read_text(encoding="utf-8")), classes, enable_disable)
    for name, annotation in _all_fields(front_classes, "FrontendArgs").items():
        option = "--" + name.replace("_", "-")
        flags.add(option)
        if _is_bool(annotation):
            flags |= _negations(option, enable_disable)
    return flags


def main() -> None:
    reads = [arg.rsplit(":", 1) for arg in sys.argv[1:]]
    by_release = {release: release_options(root) for root, release in reads}
    releases = list(by_release)
    union = sorted(set().union(*by_release.values()))
    first, last = releases[0], releases[-1]
    print(
        f'"""Every ``--`` option the parser of ``vllm serve`` registers in vLLM {first} to {last} (the vllm wheels of'
    )
    print("those releases (PyPI): vllm/engine/arg_utils.py EngineArgs.add_cli_args, the frontend's FrontendArgs and")
    print("make_arg_parser, FlexibleArgumentParser with argparse's allow_abbrev left on), written by")
    print("benchmarks/vllm_serve_flags.py: the union, an option any of them takes, and the first and last release read")
    print("of those not in every one. argparse takes an unambiguous prefix of one of them for it and refuses an")
    print("ambiguous one (engines/vllm/serve.py reads a command so, over the options of the release it is read as).")
    print('"""')
    print()
    print(f'RELEASE = "{last}"  # the newest release read')
    print(f"RELEASES = {tuple(releases)!r}")
    print("FLAGS = frozenset(")
    print("    {")
    for f in union:
        print(f'        "{f}",')
    print("    }")
    print(")")
    print("# an option not in every release read: (the first, the last release read that registers it)")
    print("RANGES: dict[str, tuple[str, str]] = {")
    for f in union:
        has = [r for r in releases if f in by_release[r]]
        if len(has) != len(releases):
            print(f'    "{f}": ("{has[0]}", "{has[-1]}"),')
    print("}")


if __name__ == "__main__":
    main()
