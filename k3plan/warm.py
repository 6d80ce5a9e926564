"""A new question answered by a warm k3plan: the client side of the warm server (k3plan.warm_server).

Most of a fresh `k3plan fit` is Python importing k3plan, typer and pydantic and pydantic building
k3plan's model classes (benchmarks/README.md: ~0.35 s of a 0.44 s fit); the answer itself takes
~0.08 s. So, as mypy's daemon, Gradle's and nailgun do, the first run of a fast command starts, when
it is done, a server in the background that imports what the run imported and then waits; a later
run of the same interpreter, options and environment hands it its command line, folder, environment
and its own stdin, stdout and stderr (the descriptors themselves: a terminal stays a terminal), and
the server forks a worker that runs the command there as a fresh process would, from the same code.
The client imports only the standard library.

A run is its own answer whichever way it goes: the worker starts from the server's imports only (no
command has run in the server, so no cache of a previous answer is in it); a server whose modules or
import folders changed (an upgrade, an edit) answers no more and stops; one that hears nothing for
``IDLE_S`` seconds (``K3PLAN_SERVER_IDLE``) stops. ``K3PLAN_NO_SERVER=1`` neither uses nor starts
one; `k3plan server status` lists them and `k3plan server stop` stops them. Linux only (descriptors
passed over a Unix socket, the peer's user checked by SO_PEERCRED).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import struct
import sys
from pathlib import Path
from typing import Any, Callable

# the fast paths (README): a command that writes a report or gates CI gains as much as fit
SERVED_COMMANDS = frozenset({"fit", "plan", "curve", "roofline", "check", "report", "models", "hardware"})
NO_SERVER_ENV = "K3PLAN_NO_SERVER"
IDLE_ENV = "K3PLAN_SERVER_IDLE"
IDLE_S = 600.0
FORMAT = 2  # bump when the protocol or what a server checks changes
# variables a shell changes as it moves about, which no module reads at import: not part of a server's identity
# (PYENV_DIR: pyenv exports the working folder in it on every run of a shim, pyenv/pyenv libexec/pyenv)
VOLATILE_ENV = frozenset({"PWD", "OLDPWD", "_", "SHLVL", "PYENV_DIR"})
# where modules that start threads, or take seconds to import, would be imported by a server (fork after threads)
NOT_PRELOADED = frozenset({"jax", "jaxlib", "torch", "tensorflow", "libtpu"})
SOCKET_PATH_MAX = 107  # sockaddr_un.sun_path less its terminating NUL (Linux)
# the server's exit code for a worker it lost track of (sysexits' EX_SOFTWARE)
EXIT_LOST = 70
# how long a run waits for a server's first reply (it answers in milliseconds): one stopped (SIGSTOP), hung or not
# k3plan's at the socket is given up on, and the run worked out here; the run's streams go only to one that replied
REPLY_S = 5.0
WORKER = False  # set in a server's worker: it neither asks a server nor starts one
# this process as it started (ask): its identity, environment and import path, which the run changes (k3plan.cli.app.main
# sets PYDANTIC_DISABLE_PLUGINS); the server start_server starts is that of the process that asked
_ASKED: dict[str, Any] = {}

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# what a worker calls once the asking run's streams, environment and folder are its own (k3plan.warm_server): the
# objects a module built at import from the process's streams (k3plan.cli.common's consoles) built again for the run's
_ON_NEW_STREAMS: list[Callable[[], None]] = []


def on_new_streams(build: Callable[[], None]) -> None:
    """Have a warm server's worker call ``build`` once its streams are those of the run it answers."""
    _ON_NEW_STREAMS.append(build)


def new_streams() -> None:
    """In a worker: rebuild what was built from the server's streams (on_new_streams)."""
    for build in _ON_NEW_STREAMS:
        build()


def allowed() -> bool:
    """The user did not turn warm servers off, and this is a system they run on."""
    return os.environ.get(NO_SERVER_ENV, "") in ("", "0") and sys.platform.startswith("linux")


def enabled(args: list[str]) -> bool:
    """This run may be answered by (and may start) a warm server."""
    if not args or args[0] not in SERVED_COMMANDS or WORKER or not allowed():
        return False
    if not hasattr(socket, "send_fds") or not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return False
    # a relative folder on the import path is one of the folder a process runs in: a server's would differ
    # (a name that is no folder, as an editable install's path hook, means the same anywhere)
    if any(
        not isinstance(p, str) or (not os.path.isabs(p) and (p in ("", ".") or os.path.exists(p))) for p in sys.path
    ):
        return False
    return all(s is not None for s in (sys.__stdin__, sys.__stdout__, sys.__stderr__))


def identity() -> str:
    """What a server's imports depend on: the interpreter, its options and import path, k3plan's
    version, the user and the environment (less the variables a shell changes as it moves about)."""
    from k3plan.answers import digest, interpreter

    env = sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV)
    return digest([FORMAT, *interpreter(), os.geteuid(), env], 12)


