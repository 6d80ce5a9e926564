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


Option = tuple[str, "tuple[str, ...] | None"]  # (kind: "switch" | "list" | "value", choices)


def _action_kind(action: ast.AST | None, nargs: ast.AST | None, actions: dict[str, ast.ClassDef]) -> str | None:
    """The kind an ``action=`` (and ``nargs=``) gives an option: a switch takes no value (store_true / store_false /
    store_const / count / help, BooleanOptionalAction, a custom Action whose __init__ defaults nargs to 0), a list
    takes one or more (nargs "+" / "*" / a number above 1); None: a plain value (or not said)."""
    if isinstance(nargs, ast.Constant):
        if nargs.value in ("+", "*") or (isinstance(nargs.value, int) and nargs.value > 1):
            return "list"
        if nargs.value == 0:
            return "switch"
        return "value"
    if action is None:
        return None
    text = ast.unparse(action)
    if isinstance(action, ast.Constant):
        return "switch" if action.value in ("store_true", "store_false", "store_const", "count", "help") else "value"
    if "BooleanOptional" in text:
        return "switch"
    cls = actions.get(text.rsplit(".", 1)[-1])
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None) if cls else None
    if init is not None:
        args = init.args.args + init.args.kwonlyargs
        defaults = [None] * (len(init.args.args) - len(init.args.defaults)) + list(init.args.defaults)
        defaults += list(init.args.kw_defaults)
        for a, d in zip(args, defaults):
            if a.arg == "nargs" and isinstance(d, ast.Constant) and d.value == 0:
                return "switch"
    return "value"


def _field_kind(ann: ast.AST, kw: dict[str | None, ast.AST], actions: dict[str, ast.ClassDef]) -> str:
    """The kind ``add_cli_args_from_dataclass`` gives a field (arg_groups/arg_utils.py): its action's; a Literal a
    value; a list (without type_parser) nargs "+" or Arg.nargs; a bool store_true; else a value (Arg.nargs)."""
    if "action" in kw:  # Arg.action_kwargs (nargs among them) go to add_argument beside it
        extra = kw.get("action_kwargs")
        nargs = kw.get("nargs")
        if isinstance(extra, ast.Dict):
            nargs = next((v for k, v in zip(extra.keys, extra.values) if getattr(k, "value", None) == "nargs"), nargs)
        return _action_kind(kw["action"], nargs, actions) or "value"
    inner = ann
    while True:  # Optional[X], Union[X, None], X | None
        if isinstance(inner, ast.Subscript) and getattr(inner.value, "id", None) in ("Optional",):
            inner = inner.slice
        elif isinstance(inner, ast.Subscript) and getattr(inner.value, "id", None) == "Union":
            elts = [e for e in inner.slice.elts if not (isinstance(e, ast.Constant) and e.value is None)]
            inner = elts[0] if len(elts) == 1 else inner
            if len(elts) != 1:
                break
        elif isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.BitOr):
            sides = [x for x in (inner.left, inner.right) if not (isinstance(x, ast.Constant) and x.value is None)]
            if len(sides) != 1:
                break
            inner = sides[0]
        else:
            break
    if isinstance(inner, ast.Subscript) and getattr(inner.value, "id", None) == "Literal":
        return "value"
    if isinstance(inner, ast.Subscript) and getattr(inner.value, "id", None) in ("List", "list"):
        if "type_parser" not in kw:
            return _action_kind(None, kw.get("nargs"), actions) or "list"
    if isinstance(inner, ast.Name) and inner.id == "bool":
        return "switch"
    return _action_kind(None, kw.get("nargs"), actions) or "value"


def field_options(
    cls: ast.ClassDef, names: dict[str, ast.AST], actions: dict[str, ast.ClassDef]
) -> dict[str, Option]:
    """The options ``add_cli_args_from_dataclass`` makes of one class's annotated fields -> (kind, choices)."""
    flags: dict[str, Option] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) in ("A", "Annotated")):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        meta = elts[1] if len(elts) > 1 else None
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            flags[_cli(node.target.id)] = (_field_kind(elts[0], {}, actions), _literal_type(elts[0]))
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
            kind = _field_kind(elts[0], kw, actions)
            for n in [name, *alias_names]:
                flags[n] = (kind, choices)
            action = kw.get("action")
            if action is not None and "BooleanOptional" in ast.unparse(action):
                flags["--no-" + name[2:]] = ("switch", None)
    return flags


