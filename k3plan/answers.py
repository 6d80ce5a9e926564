"""A repeated question answered from the answer cache, before typer and pydantic are imported.

`k3plan fit` is a pure function of its command line, its environment, the terminal it writes to and
the files it reads. The first run of a question records, beside its output and exit code, what it
read: every file it opened (content hash), every folder it listed (the names in it), every path it
looked at (stat: there or not, file or folder), every module it imported (size, mtime) and the
folders an import looks in (their names). A later run with the same command line, folder,
environment, terminal and interpreter options answers from that record when every one of those paths
still looks the same; else it runs the command afresh and records the new answer. Modelled on build
tools' caches (ninja's, mypy's): a stale answer needs a read that Python's audit events and
``os.stat`` do not see, and no command cached here makes one (no network, no clock, no standard
input; a run that writes a file, starts a process, reads standard input, writes bytes past the text
streams, runs the user's code (``not_kept``), gets a Ctrl-C or sees a file it read change while it
runs is not kept at all).

Where: ``$K3PLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/k3plan``, else ``~/.cache/k3plan``; the answers
are in its ``answers/`` folder (at most ``KEEP`` of them; delete it any time). ``--no-cache`` or
``K3PLAN_NO_CACHE=1`` neither reads nor writes it. Only exit codes 0 and 1 (a verdict) are kept.

This module imports only the standard library: the whole of a cache hit is Python's start, this file
and the stats it checks (benchmarks/bench_fit.py times both).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

CACHED_COMMANDS = frozenset({"fit"})
NO_CACHE_FLAG = "--no-cache"
NO_CACHE_ENV = "K3PLAN_NO_CACHE"
CACHE_DIR_ENV = "K3PLAN_CACHE_DIR"
RANK = {"stat": 0, "module": 0, "read": 1, "list": 1}  # a path read or listed is checked as such
# a folder on sys.path checked for the names an import of these modules would find there
IMPORTABLE = "importable"
KEEP = 256  # answers kept; the oldest go first
FORMAT = 3  # bump when a record's layout or what it checks changes (an older record is not trusted)
MAX_READ_BYTES = 64 << 20  # a run that reads more than this is not cached (hashing it would cost more)
MAX_RECORD_BYTES = MAX_READ_BYTES  # a record is read whole on each ask: no larger than what a run may read
# module files: checked by size and mtime (there are ~600 of them; the interpreter's own check is the same)
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
# A file's mtime is the kernel's coarse clock (Linux current_time -> ktime_get_coarse_real_ts64), behind
# time.time_ns() by up to a tick (1/HZ, HZ >= 100): a file written after a run started has an mtime past
# its start less this.
FILE_CLOCK_TICK_NS = 10_000_000
# audit events after which a run's answer is not a function of what was recorded
TAINTS = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.fork",
    "socket.connect",
    "socket.getaddrinfo",
    "os.chdir",
)


def cache_dir() -> Path | None:
    """Where the answers are kept; None where there is no home folder to keep them in."""
    root = os.environ.get(CACHE_DIR_ENV)
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec: a relative path is to be ignored
        return Path(xdg) / "k3plan"
    try:
        return Path.home() / ".cache" / "k3plan"
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        return None


def enabled(args: list[str]) -> bool:
    """The command is one whose answer is cached, and the user did not turn the cache off."""
    if not args or args[0] not in CACHED_COMMANDS or os.environ.get(NO_CACHE_ENV, "") not in ("", "0"):
        return False
    return NO_CACHE_FLAG not in args and "--help" not in args and "-h" not in args


def key(args: list[str]) -> str:
    """Everything a run's answer depends on besides the files it reads."""

    def terminal(stream: Any) -> list[Any]:
        # the bytes a text reaches the stream as: `python -X utf8=0` under LC_ALL=C gets an ASCII stdout
        # from the same environment that gives `python` a UTF-8 one (PEP 540)
        coding = [getattr(stream, "encoding", None), getattr(stream, "errors", None)]
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            return [*coding, None]
        if not os.isatty(fd):
            return [*coding, False]
        try:
            return [*coding, True, *os.get_terminal_size(fd)]
        except OSError:
            return [*coding, True]

    parts = [
        FORMAT,
        *interpreter(),
        args,
        os.getcwd(),
        sorted(os.environ.items()),
        terminal(sys.stdout),
        terminal(sys.stderr),
        terminal(sys.stdin),  # rich takes a terminal's size from stdin first (rich.console.Console.size)
    ]
    return digest(parts, 20)


