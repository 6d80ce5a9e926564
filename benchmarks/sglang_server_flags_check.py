"""Checks k3plan/engines/sglang/server_flags.py (written by benchmarks/sglang_server_flags.py from the wheels' source,
read without running it) against the parser each wheel really builds: a fresh interpreter per wheel imports the
wheel's sglang/srt/server_args.py with every third-party module it cannot find stubbed (torch, triton, transformers,
...: a class that answers any attribute), calls ServerArgs.add_cli_args on an argparse.ArgumentParser as
prepare_server_args does, and prints the option strings with their kinds (nargs 0: switch; "+" / "*": list) and
choices; this compares them with the table's options, KINDS and CHOICES for that release.

    python3 benchmarks/sglang_server_flags_check.py sglang-0.4.3-py3-none-any.whl ...

An sglang module whose own import raises under the stubs (0.5.2-0.5.18: model configs built and serialised at import
time, parallel_state, the fla utils) keeps what it bound before the error and stands in for the rest (the check names
them); server_args.py itself must run through, or the wheel is reported as not checked. A name server_args.py took from
such a module would read as a stand-in: its choices as none (a difference the check reports), an add_argument call
made there as missing (likewise). Run 2026-12-07 over the 93 wheels the table was read from: the 60 that import
without a stand-in (every 0.4.x with its post-releases, 0.5.0rc2, 0.5.1-0.5.1.post3, 0.5.19-0.5.23) match exactly;
session 50: the other 33 (0.5.2-0.5.18 with their post-releases) build their parsers with one to five sglang modules
stood in for (sglang.srt.configs.deepseek_ocr, .nemotron_h, distributed.parallel_state, layers.dp_attention,
layers.attention.fla.utils, multimodal.mm_utils) and match exactly too: every option string, kind and choice list.
"""

from __future__ import annotations

import abc
import argparse
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import types
import zipfile
from typing import Any

# modules other packages import inside try / except ImportError, or whose presence SGLang takes for a device
OPTIONAL = {
    "torch_npu",
    "habana_frameworks",
    "intel_extension_for_pytorch",
    "torch_musa",
    "mindspore",
    "simplejson",
    "chardet",
    "cchardet",
    "brotli",
    "brotlicffi",
    "socks",
    "zstandard",
    "h2",
    "ujson",
    "orjson",
    "_typeshed",
}


class _Base:
    """What a class derived from a stand-in derives from: it takes any class keyword (TypedDict's total=...)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__()


class _Stub(abc.ABCMeta):
    """A stand-in class: any attribute, call, item or arithmetic gives another; false, empty, zero."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(name, (_Base,), {})

    def __call__(cls, *a: Any, **k: Any) -> Any:
        return _Stub(cls.__name__, (_Base,), {})

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0

    def __float__(cls) -> float:
        return 0.0

    def __hash__(cls) -> int:
        return id(cls)

    def __eq__(cls, other: object) -> bool:
        return cls is other

    def __contains__(cls, other: object) -> bool:
        return False

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __setitem__(cls, key: Any, value: Any) -> None:
        return None

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __add__ = __radd__ = __mul__ = __rmul__ = __or__

    def __lt__(cls, other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __enter__(cls) -> Any:
        return cls

    def __exit__(cls, *a: Any) -> bool:
        return False

    def __mro_entries__(cls, bases: Any) -> tuple[type, ...]:
        return (_Base,)

    def register(cls, *a: Any, **k: Any) -> Any:
        return cls


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            return "2.9.0"
        if name in ("npu", "musa", "hpu") or name.startswith("__"):  # no such device
            raise AttributeError(name)
        return _Stub(name, (_Base,), {})


# installed here, but SGLang builds models of them over stubbed types at import: stubbed too
FORCED = {"pydantic"}


# the sglang modules whose own import raised under the stubs, with what it raised (--one prints them to stderr)
STUBBED_AFTER_FAILING: list[str] = []


class _Partial(importlib.abc.Loader):
    """An sglang module run for real; one whose import raises under the stubs (0.5.2-0.5.18: a model config built and
    serialised at import time) keeps the names it bound before the error and answers any other with a stand-in, so the
    modules server_args.py imports from load. server_args.py itself must run through: its error is raised."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            self.inner.exec_module(module)
        except Exception as e:  # noqa: BLE001  # any error: the module is stood in for, and said so
            if module.__name__ == "sglang.srt.server_args":
                raise
            STUBBED_AFTER_FAILING.append(f"{module.__name__} ({type(e).__name__})")
            module.__class__ = _StubModule


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.startswith("sglang.") and name.count(".") >= 2:  # sglang.srt.X: run for real, stood in for if it raises
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _Partial(spec.loader)
            return spec
        if name.split(".")[0] in ("sglang", *OPTIONAL):
            return None
        if name.split(".")[0] in FORCED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None
            except Exception:  # noqa: BLE001  # a finder that cannot answer: the next
                continue
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__spec__ = spec
        return module

    def exec_module(self, module: Any) -> None:
        return None


def parser_of(wheel: str) -> dict[str, tuple[str, list[str] | None]]:
    """The options the wheel's parser registers -> (kind, choices)."""
    root = tempfile.mkdtemp()
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py")])
    sys.path.insert(0, root)
    sys.meta_path.insert(0, _Finder())
    for pkg in ("sglang", "sglang.srt"):  # their __init__ imports the runtime: bare packages
        module = types.ModuleType(pkg)
        module.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = module
    import sglang.srt.server_args as server_args  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    out: dict[str, tuple[str, list[str] | None]] = {}
    for action in parser._actions:  # noqa: SLF001  # argparse keeps them there
        nargs = action.nargs
        many = nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)
        kind = "switch" if nargs == 0 else "list" if many else "value"
        choices = [str(c) for c in action.choices] if isinstance(action.choices, (list, tuple)) else None
        out.update({o: (kind, choices) for o in action.option_strings if o.startswith("--") and o != "--help"})
    return out


