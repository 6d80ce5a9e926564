"""Writes k3plan/engines/sglang/server_flags.py: every option string SGLang's server parser registers in each release
read, from that release's wheel (PyPI) without importing it (no torch needed): ``sglang/srt/server_args.py``, whose
``prepare_server_args`` builds an ``argparse.ArgumentParser`` (allow_abbrev left on) and calls
``ServerArgs.add_cli_args`` on it. The options are every literal option string of an ``add_argument`` call in
server_args.py (its aliases beside it; ``--no-X`` beside a ``BooleanOptionalAction``), and from 0.5.14 the
``ServerArgs`` fields that ``add_cli_args_from_dataclass`` (arg_groups/arg_utils.py) turns into flags (an
``A[T, "help"]`` or ``A[T, Arg(...)]`` annotation: ``--`` + the field name with '-' for '_', or ``Arg.cli_name``,
plus ``Arg.aliases``; ``no_cli`` skipped), from 0.5.20 on declared in the namespace classes of
``sglang/srt/arg_groups/fields/*.py`` that ServerArgs collects (each with ``_NS_PATH``). For the options whose value
k3plan reads (``CHOICE_OPTIONS``) it also writes the choices argparse checks the value against, where the call or the
field names them as a literal list, a module-level list in the same file, or a ``Literal[...]`` type.

    python3 benchmarks/sglang_server_flags.py WHEEL_OR_FOLDER ... > k3plan/engines/sglang/server_flags.py \\
        && ruff format k3plan/engines/sglang/server_flags.py

(each argument: a release's wheel, sglang-X-*.whl, or a folder a wheel was unzipped into holding sglang/srt/;
the release is the wheel's version, read from its file name or from the folder's name.) The releases are written
oldest first; a 0.5.0 release candidate is written under its own name (k3plan reads --engine-version 0.5.0 as the
newest of them: engines/sglang/serve.py release_options).
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from pathlib import Path

# the options whose value k3plan reads (engines/sglang/serve.py), whose choices are written by release
CHOICE_OPTIONS = (
    "--moe-a2a-backend",
    "--kv-cache-dtype",
    "--deepep-mode",
    "--speculative-algorithm",
    "--mamba-scheduler-strategy",
    "--mamba-radix-cache-strategy",
)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:(rc)(\d+))?(?:\.post(\d+))?")


def order(version: str) -> tuple[int, int, int, int, int]:
    """A release's place: 0.5.0rc2 before 0.5.0, 0.4.8 before 0.4.8.post1."""
    m = _VERSION.fullmatch(version)
    assert m is not None, version
    rc = int(m[5]) - 100 if m[4] else 0
    return int(m[1]), int(m[2]), int(m[3]), rc, int(m[6] or 0)


def _cli(field: str) -> str:
    return "--" + field.replace("_", "-")