def interpreter() -> list[Any]:
    """k3plan's version and the interpreter that runs it: its build, path, import path and options
    (-O, -X, -W, -E ...: none of them is in the environment)."""
    from k3plan import __version__

    return [__version__, sys.version, sys.executable, sys.path, list(sys.flags), sys.warnoptions, sys._xoptions]


def digest(parts: list[Any], size: int) -> str:
    """A hash of JSON-able ``parts`` (names in any encoding the system gave them), ``size`` bytes as hex."""
    return hashlib.blake2b(json.dumps(parts).encode("utf-8", "surrogateescape"), digest_size=size).hexdigest()


def fingerprint(path: str, how: str, was: Any = None) -> list[Any]:
    """What a path looks like now: ``how`` is 'read' (a file's content hash), 'list' (the names in a
    folder), 'stat' or 'module' (there or not; a file's size and mtime). ``was``, what it looked like
    when recorded: a file of another size is not read again."""
    try:
        st = os.stat(path)
    except OSError:
        return ["missing"]
    if stat.S_ISDIR(st.st_mode):
        if how != "list" and not how.startswith(IMPORTABLE):
            return ["dir"]
        try:
            names = os.listdir(path)
        except OSError:
            return ["dir", None]
        if how != "list":  # only the names an import of one of these would find
            stems = set(how.split()[1:])
            names = [n for n in names if n.partition(".")[0] in stems]
        names = sorted(n for n in names if n != "__pycache__")  # the import system's, as it compiles
        return ["dir", hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()]
    if not stat.S_ISREG(st.st_mode):  # a pipe, a device (/dev/stdin): what it gave cannot be checked again
        return ["special"]
    if how == "read" and not path.endswith(MODULE_SUFFIXES):
        if was is not None and was[:2] != ["file", st.st_size]:
            return ["file", st.st_size]
        try:
            digest = _content_hash(path)
        except OSError:
            return ["unreadable"]
        return ["special"] if digest is None else ["file", st.st_size, digest]
    return ["file", st.st_size, st.st_mtime_ns]


def _regular(path: str | Path) -> Any:
    """``path`` opened for reading (binary) where it is a regular file, else None. O_NONBLOCK: a FIFO put
    in its place since it was looked at does not block the open (and is not read)."""
    f = open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb")
    if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        return f
    f.close()
    return None


def _content_hash(path: str) -> str | None:
    """The hash of a regular file's content, read a MiB at a time; None where ``path`` is no such file."""
    f = _regular(path)
    if f is None:
        return None
    with f:
        h = hashlib.blake2b(digest_size=16)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        return h.hexdigest()