def compare(version: str, real: dict[str, Any]) -> list[str]:
    """What the table says of ``version`` that its parser does not."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sglang_server_flags import order  # type: ignore[import-not-found]

    from k3plan.engines.release import parse_post, parse_release
    from k3plan.engines.sglang.serve import option_kind, release_options
    from k3plan.engines.sglang.server_flags import CHOICES, RELEASES

    if version not in RELEASES:
        return [f"{version}: not a release the table read"]
    # (a 0.5.0 release candidate: the table's 0.5.0 is its last, 0.5.0rc2)
    number = version.split("rc")[0]
    opts = set(release_options(parse_release(number), 0 if "rc" in version else parse_post(version))[0]) - {"--help"}
    diffs = [f"only the parser: {o}" for o in sorted(set(real) - opts)]
    diffs += [f"only the table: {o}" for o in sorted(opts - set(real))]
    diffs += [
        f"kind of {o}: parser {real[o][0]}, table {option_kind(o, version)}"
        for o in sorted(set(real) & opts)
        if real[o][0] != option_kind(o, version)
    ]
    for flag, rows in CHOICES.items():
        said = next((c for a, b, c in rows if order(a) <= order(version) <= order(b)), None)
        if flag in real and said is not None and tuple(real[flag][1] or ()) != said:
            diffs.append(f"choices of {flag}: parser {real[flag][1]}, table {said}")
        if flag in real and said is None and real[flag][1]:
            diffs.append(f"choices of {flag}: parser {real[flag][1]}, the table read none")
    return diffs


def main() -> None:
    if sys.argv[1] == "--one":
        print(json.dumps(parser_of(sys.argv[2]), default=str))
        print("; ".join(STUBBED_AFTER_FAILING), file=sys.stderr)
        return
    for wheel in sys.argv[1:]:
        version = os.path.basename(wheel).split("-")[1]
        run = subprocess.run(
            [sys.executable, __file__, "--one", wheel], capture_output=True, text=True, timeout=120, check=False
        )
        if run.returncode != 0:
            print(f"{version}: not checked (its import fails under the stubs: {run.stderr.strip().splitlines()[-1]})")
            continue
        diffs = compare(version, json.loads(run.stdout))
        stubbed = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
        print(
            f"{version}: "
            + ("matches" if not diffs else "; ".join(diffs))
            + (f" (sglang modules stood in for after their import raised: {stubbed})" if stubbed else "")
        )


if __name__ == "__main__":
    main()
