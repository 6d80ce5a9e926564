"""Writes k3plan/engines/sglang/server_flags.py: every option string SGLang's server parser registers, read from a
release's ``sglang/srt/server_args.py`` without importing it (no torch needed): the ``ServerArgs`` fields that
``add_cli_args_from_dataclass`` turns into flags (an ``A[T, "help"]`` or ``A[T, Arg(...)]`` annotation: ``--`` + the
field name with '-' for '_', or ``Arg.cli_name``, plus ``Arg.aliases``; ``no_cli`` skipped; ``--no-X`` beside a
``BooleanOptionalAction``) and every literal option of an ``add_argument`` call in the file.

    python3 benchmarks/sglang_server_flags.py EXTRACTED_WHEEL/sglang/srt/server_args.py 0.5.15 \\
        > k3plan/engines/sglang/server_flags.py && ruff format k3plan/engines/sglang/server_flags.py
"""

from __future__ import annotations

import ast
import sys


def _cli(field: str) -> str:
    return "--" + field.replace("_", "-")


def option_strings(source: str) -> set[str]:
    tree = ast.parse(source)
    flags: set[str] = set()
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    for node in server_args.body:
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
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument":
            names = [a.value for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            flags.update(names)
            if any(k.arg == "action" and "BooleanOptional" in ast.unparse(k.value) for k in n.keywords):
                flags.update("--no-" + x[2:] for x in names)
    return flags


def main() -> None:
    path, release = sys.argv[1], sys.argv[2]
    flags = sorted(option_strings(open(path, encoding="utf-8").read()))
    print(
        f'"""Every option SGLang {release}\'s server parser registers (sglang {release} wheel, sglang/srt/server_args.py:'
    )
    print(
        "ServerArgs.add_cli_args, prepare_server_args: argparse.ArgumentParser with allow_abbrev left on), written by"
    )
    print(
        "benchmarks/sglang_server_flags.py. argparse takes an unambiguous prefix of one of them for it and refuses an"
    )
    print('ambiguous one (engines/sglang/serve.py reads a command so)."""')
    print()
    print(f'RELEASE = "{release}"')
    print("FLAGS = frozenset(")
    print("    {")
    for f in flags:
        print(f'        "{f}",')
    print("    }")
    print(")")


if __name__ == "__main__":
    main()