def _absolute(path: str) -> str:
    """``path`` from the root, its ``..`` kept: the system resolves ``link/..`` to the link target's
    parent, where os.path.abspath would drop both (and check another file)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def _bytecode(path: str) -> bool:
    """A module's compiled code: ``x.pyc``, or ``x.pyc.<id>`` as the import system writes it
    (importlib._bootstrap_external._write_atomic, then renamed to ``x.pyc``)."""
    return path.endswith(".pyc") or (".pyc." in path and path.rpartition(".pyc.")[2].isdigit())


_HOOKED = False
_ACCESSOR: Any = getattr(sys.modules["pathlib"], "_NormalAccessor", None)  # pathlib's file operations, to 3.10
_RUNNING: list[Recorder] = []


class Recorder:
    """What one run reads, from Python's audit events and ``os.stat``/``os.lstat`` (existence checks
    raise no audit event), and whether it did anything that makes its answer not worth keeping."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        self.tainted = ""
        self.active = False
        self.read_bytes = 0
        self._stat: Callable[..., Any] = os.stat
        self._lstat: Callable[..., Any] = os.lstat
        self._sigint = False  # our SIGINT handler is installed
        self.first: dict[str, list[Any]] = {}  # path -> its fingerprint when the run first came to it
        self.started_ns = 0
        self.imported: set[str] = set()  # top-level names the run imported (or tried to)
        import threading  # the record path only: typer imports it anyway

        self._looking = threading.local()  # per thread: a run's other threads are seen while one looks

    def _see(self, path: Any, how: str) -> None:
        # a tainted run is not kept: no need to look; what this thread does while looking is not the run's
        if isinstance(path, int) or path is None or self.tainted or getattr(self._looking, "now", False):
            return
        try:
            p = _absolute(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        except OSError:  # a relative path with the working folder gone: nothing to check it by
            self.tainted = "no working folder"
            return
        old = self.paths.get(p)
        if old is None or RANK[how] > RANK[old]:
            self.paths[p] = how
            self._looking.now = True  # what it looks like as the run comes to it
            try:
                if how == "read" and not p.endswith(MODULE_SUFFIXES):
                    try:
                        self.read_bytes += os.stat(p).st_size
                    except OSError:
                        pass
                    if self.read_bytes > MAX_READ_BYTES:  # not kept: not hashed either
                        self.tainted = f"read more than {MAX_READ_BYTES} bytes"
                        return
                self.first[p] = fingerprint(p, how)
            finally:
                self._looking.now = False

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if isinstance(path, str) and _bytecode(path):  # an import's: its module's file is checked
                return
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            if writes and not isinstance(path, int):
                self.tainted = f"wrote {path}"
            self._see(path, "read")
        elif event in ("os.listdir", "os.scandir"):
            if args and isinstance(args[0], int):  # a folder by its descriptor (os.fwalk): no path to check
                self.tainted = f"{event} of a descriptor"
            self._see(args[0] if args and args[0] not in (None, "") else ".", "list")
        elif event.startswith(TAINTS):
            self.tainted = event

    def start(self) -> None:
        global _HOOKED
        if not _HOOKED:  # a hook stays for the process: one, handing events to the recorder running
            sys.addaudithook(lambda event, args: _RUNNING[-1]._audit(event, args) if _RUNNING else None)
            _HOOKED = True
        _RUNNING.append(self)
        self.started_ns = time.time_ns()
        recorder = self

        def watched(real: Callable[..., Any]) -> Callable[..., Any]:
            def look(path: Any, *a: Any, **k: Any) -> Any:
                if recorder.active:
                    recorder._see(path, "stat")
                return real(path, *a, **k)

            return look

        stat_ = watched(self._stat)
        os.stat, os.lstat = stat_, watched(self._lstat)  # type: ignore[assignment]
        sys.meta_path.insert(0, self)  # asked first of every import (importlib.import_module's too): find_spec
        if _ACCESSOR is not None:  # Python 3.10: Path.stat calls the os.stat this class took when imported
            _ACCESSOR.stat = staticmethod(stat_)
        self._catch_interrupts()
        self.active = True

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        """A top-level module the run imports, found or not (see prints()); the finders after this one find it."""
        if path is None and self.active:
            self.imported.add(name)

    def _catch_interrupts(self) -> None:
        """A Ctrl-C during the run taints it, whatever becomes of the KeyboardInterrupt: click's main
        turns one into "Aborted!" and exit 1 (typer 0.29's copy of it: exit 130), kept as a verdict."""
        import signal

        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # ignored, or someone else's
            return

        def interrupted(signum: int, frame: Any) -> None:
            self.tainted = "interrupted"
            signal.default_int_handler(signum, frame)

        try:
            signal.signal(signal.SIGINT, interrupted)
            self._sigint = True
        except ValueError:  # not the main thread
            pass

    def stop(self) -> None:
        self.active = False
        _RUNNING.remove(self)
        os.stat, os.lstat = self._stat, self._lstat  # type: ignore[assignment]
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if _ACCESSOR is not None:
            _ACCESSOR.stat = self._stat
        if self._sigint:
            import signal

            signal.signal(signal.SIGINT, signal.default_int_handler)

    def prints(self) -> list[list[Any]]:
        """Every path seen and every path of the imports (import_paths), with what it looks like now."""
        seen = import_paths(dict(self.paths), set(self.imported))
        out: list[list[Any]] = []
        for p, how in sorted(seen.items()):
            fp = fingerprint(p, how)
            if self.paths.get(p) == how and self.first.get(p) != fp:  # looked at as the run did, at its start
                self.tainted = f"{p} changed during the run"
            elif how == "module" and fp[0] == "file" and fp[2] >= self.started_ns - FILE_CLOCK_TICK_NS:
                self.tainted = f"{p} written during the run"  # a module loaded from its .pyc is not opened
            out.append([p, how, fp])
        return out


def import_paths(seen: dict[str, str], tops: set[str], cwd: str | None = None) -> dict[str, str]:
    """``seen`` (path -> how it is checked) with every imported module's file and every folder an import
    looks in (a module put in one ahead of where it was found would be imported instead): the folders on
    sys.path and those of the modules by their names; the working folder (``cwd``, this process's unless
    given: a warm server's is that of the run that started it), where files come and go, by the names of
    the modules imported (``tops`` and those in sys.modules)."""
    cwd = os.getcwd() if cwd is None else cwd
    folders = {cwd if p in ("", ".") else _absolute(p) for p in sys.path if isinstance(p, str)}
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str):
            f = _absolute(f)
            seen.setdefault(f, "module")
            folders.add(os.path.dirname(f))
            tops.add(name.partition(".")[0])
    for d in folders:
        if RANK.get(seen.get(d, ""), -1) < RANK["list"]:
            seen[d] = "list" if d != cwd else " ".join([IMPORTABLE, *sorted(tops)])
    return seen