def folder() -> Path | None:
    """Where the servers' sockets are: the answer cache's folder (k3plan.answers.cache_dir), ``warm/``."""
    from k3plan.answers import cache_dir

    root = cache_dir()
    return None if root is None else root / "warm"


def socket_path(ident: str) -> Path | None:
    """The socket of the server of ``ident``; None where the folder is not this user's alone (a cache folder
    shared with others: their links there could point the server's log or lock at the user's files)."""
    where = folder()
    if where is None:
        return None
    try:
        st = os.lstat(where)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
    except FileNotFoundError:  # start_server makes it
        pass
    except OSError:
        return None
    path = where / f"{ident}.sock"
    return path if len(os.fsencode(path)) <= SOCKET_PATH_MAX else None


def idle_s() -> float:
    """Seconds a server waits for a question before it stops (``K3PLAN_SERVER_IDLE``, default ``IDLE_S``)."""
    text = os.environ.get(IDLE_ENV, "")
    if not text:
        return IDLE_S
    try:
        idle = float(text)
    except ValueError:
        idle = float("nan")
    if not 0 < idle < 1e7:
        raise ValueError(
            f"{IDLE_ENV} is {text!r}; expected the seconds a warm server waits for a question, "
            f"a number > 0 and < 10000000 (default {IDLE_S:.0f})"
        )
    return idle