def _literal_list(node: ast.AST | None, names: dict[str, ast.AST]) -> tuple[str, ...] | None:
    """A literal list / tuple of constants, or a module-level name bound to one (else None: not read)."""
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in node.elts):
        return tuple(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
    return None


def _literal_type(ann: ast.AST) -> tuple[str, ...] | None:
    """The values of a ``Literal[...]`` inside an annotation (Optional / ``| None`` unwrapped)."""
    for n in ast.walk(ann):
        if isinstance(n, ast.Subscript) and getattr(n.value, "id", None) == "Literal":
            elts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            return tuple(str(e.value) for e in elts if isinstance(e, ast.Constant))
    return None


def field_options(cls: ast.ClassDef, names: dict[str, ast.AST]) -> dict[str, tuple[str, ...] | None]:
    """The options ``add_cli_args_from_dataclass`` makes of one class's annotated fields -> their choices."""
    flags: dict[str, tuple[str, ...] | None] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) in ("A", "Annotated")):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        meta = elts[1] if len(elts) > 1 else None
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            flags[_cli(node.target.id)] = _literal_type(elts[0])
        elif isinstance(meta, ast.Call) and getattr(meta.func, "id", None) == "Arg":
            kw = {k.arg: k.value for k in meta.keywords}
            no_cli = kw.get("no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value:
                continue
            cli = kw.get("cli_name")
            name = cli.value if isinstance(cli, ast.Constant) else _cli(node.target.id)
            choices = _literal_list(kw.get("choices"), names) if "choices" in kw else _literal_type(elts[0])
            aliases = kw.get("aliases")
            alias_names = (
                [e.value for e in aliases.elts if isinstance(e, ast.Constant)]
                if isinstance(aliases, (ast.List, ast.Tuple))
                else []
            )
            for n in [name, *alias_names]:
                flags[n] = choices
            action = kw.get("action")
            if action is not None and "BooleanOptional" in ast.unparse(action):
                flags["--no-" + name[2:]] = None
    return flags


def _module_names(tree: ast.Module) -> dict[str, ast.AST]:
    return {
        t.id: n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def option_strings(source: str, namespaces: list[str] = ()) -> dict[str, tuple[str, ...] | None]:
    """``source``: server_args.py; ``namespaces``: the sources of arg_groups/fields/*.py (0.5.20 on) -> every option
    string the parser registers and its choices (None: no choices read)."""
    tree = ast.parse(source)
    names = _module_names(tree)
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    flags = field_options(server_args, names)
    for text in namespaces:
        ns_tree = ast.parse(text)
        ns_names = {**names, **_module_names(ns_tree)}
        for cls in ns_tree.body:
            if isinstance(cls, ast.ClassDef) and any(
                isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "_NS_PATH" for t in n.targets)
                for n in cls.body
            ):
                flags.update(field_options(cls, ns_names))
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument":
            opts = [a.value for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            kw = {k.arg: k.value for k in n.keywords}
            choices = _literal_list(kw.get("choices"), names) if "choices" in kw else None
            for o in opts:
                flags[o] = choices
            if "BooleanOptional" in ast.unparse(kw.get("action", ast.Constant(None))):
                flags.update({"--no-" + x[2:]: None for x in opts})
    return flags


def release_options(path: str) -> tuple[str, dict[str, tuple[str, ...] | None]]:
    """A release's version and options from its wheel or its unzipped folder at ``path``."""
    p = Path(path)
    if p.suffix == ".whl":
        version = p.name.split("-")[1]
        with zipfile.ZipFile(p) as z:
            wanted = [
                n
                for n in z.namelist()
                if n == "sglang/srt/server_args.py" or re.fullmatch(r"sglang/srt/arg_groups/fields/[^/]+\.py", n)
            ]
            text = {n: z.read(n).decode("utf-8") for n in wanted}
        fields = sorted(n for n in text if n != "sglang/srt/server_args.py")
        return version, option_strings(text["sglang/srt/server_args.py"], [text[f] for f in fields])
    srt = p / "sglang" / "srt"
    fields_dir = sorted((srt / "arg_groups" / "fields").glob("*.py"))
    return p.name, option_strings(
        (srt / "server_args.py").read_text(encoding="utf-8"), [f.read_text(encoding="utf-8") for f in fields_dir]
    )


def spans(has: list[bool]) -> list[tuple[int, int]]:
    """The runs of True in ``has``: (first, last) indices."""
    out: list[tuple[int, int]] = []
    for i, h in enumerate(has):
        if h and out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        elif h:
            out.append((i, i))
    return out


def main() -> None:
    reads = dict(release_options(arg) for arg in sys.argv[1:])
    releases = sorted(reads, key=order)
    by_release = {r: reads[r] for r in releases}
    union = sorted(set().union(*by_release.values()))
    print(
        f'"""Every option the server parsers of SGLang {releases[0]} to {releases[-1]} register, release by release (the sglang'
    )
    print("wheels of those releases (PyPI), sglang/srt/server_args.py: prepare_server_args' argparse.ArgumentParser")
    print("(allow_abbrev left on) after ServerArgs.add_cli_args; from 0.5.14 the dataclass fields of")
    print("arg_groups/arg_utils.py add_cli_args_from_dataclass, from 0.5.20 those of sglang/srt/arg_groups/fields/*.py),")
    print("written by benchmarks/sglang_server_flags.py from the wheels named in RELEASES, never typed. argparse takes an")
    print("unambiguous prefix of an option for it and refuses an ambiguous one or an option its release lacks")
    print("(engines/sglang/serve.py reads a command so, over the options of the release it is read as: release_options).")
    print('"""')
    print()
    print(f'RELEASE = "{releases[-1]}"  # the newest release read')
    print("# the wheels read, oldest first (each sglang-VERSION wheel on PyPI)")
    print(f"RELEASES = {tuple(releases)!r}")
    print("# every option any of them registers")
    print("FLAGS = frozenset(")
    print("    {")
    for f in union:
        print(f'        "{f}",')
    print("    }")
    print(")")
    print("# an option not in every release read: the runs of releases read that register it, (first, last)")
    print("RANGES: dict[str, tuple[tuple[str, str], ...]] = {")
    for f in union:
        runs = spans([f in by_release[r] for r in releases])
        if runs != [(0, len(releases) - 1)]:
            text = ", ".join(f'("{releases[a]}", "{releases[b]}")' for a, b in runs)
            print(f'    "{f}": ({text},),')
    print("}")
    print("# the choices argparse checks a value against, for the options whose value k3plan reads: the runs of")
    print("# releases read with the same choices, (first, last, choices); a release with the option and none here: not read")
    print("CHOICES: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {")
    for f in CHOICE_OPTIONS:
        rows: list[tuple[str, str, tuple[str, ...]]] = []
        prev: tuple[str, ...] | None = None
        for r in releases:
            got = by_release[r].get(f)
            if got is not None and rows and got == prev and rows[-1][1] == releases[releases.index(r) - 1]:
                rows[-1] = (rows[-1][0], r, got)
            elif got is not None:
                rows.append((r, r, got))
            prev = got
        if rows:
            print(f'    "{f}": (')
            for a, b, c in rows:
                print(f'        ("{a}", "{b}", {c!r}),')
            print("    ),")
    print("}")


if __name__ == "__main__":
    main()