USER_CODE_RAN = False  # not_kept was called in this process (k3plan.warm starts no server after it)


def not_kept(reason: str) -> None:
    """Called before code whose reads the recorder cannot see (a user's ``module:function`` may read
    through C, SQLite, a GPU library...): the answer of the run in progress, if recorded, is not kept."""
    global USER_CODE_RAN
    USER_CODE_RAN = True
    if _RUNNING:
        _RUNNING[-1].tainted = reason


class Tee:
    """A text stream that keeps a copy of what is written through it, in ``chunks`` shared with the
    other stream (so that stdout and stderr replay in the order they were written)."""

    def __init__(self, stream: Any, recorder: Recorder, chunks: list[tuple[Tee, str]]) -> None:
        self._stream, self._recorder, self._chunks = stream, recorder, chunks

    def write(self, s: str) -> int:
        n = int(self._stream.write(s))  # what the stream refused is no output (click writes b"" to probe it)
        self._chunks.append((self, s))
        return n

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":  # bytes past the text layer: not in the copy
            self._recorder.tainted = "wrote bytes"
        return getattr(self._stream, name)

    def encode(self, text: str) -> str:
        """``text`` as the bytes it reached the stream as (its encoding and error handler at the end of
        the run, as the CLI set them for an ASCII terminal), held as Latin-1 text: one character a byte."""
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        errors = getattr(self._stream, "errors", None) or "strict"
        return text.encode(encoding, errors).decode("latin-1")


def _replay(stream: Any, data: str) -> None:
    """Write recorded bytes (Tee.encode) to ``stream``."""
    raw = data.encode("latin-1")
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.write(raw.decode(getattr(stream, "encoding", None) or "utf-8", "replace"))
    else:
        stream.flush()
        buffer.write(raw)
    stream.flush()


def _load(path: Path) -> dict[str, Any] | None:
    """The record at ``path`` if it is one this module wrote and every path it names still looks as it
    did; else None. Whatever is there, it is read no further than MAX_RECORD_BYTES and never waited on."""
    try:
        f = _regular(path)
        if f is None:
            return None
        with f:
            owner = os.fstat(f.fileno()).st_uid
            text = f.read(MAX_RECORD_BYTES + 1)
        if hasattr(os, "geteuid") and owner != os.geteuid():  # another user's, in a shared folder: untrusted
            return None
        if len(text) > MAX_RECORD_BYTES:
            return None
        rec = json.loads(text.decode("utf-8"))
        if rec.get("format") != FORMAT or type(rec.get("rc")) is not int or rec["rc"] not in (0, 1):
            return None
        for fd, data in rec["output"]:
            if type(fd) is not int or fd not in (1, 2) or not isinstance(data, str):
                return None
            data.encode("latin-1")  # what Tee.encode wrote: a byte a character (UnicodeEncodeError else)
        for p, how, fp in rec["prints"]:
            if not isinstance(p, str) or fingerprint(p, how, fp) != fp:
                return None
        return rec  # type: ignore[no-any-return]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # RecursionError: [[[[...
        return None


