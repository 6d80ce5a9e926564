"""The warm server (see k3plan.warm): started by a run of k3plan in the background, it imports what
that run imported, listens on a Unix socket only its user can use, and for each run that asks forks
a worker that becomes that run: its folder, umask, environment, command line and the very stdin,
stdout and stderr of the asking process. The server tells the asking process the worker's pid (for
Ctrl-C) and then its exit code.

It stops when it hears nothing for ``IDLE_S`` seconds, when `k3plan server stop` asks, when another
server took its socket, and when a module it imported or a folder it imports from changed (it says
so to the run that asked, which is then worked out by that run itself). Started as
``python [the client's options] -m k3plan.warm_server``, its spec (JSON) on stdin.
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

from k3plan import answers, warm


class Server:
    def __init__(self, spec: dict[str, Any], listener: socket.socket, lock: Any) -> None:
        self.spec, self.listener, self.lock = spec, listener, lock
        self.inode = os.stat(spec["socket"]).st_ino
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, ("accept", None))
        self.workers: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (the asking connection, pid)
        self.started = time.time()
        self.last = time.monotonic()
        self.served = 0
        self.workers_cpu_s = 0.0  # user + system seconds of the workers that ended (benchmarks/bench_fit.py)
        self.listening = True
        self.prints = self._prints(spec["cwd"])

    @staticmethod
    def _prints(cwd: str) -> list[list[Any]]:
        """What stale() checks: the import folders as the starting run saw them, its working folder by the names
        of the modules imported (not every file: a report written there does not make this server stale)."""
        paths = answers.import_paths({}, set(), cwd)
        return [[p, how, answers.fingerprint(p, how)] for p, how in sorted(paths.items())]

    def stale(self) -> bool:
        """A module file or an import folder is not what it was when this server imported it."""
        return any(answers.fingerprint(p, how, fp) != fp for p, how, fp in self.prints)

    def ours(self) -> bool:
        """The socket on disk is still this server's (not removed, not another server's since)."""
        try:
            return os.stat(self.spec["socket"]).st_ino == self.inode
        except OSError:
            return False

    def stop_listening(self) -> None:
        if not self.listening:
            return
        self.listening = False
        self.selector.unregister(self.listener)
        if self.ours():
            os.unlink(self.spec["socket"])
        self.listener.close()

    def serve(self) -> None:
        idle = _idle_s()
        while self.listening or self.workers:
            timeout = None if self.workers else max(0.0, idle - (time.monotonic() - self.last))
            for key, _ in self.selector.select(min(timeout, 30.0) if timeout is not None else None):
                what, data = key.data
                if what == "accept":
                    self.accept()
                elif what == "asker":
                    self.asker_gone(key.fileobj, data)  # type: ignore[arg-type]
                else:
                    self.reap(key.fileobj, data)  # type: ignore[arg-type]
            if self.listening and not self.workers:
                if time.monotonic() - self.last >= idle or not self.ours():
                    self.stop_listening()

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            conn.settimeout(5.0)  # a client that connects and says nothing does not hold the server
            if warm.peer_uid(conn) != os.geteuid():
                conn.close()
                return
            message = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            return
        fds: list[int] = []
        try:
            op = message.get("op")
            if op == "run":
                if self.stale():  # the asking run works it out itself; this server is done
                    conn.sendall(b"S\n")
                    self.stop_listening()
                else:  # the run's streams come once it knows this server answers (k3plan.warm.REPLY_S)
                    conn.sendall(b"A\n")
                    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
                    if len(fds) == 3:
                        self.last = time.monotonic()
                        self.fork(conn, message, fds)
                        return
            elif op in ("status", "stop"):
                conn.sendall(json.dumps(self.status()).encode() + b"\n")
                if op == "stop":
                    self.stop_listening()
        except OSError:
            pass
        finally:
            for fd in fds:
                os.close(fd)
        conn.close()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "socket": self.spec["socket"],
            "python": sys.executable,
            "k3plan": self.spec["k3plan"],
            "modules": len(sys.modules),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "served": self.served,
            "running": len(self.workers),
            "workers_cpu_s": round(self.workers_cpu_s, 6),
            "stale": self.stale(),  # it steps aside at the next question
            "idle_s": round(time.monotonic() - self.last, 1),
            "stops_after_idle_s": _idle_s(),
        }

    def fork(self, conn: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: never returns (never back into the server's loop, whatever is raised)
            try:
                try:  # its pid, said by the worker itself: a run that hears it knows a worker holds its streams, one
                    # that does not (a server stopped or killed right after the fork) may work its answer out itself
                    conn.sendall(b"P%d\n" % os.getpid())
                except OSError:  # the asking run is gone: asker_gone ends this worker
                    pass
                others = [c for c, _ in self.workers.values()]
                _work(message, fds, [self.listener, conn, self.lock, self.selector, *others], list(self.workers))
            finally:
                os._exit(1)
        self.served += 1
        pidfd = os.pidfd_open(pid)
        self.workers[pidfd] = (conn, pid)
        self.selector.register(pidfd, selectors.EVENT_READ, ("worker", pid))
        # the asking run says nothing more: its end of the connection readable is the run gone (SIGKILL), whose
        # worker a fresh process's end would have ended too
        self.selector.register(conn, selectors.EVENT_READ, ("asker", pidfd))

    def asker_gone(self, conn: socket.socket, pidfd: int) -> None:
        self.selector.unregister(conn)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:  # it ended already (reap closes its pidfd once the selector says so)
            pass

    def reap(self, pidfd: int, pid: int) -> None:
        self.selector.unregister(pidfd)
        conn, _ = self.workers.pop(pidfd)
        os.close(pidfd)
        _, status, usage = os.wait4(pid, 0)
        self.workers_cpu_s += usage.ru_utime + usage.ru_stime
        try:  # killed by signal N: R-N (the asking run then ends by N too)
            conn.sendall(b"R%d\n" % os.waitstatus_to_exitcode(status))
        except OSError:
            pass
        try:
            self.selector.unregister(conn)
        except KeyError:  # asker_gone unregistered it
            pass
        conn.close()
        self.last = time.monotonic()


def _idle_s() -> float:
    try:
        return warm.idle_s()
    except ValueError:  # the run that started it said so and stopped: not reached
        return warm.IDLE_S


def _receive(conn: socket.socket) -> dict[str, Any]:
    head = b""
    while len(head) < 4:
        more = conn.recv(4 - len(head))
        if not more:
            raise ValueError("short message")
        head += more
    (size,) = struct.unpack("!I", head)
    if size > 1 << 24:
        raise ValueError("message too long")
    body = b""
    while len(body) < size:
        more = conn.recv(min(size - len(body), 1 << 16))
        if not more:
            raise ValueError("short message")
        body += more
    message = json.loads(body.decode("utf-8", "surrogateescape"))
    if not isinstance(message, dict):
        raise ValueError("not a message")
    return message


def _stdio(fd: int, info: dict[str, Any], writes: bool) -> io.TextIOWrapper:
    """A standard stream on ``fd`` as the asking process had it (Python's create_stdio)."""
    raw = io.FileIO(fd, "wb" if writes else "rb", closefd=False)
    # `python -u`: stdout and stderr unbuffered (a FileIO under a write-through text layer)
    buffered: Any = (
        raw if (writes and info["write_through"]) else (io.BufferedWriter(raw) if writes else io.BufferedReader(raw))
    )
    return io.TextIOWrapper(
        buffered,
        encoding=info["encoding"],
        errors=info["errors"],
        newline="\n",
        line_buffering=bool(info["line_buffering"]),
        write_through=bool(info["write_through"]),
    )


def _work(message: dict[str, Any], fds: list[int], server_files: list[Any], server_fds: list[int]) -> None:
    """The forked worker: become the asking run, run k3plan's main, exit with its code."""
    code = 1
    try:
        for f in server_files:
            try:
                f.close()
            except OSError:
                pass
        for fd in server_fds:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        streams = message["streams"]
        sys.stdin = sys.__stdin__ = _stdio(0, streams[0], writes=False)  # type: ignore[misc]
        sys.stdout = sys.__stdout__ = _stdio(1, streams[1], writes=True)  # type: ignore[misc]
        sys.stderr = sys.__stderr__ = _stdio(2, streams[2], writes=True)  # type: ignore[misc]
        os.environ.clear()
        os.environ.update(message["env"])
        os.umask(int(message["umask"]))
        sys.argv = [str(a) for a in message["argv"]]
        try:
            os.chdir(message["cwd"])
        except OSError as err:
            sys.stderr.write(f"error: cannot run in {message['cwd']}: {err.strerror}\n")
            code = 2
            return
        warm.WORKER = True  # (the server's imports stay frozen: a worker's collections skip them, as they'd survive)
        warm.new_streams()
        from k3plan.__main__ import main

        try:
            main()
            code = 0
        except SystemExit as done:
            code = _exit_code(done)
    except BaseException:  # a bug: as a fresh process would print it
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)