def peer_uid(s: socket.socket) -> int:
    """The user of the process at the other end of the Unix socket ``s`` (SO_PEERCRED)."""
    _, uid, _ = _PEERCRED.unpack(s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return int(uid)


def connect(path: Path) -> socket.socket | None:
    """A connection to the server at ``path``, run by this user; None where there is none."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(os.fspath(path))
        if peer_uid(s) == os.geteuid():
            return s
    except OSError:
        pass
    s.close()
    return None


def send(s: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """A message: its length (4 bytes) and its JSON; ``fds`` travel with its first bytes."""
    data = json.dumps(message).encode("utf-8", "surrogateescape")
    data = struct.pack("!I", len(data)) + data
    sent = socket.send_fds(s, [data], fds) if fds else s.send(data)
    if sent < len(data):  # (a sendall of nothing fails where the server has answered and closed already)
        s.sendall(data[sent:])


def _stream(stream: Any) -> dict[str, Any]:
    """How a standard stream turns text into bytes, to be built the same in the worker."""
    return {
        "encoding": stream.encoding,
        "errors": stream.errors,
        "line_buffering": stream.line_buffering,
        "write_through": getattr(stream, "write_through", False),
    }


def _lines(s: socket.socket) -> Any:
    """The server's replies, a line each: ``A`` (send the streams), ``P<pid>`` (the worker started), ``R<code>``
    (it ended; ``R-N``: killed by signal N), ``S`` (this server answers no more: work it out here)."""
    buf = b""
    while True:
        while b"\n" not in buf:
            try:
                chunk = s.recv(64)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            except OSError:  # a reply that did not come in time (REPLY_S), or a connection reset
                return
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield line.decode("ascii", "replace")


def ask(args: list[str]) -> int | None:
    """The exit code of ``k3plan ARGS`` run by a warm server's worker on this process's streams; None
    where no server took it (there is none, it is stale, or this run may not use one)."""
    if not enabled(args):
        return None
    try:
        idle_s()
    except ValueError as err:  # bad input: one line, exit 2, as for a bad option
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)
    try:
        ident = identity()
        path = socket_path(ident)
        cwd = os.getcwd()
    except OSError:  # no working folder (removed under the shell)
        return None
    _ASKED.update(identity=ident, env=dict(os.environ), path=list(sys.path), cwd=cwd)
    if path is None:
        return None
    s = connect(path)
    if s is None:
        return None
    with s:
        request = {
            "op": "run",
            "argv": [sys.argv[0], *args],
            "cwd": cwd,
            "env": dict(os.environ),
            "umask": _umask(),
            "streams": [_stream(x) for x in (sys.__stdin__, sys.__stdout__, sys.__stderr__)],
        }
        replies = _lines(s)
        try:  # the streams go to a server that replied in time only (one that hangs would hold them open)
            s.settimeout(REPLY_S)
            send(s, request)
            if next(replies, "S") != "A":  # stale, or not a k3plan server of this format
                return None
            socket.send_fds(s, [b"F"], [0, 1, 2])
            first = next(replies, "S")
            worker = int(first[1:]) if first.startswith("P") else 0
            pidfd = os.pidfd_open(worker) if worker > 0 else -1
        except (OSError, ValueError):
            return None
        if pidfd < 0:  # gone before it began: nothing was written yet
            return None
        s.settimeout(None)
        with os.fdopen(pidfd, "rb", buffering=0):
            previous = _forward_signals(pidfd)
            try:  # the server's word, or the worker's end, whichever comes first: a worker that ended has its
                # exit code said at once, by a server that is not stopped or hung (else: exit 70, not a wait for ever)
                if s not in select.select([s, pidfd], [], [])[0]:
                    s.settimeout(REPLY_S)
                last = next(replies, "")
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            if not last.startswith("R"):  # the server died: its worker writes on this run's streams no more
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except OSError:
                    pass
    if last.startswith("R-"):  # the worker was killed by a signal: so is this process, as a fresh one would be
        _die_of(int(last[2:]))
    if last.startswith("R"):
        return int(last[1:])
    sys.stderr.write(
        f"error: the warm k3plan server stopped before its worker (pid {worker}) said how it ended; "
        f"run again, or set {NO_SERVER_ENV}=1 to run without it\n"
    )
    return EXIT_LOST


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _die_of(signum: int) -> None:
    """End this process by signal ``signum`` (its parent sees what a fresh run's would); a signal that does not
    end a process is an exit code of 128 + N, as shells say."""
    try:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    sys.exit(128 + signum)


def _forward_signals(pidfd: int) -> dict[int, Any]:
    """Ctrl-C (and a terminate or a hang-up) sent to this process go to the worker, which answers
    them as a run of its own would (one line, exit 130); this process waits for its exit code. Ctrl-Z
    stops the worker with this process, and `fg` or `bg` (SIGCONT) continues both."""
    previous: dict[int, Any] = {}

    def forward(signum: int, frame: Any) -> None:
        try:
            if signum != signal.SIGTSTP:
                signal.pidfd_send_signal(pidfd, signum)
                return
            signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
            signal.signal(signal.SIGTSTP, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTSTP)  # this process stops here, until a SIGCONT
            signal.signal(signal.SIGTSTP, forward)
            signal.pidfd_send_signal(pidfd, signal.SIGCONT)
        except OSError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
        try:
            previous[sig] = signal.signal(sig, forward)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass
    return previous


def preloadable(names: list[str]) -> list[str]:
    """The modules a server imports: those of a run's, in the order it imported them, that come from
    the standard library, an installed distribution or k3plan itself (never the user's own code, nor
    the modules that start threads)."""
    import site
    import sysconfig

    import k3plan

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    roots.add(os.path.dirname(os.path.abspath(k3plan.__file__)))
    roots = {os.path.join(os.path.abspath(r), "") for r in roots if r}
    keep = []
    for name in names:
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        if name == "__main__" or not isinstance(f, str) or name.partition(".")[0] in NOT_PRELOADED:
            continue
        if any(os.path.abspath(f).startswith(r) for r in roots):
            keep.append(name)
    return keep


def start_server(args: list[str]) -> None:
    """After a run no server answered: start one in the background for the next, importing what this
    run imported. Nothing is started for a run that ran the user's code, and no error is the run's."""
    from k3plan import answers

    if not enabled(args) or answers.USER_CODE_RAN or not _ASKED:
        return
    try:
        path = socket_path(_ASKED["identity"])
        if path is None:
            return
        import subprocess

        spec = {
            "identity": _ASKED["identity"],
            "path": _ASKED["path"],
            "socket": os.fspath(path),
            "k3plan": os.path.abspath(sys.modules["k3plan"].__file__ or ""),
            "modules": preloadable(list(sys.modules)),
            "cwd": _ASKED["cwd"],  # the working folder (on sys.path with `-m`), checked as the run checks it
        }
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if socket_path(_ASKED["identity"]) != path:  # made by another user, or open to others
            return
        flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]  # multiprocessing's
        # the server's stderr: what went wrong, if anything (a link put there is not followed)
        log = open(
            os.open(os.fspath(path) + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb"
        )
        with log:
            proc = subprocess.Popen(
                [sys.executable, *flags, "-m", "k3plan.warm_server"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # not in the terminal's process group: a Ctrl-C of this shell is not its
                close_fds=True,
                env=_ASKED["env"],
                cwd=os.path.dirname(os.path.dirname(spec["k3plan"])),  # `-m` finds this k3plan first
            )
        assert proc.stdin is not None
        with proc.stdin:
            proc.stdin.write(json.dumps(spec).encode("utf-8", "surrogateescape"))
        proc.returncode = 0  # not waited for: it outlives this process (no ResourceWarning at exit)
    except (OSError, ValueError, RuntimeError, KeyError):
        pass


def control(path: Path, op: str) -> dict[str, Any] | None:
    """Ask the server at ``path`` for its status or to stop; its reply, or None where none answers."""
    s = connect(path)
    if s is None:
        return None
    with s:
        try:
            s.settimeout(REPLY_S)
            send(s, {"op": op})
            line = next(_lines(s), "")
            reply = json.loads(line) if line else None
        except (OSError, ValueError):
            return None
    return reply if isinstance(reply, dict) else None