def _save(path: Path, rec: dict[str, Any]) -> None:
    """Written to a temporary file and renamed (a reader never sees half a record); the oldest
    records beyond KEEP are removed. A cache that cannot be written is no error: the answer was given."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(rec)
        if len(text) > MAX_RECORD_BYTES:  # _load would not read it
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:  # a full disk or a Ctrl-C mid-write leaves no temporary file behind
            if tmp.exists():
                tmp.unlink()
        records = [e for e in os.scandir(path.parent) if e.name.endswith(".json")]
        if len(records) > KEEP:
            records.sort(key=lambda e: e.stat().st_mtime_ns)
            for e in records[: len(records) - KEEP]:
                os.unlink(e.path)
    except OSError:
        pass


def _exit_code(err: SystemExit) -> int | None:
    code = err.code
    return 0 if code is None else code if isinstance(code, int) else None


def _where(args: list[str]) -> Path | None:
    """The record of this question's answer, where the command is a cached one and a cache is kept."""
    root = cache_dir() if enabled(args) else None
    if root is None:
        return None
    try:
        return root / "answers" / f"{key(args)}.json"
    except OSError:  # no working folder (removed under the shell): worked out, as without a cache
        return None


def replay(args: list[str]) -> Path | None:
    """Answer ``k3plan ARGS`` from the cache and exit, where it holds this question's answer and nothing
    it read has changed; else return where its record goes (None: not kept), for record."""
    where = _where(args)
    rec = None if where is None else _load(where)
    if rec is not None:
        # a reader gone (`| head -1`) or a stream that refuses the bytes: k3plan.__main__ answers it, as for a run
        for fd, data in rec["output"]:
            _replay(sys.stdout if fd == 1 else sys.stderr, data)
        sys.exit(rec["rc"])
    return where


def run(args: list[str], cli: Callable[[list[str]], object]) -> NoReturn:
    """Answer ``k3plan ARGS``: from the cache (replay), else by ``cli(args)`` (record)."""
    record(args, cli, replay(args))


def record(args: list[str], cli: Callable[[list[str]], object], where: Path | None) -> NoReturn:
    """Answer ``k3plan ARGS`` by ``cli(args)``, recorded at ``where`` (replay's; None: not kept)."""
    if where is None:
        cli(args)
        sys.exit(0)
    recorder = Recorder()
    real_out, real_err = sys.stdout, sys.stderr
    chunks: list[tuple[Tee, str]] = []
    out, err = Tee(real_out, recorder, chunks), Tee(real_err, recorder, chunks)
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    recorder.start()
    code: int | None = None
    try:
        cli(args)
        code = 0
    except SystemExit as done:
        code = _exit_code(done)
        raise
    finally:
        recorder.stop()
        sys.stdout, sys.stderr = real_out, real_err
        if code in (0, 1) and not recorder.tainted:
            _keep(where, args, code, recorder, out, chunks)
    sys.exit(0)


def _keep(where: Path, args: list[str], code: int, recorder: Recorder, out: Tee, chunks: list[tuple[Tee, str]]) -> None:
    """Save the record of a run that gave ``code``; a run whose reads cannot be checked is not kept."""
    try:
        prints = recorder.prints()
    except OSError:  # the working folder went away during the run
        return
    if recorder.tainted:  # something it read changed while it ran: what it printed may be of either
        return
    try:
        output = [[1 if tee is out else 2, tee.encode(text)] for tee, text in chunks]
    except UnicodeError:  # it could not have been printed either
        return
    special = any(fp == ["special"] for _, how, fp in prints if how == "read")
    if not special:
        _save(where, {"format": FORMAT, "args": args, "rc": code, "output": output, "prints": prints})
