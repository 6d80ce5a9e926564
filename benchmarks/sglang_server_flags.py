"""Writes k3plan/engines/sglang/server_flags.py: every option string SGLang's server parser registers, read from
each release's ``sglang/srt/server_args.py`` without importing it (no torch needed): the ``ServerArgs`` fields that
``add_cli_args_from_dataclass`` turns into flags (an ``A[T, "help"]`` or ``A[T, Arg(...)]`` annotation: ``--`` + the
field name with '-' for '_', or ``Arg.cli_name``, plus ``Arg.aliases``; ``no_cli`` skipped; ``--no-X`` beside a
``BooleanOptionalAction``), from 0.5.20 on declared in the namespace classes of ``sglang/srt/arg_groups/fields/*.py``
that ServerArgs collects (each with ``_NS_PATH``), and every literal option of an ``add_argument`` call in
server_args.py. Given several releases it writes their union (argparse of any of them takes the option), with the
first and last release read of each option not in all of them.

    python3 benchmarks/sglang_server_flags.py EXTRACTED_WHEEL_0.5.15:0.5.15 ... EXTRACTED_WHEEL_0.5.23:0.5.23 \\
        > k3plan/engines/sglang/server_flags.py && ruff format k3plan/engines/sglang/server_flags.py

(EXTRACTED_WHEEL: the folder a release's wheel was unzipped into, holding sglang/srt/; the releases oldest first.)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _cli(field: str) -> str:
    return "--" + field.replace("_", "-")


def field_options(cls: ast.ClassDef) -> set[str]:
    """The options ``add_cli_args_from_dataclass`` makes of one class's annotated fields."""
    flags: set[str] = set()
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) in ("A", "Annotated")):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        meta = elts[1] if len(elts) > 1 else None
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            flags.add(_cli(node.target.id))
        elif isinstance(meta, ast.Call) and getattr(meta.func, "id", None) == "Arg":
            kw = {k.arg: k.value for k in meta.keywords}
            no_cli = kw.get("no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value:
                continue
            cli = kw.get("cli_name")
            name = cli.value if isinstance(cli, ast.Constant) else _cli(node.target.id)
            flags.add(name)
            aliases = kw.get("aliases")
            if isinstance(aliases, (ast.List, ast.Tuple)):
                flags.update(e.value for e in aliases.elts if isinstance(e, ast.Constant))
            action = kw.get("action")
            if action is not None and "BooleanOptional" in ast.unparse(action):
                flags.add("--no-" + name[2:])
    return flags


def option_strings(source: str, namespaces: list[str] = ()) -> set[str]:
    """``source``: server_args.py; ``namespaces``: the sources of arg_groups/fields/*.py (0.5.20 on)."""
    tree = ast.parse(source)
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    flags = field_options(server_args)
    for text in namespaces:
        for cls in ast.parse(text).body:
            if isinstance(cls, ast.ClassDef) and any(
                isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "_NS_PATH" for t in n.targets)
                for n in cls.body
            ):
                flags |= field_options(cls)
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument":
            names = [a.value for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            flags.update(names)
            if any(k.arg == "action" and "BooleanOptional" in ast.unparse(k.value) for k in n.keywords):
                flags.update("--no-" + x[2:] for x in names)
    return flags


def release_options(root: str) -> set[str]:
    """A release's options from its unzipped wheel at ``root`` (holding sglang/srt/)."""
    srt = Path(root) / "sglang" / "srt"
    fields = sorted((srt / "arg_groups" / "fields").glob("*.py"))
    return option_strings(
        (srt / "server_args.py").read_text(encoding="utf-8"), [f.read_text(encoding="utf-8") for f in fields]
    )


def main() -> None:
    reads = [arg.rsplit(":", 1) for arg in sys.argv[1:]]
    by_release = {release: release_options(root) for root, release in reads}
    releases = list(by_release)
    union = sorted(set().union(*by_release.values()))
    first, last = releases[0], releases[-1]
    print(
        f'"""Every option the server parsers of SGLang {first} to {last} register (the sglang wheels of those releases'
    )
    print(
        "(PyPI), sglang/srt/server_args.py: ServerArgs.add_cli_args, prepare_server_args: argparse.ArgumentParser with"
    )
    print("allow_abbrev left on; from 0.5.20 the fields in sglang/srt/arg_groups/fields/*.py), written by")
    print(
        "benchmarks/sglang_server_flags.py: the union, an option any of them takes, and the first and last release of"
    )
    print("those not in every one. argparse takes an unambiguous prefix of one of them for it and refuses an ambiguous")
    print(
        "one (engines/sglang/serve.py reads a command so, over the options of the release it is read as: release_options)."
    )
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
        assert has == releases[releases.index(has[0]) : releases.index(has[-1]) + 1], (
            f"{f}: not in every release between"
        )
        if len(has) != len(releases):
            print(f'    "{f}": ("{has[0]}", "{has[-1]}"),')
    print("}")


if __name__ == "__main__":
    main()
