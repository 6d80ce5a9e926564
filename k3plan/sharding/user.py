"""User ShardSpecs: ``FILE.yaml`` (tensor-name regex -> spec) or ``module:function``.

YAML::

    shardspecs:
      'language_model\\.lm_head\\.weight': [tp, null]
      '.*\\.q_proj\\.weight': [tp, null]

A spec lists one entry per checkpoint dimension of the tensor (experts: with the leading expert
axis): null (replicated), a mesh axis (tp, dp) or alias (ep), or a list of them. Patterns are
full-matched against inventory names, first match wins; unmatched tensors follow the stack's
rules. A callable returns {tensor name: spec} directly, so a team can point k3plan at its loader.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import signal
import threading
from pathlib import Path
from typing import Iterator

from k3plan.errors import K3PlanError
from k3plan.models.inventory import TensorInventory
from k3plan.safeparse import not_a_file
from k3plan.specfile import read_yaml_mapping


def _call_user_function(ref: str) -> dict:
    """Import `module`, call `function()`, guarded: whatever the user's code does (raises, has a
    syntax error, recurses, calls sys.exit, returns the wrong thing) is one line naming it."""
    mod_name, _, fn_name = ref.partition(":")
    if not mod_name.strip() or not fn_name.strip():
        raise K3PlanError(f"--shardspecs {ref!r}: expected module:function with both parts, e.g. mypkg.shard:specs")
    try:
        module = importlib.import_module(mod_name)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's module runs here: anything can happen
        raise K3PlanError(f"--shardspecs {ref}: cannot load module {mod_name!r}: {_why(err)}") from None
    fn = getattr(module, fn_name, None)
    if fn is None:
        raise K3PlanError(f"--shardspecs {ref}: cannot load {fn_name!r}: module {mod_name!r} has no such name")
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        what = "a built-in" if inspect.isbuiltin(fn) else type(fn).__name__
        raise K3PlanError(
            f"--shardspecs {ref}: {fn_name!r} in module {mod_name!r} is {what}, not a Python "
            "function; expected a function taking no arguments that returns {tensor name: spec}"
        )
    try:
        raw = fn()
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's function: anything can happen
        raise K3PlanError(f"--shardspecs {ref}: {mod_name}.{fn_name}() failed: {_why(err)}") from None
    if not isinstance(raw, dict):
        raise K3PlanError(
            f"--shardspecs {ref}: {mod_name}.{fn_name}() returned {type(raw).__name__}; it must return a "
            "dict of tensor name (str) -> spec"
        )
    bad = [k for k in raw if not isinstance(k, str)]
    if bad:
        raise K3PlanError(
            f"--shardspecs {ref}: {mod_name}.{fn_name}() returned a dict with key {_short(bad[0])}; "
            "expected tensor names (str) as keys"
        )
    return raw


def _why(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r})"
    if isinstance(err, SyntaxError):
        return f"syntax error in {err.filename} line {err.lineno}: {err.msg}"
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {_short(text, 160)}" if text else type(err).__name__


def _short(value, limit: int = 60) -> str:
    text = value if isinstance(value, str) and limit > 60 else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_spec(where: str, spec) -> tuple:
    if not isinstance(spec, (list, tuple)) or not all(
        e is None or isinstance(e, str) or (isinstance(e, (list, tuple)) and all(isinstance(a, str) for a in e))
        for e in spec
    ):
        raise K3PlanError(f"{where}: expected a list of null, a mesh axis name, or a list of names; got {_short(spec)}")
    return tuple(tuple(e) if isinstance(e, list) else e for e in spec)


# every pattern against every tensor name: a few ms for a real file; a pattern with a repeat inside a repeat
# ((a+)+b against 30 a's) backtracked for minutes, a hang with no word
MATCH_SECONDS = 2.0


class _TookTooLong(Exception):
    pass


@contextlib.contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    """Raise _TookTooLong in the block after ``seconds`` (re's matcher checks for signals as it backtracks). A
    SIGALRM timer, so on the main thread of a POSIX process only; elsewhere the block runs unbounded."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _TookTooLong()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load_user_specs(ref: str, inventory: TensorInventory) -> dict[str, tuple]:
    """-> {inventory tensor name: partition}."""
    if not ref.strip():
        raise K3PlanError("--shardspecs is empty; expected FILE.yaml or module:function")
    if ":" in ref and not Path(ref).exists():
        raw = _call_user_function(ref)
        known = {t.name for t in inventory.text}
        unknown = [n for n in raw if n not in known]
        if unknown:
            raise K3PlanError(
                f"--shardspecs {ref}: {len(unknown)} name(s) not in the inventory, e.g. {_short(unknown[0])}"
            )
        return {n: _check_spec(f"--shardspecs {ref} [{n}]", s) for n, s in raw.items()}
    path = Path(ref).expanduser()
    if not path.is_file():
        raise K3PlanError(f"--shardspecs {ref}: {not_a_file(path)}; expected FILE.yaml or module:function")
    data = read_yaml_mapping(f"--shardspecs {path}", path)
    if not isinstance(data.get("shardspecs"), dict):
        raise K3PlanError(f"--shardspecs {path}: expected a mapping with a 'shardspecs' key of pattern -> spec")
    rules = []
    for pattern, spec in data["shardspecs"].items():
        if not isinstance(pattern, str):
            raise K3PlanError(
                f"--shardspecs {path}: pattern {_short(pattern)} is not a string; expected a quoted "
                "regex over tensor names"
            )
        try:
            rules.append((re.compile(pattern), _check_spec(f"--shardspecs {path} [{pattern}]", spec)))
        except re.error as err:
            raise K3PlanError(f"--shardspecs {path}: bad pattern {pattern!r}: {err}") from None
    out: dict[str, tuple] = {}
    at = ["", ""]  # the pattern and the tensor name being matched, for the time bound's message
    try:
        with _time_bound(MATCH_SECONDS):
            for t in inventory.text:
                for rx, spec in rules:
                    at[:] = [rx.pattern, t.name]
                    if rx.fullmatch(t.name):
                        out[t.name] = spec
                        break
    except _TookTooLong:
        raise K3PlanError(
            f"--shardspecs {path}: pattern {at[0]!r} took more than {MATCH_SECONDS:g} s against {at[1]!r}: a "
            "repeat inside a repeat ((a+)+, (.*x)*) backtracks exponentially; expected a pattern without one"
        ) from None
    if rules and not out:
        raise K3PlanError(f"--shardspecs {path}: no pattern matches any tensor of the model")
    return out