def _module_names(tree: ast.Module) -> dict[str, ast.AST]:
    return {
        t.id: n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def option_strings(source: str, namespaces: list[str] = (), helpers: list[str] = ()) -> dict[str, Option]:
    """``source``: server_args.py; ``namespaces``: the sources of arg_groups/fields/*.py (0.5.20 on); ``helpers``:
    the other arg_groups/*.py (their Action classes, their module-level choice lists) -> every option string the
    parser registers, its kind and its choices (None: no choices read)."""
    tree = ast.parse(source)
    names = _module_names(tree)
    helper_trees = [ast.parse(t) for t in helpers]
    for h in helper_trees:
        names = {**_module_names(h), **names}
    actions = {c.name: c for t in [tree, *helper_trees] for c in t.body if isinstance(c, ast.ClassDef)}
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    flags = field_options(server_args, names, actions)
    for text in namespaces:
        ns_tree = ast.parse(text)
        ns_names = {**names, **_module_names(ns_tree)}
        for cls in ns_tree.body:
            if isinstance(cls, ast.ClassDef) and any(
                isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "_NS_PATH" for t in n.targets)
                for n in cls.body
            ):
                flags.update(field_options(cls, ns_names, actions))
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument":
            opts = [a.value for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            kw = {k.arg: k.value for k in n.keywords}
            choices = _literal_list(kw.get("choices"), names) if "choices" in kw else None
            kind = _action_kind(kw.get("action"), kw.get("nargs"), actions) or "value"
            for o in opts:
                flags[o] = (kind, choices)
            if "BooleanOptional" in ast.unparse(kw.get("action", ast.Constant(None))):
                flags.update({"--no-" + x[2:]: ("switch", None) for x in opts})
    return flags


def release_options(path: str) -> tuple[str, dict[str, Option]]:
    """A release's version and options from its wheel or its unzipped folder at ``path``."""
    p = Path(path)
    if p.suffix == ".whl":
        version = p.name.split("-")[1]
        with zipfile.ZipFile(p) as z:
            wanted = [
                n
                for n in z.namelist()
                if n == "sglang/srt/server_args.py" or re.fullmatch(r"sglang/srt/arg_groups/(fields/)?[^/]+\.py", n)
            ]
            text = {n: z.read(n).decode("utf-8") for n in wanted}
    else:
        srt = p / "sglang" / "srt"
        version = p.name
        text = {
            str(f.relative_to(p)): f.read_text(encoding="utf-8")
            for f in [srt / "server_args.py", *sorted((srt / "arg_groups").glob("**/*.py"))]
        }
    fields = sorted(n for n in text if n.startswith("sglang/srt/arg_groups/fields/"))
    helpers = sorted(n for n in text if n.startswith("sglang/srt/arg_groups/") and n not in fields)
    return version, option_strings(
        text["sglang/srt/server_args.py"], [text[f] for f in fields], [text[h] for h in helpers]
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
            got = by_release[r].get(f, ("value", None))[1]
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
    print("# how an option takes its value where it is not one value (argparse's default): 'switch', none (store_true,")
    print("# BooleanOptionalAction, an Action of nargs 0), 'list', one or more (nargs '+' / '*'); an option whose kind")
    print("# differs between the releases read that register it: the runs of releases with one kind, (first, last, kind)")
    print("KINDS: dict[str, str | tuple[tuple[str, str, str], ...]] = {")
    for f in union:
        rows2: list[tuple[str, str, str]] = []
        for r in releases:
            if f not in by_release[r]:
                continue
            kind = by_release[r][f][0]
            if rows2 and rows2[-1][2] == kind and rows2[-1][1] == releases[releases.index(r) - 1]:
                rows2[-1] = (rows2[-1][0], r, kind)
            else:
                rows2.append((r, r, kind))
        if len({k for _, _, k in rows2}) == 1 and rows2[0][2] != "value":
            print(f'    "{f}": "{rows2[0][2]}",')
        elif len({k for _, _, k in rows2}) > 1:
            print(f'    "{f}": (' + ", ".join(f'("{a}", "{b}", "{k}")' for a, b, k in rows2) + ",),")
    print("}")


if __name__ == "__main__":
    main()