def _exit_code(done: SystemExit) -> int:
    """The exit code the interpreter gives a SystemExit (a message is printed to stderr: 1)."""
    if done.code is None:
        return 0
    if isinstance(done.code, int):
        return done.code & 0xFF
    sys.stderr.write(f"{done.code}\n")
    return 1


def _preload(names: list[str]) -> None:
    """Import what the starting run imported, prepared as the CLI prepares before its imports."""
    from k3plan.cli import app

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # k3plan.cli.app.main's, before any import
    app._no_plugin_loader()
    for name in names:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - one that cannot be imported alone is imported by the worker
            pass


def main() -> None:
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8", "surrogateescape"))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    sys.path[:] = spec["path"]
    import k3plan

    if warm.identity() != spec["identity"] or os.path.abspath(k3plan.__file__ or "") != spec["k3plan"]:
        return  # another interpreter, import path or k3plan than the run that started it: no server
    try:  # the worker's end is watched through a pidfd (Linux 5.3+): without one, no server
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return
    import fcntl

    lock = open(spec["socket"] + ".lock", "a")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another server of the same identity is starting or running
    if warm.connect(spec["socket"]) is not None:
        return  # one answers already
    gc.disable()
    _preload(spec["modules"])
    gc.enable()
    gc.freeze()  # what the imports built stays in pages the workers share, untouched by their collections
    try:
        os.unlink(spec["socket"])
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        listener.bind(spec["socket"])
    finally:
        os.umask(old)
    listener.listen(64)
    listener.setblocking(False)
    server = Server(spec, listener, lock)

    def terminate(signum: int, frame: Any) -> None:  # stop taking questions; answer those being answered
        server.stop_listening()
        if not server.workers:
            sys.exit(0)

    signal.signal(signal.SIGTERM, terminate)
    try:
        server.serve()
    finally:
        log = spec["socket"] + ".log"  # where k3plan.warm sent this server's stderr: kept where it says something
        if os.path.isfile(log) and os.path.getsize(log) == 0:
            os.unlink(log)


if __name__ == "__main__":
    main()
