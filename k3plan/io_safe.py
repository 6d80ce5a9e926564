"""Writing the files k3plan produces (reports, plots, calibrations, baselines), one way.

Each write goes to a temporary file beside the target (created with O_EXCL, so never through a
planted link) and is moved over it with ``os.replace``, so a crash or a full disk never leaves half a
report or a truncated baseline. A target that is a folder, in a folder that does not exist, or not a
regular file is a one-line ``K3PlanError`` naming it: a FIFO or a device (``--out /dev/null`` replaced
/dev/null with a regular file, as root) and a symlink (a link planted under the name of a report's plot
sent the PNG over the file it pointed to) are refused, never replaced or followed.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from k3plan.errors import WRITE_ERRNOS, K3PlanError, UnwritableFile
from k3plan.safeparse import not_regular


def write_text(path: Path, text: str, *, label: str = "") -> Path:
    """Write `text` (UTF-8) to `path` atomically; -> the path written."""
    return write_bytes(path, text.encode("utf-8"), label=label)


def write_bytes(path: Path, data: bytes, *, label: str = "") -> Path:
    where = f"{label} {path}".strip()
    target = _target(Path(path), where)
    with _removed_on_signal() as tmps:
        fd, tmp = _mkstemp(target, where, tmps)
        try:
            _write_synced(fd, data)
            os.chmod(tmp, _mode(target))
            os.replace(tmp, target)
        except OSError as err:
            _unlink(tmp)
            raise _cannot_write(where, err) from None
        except BaseException:
            _unlink(tmp)
            raise
    return Path(path)


def write_new_text(path: Path, text: str, *, label: str = "") -> Path:
    """Write `text` to `path` atomically and never over an existing file: the bytes go to a temporary
    file first, which is then hard-linked to `path` (``os.link`` fails if `path` exists), so a reader
    sees the whole file or none. FileExistsError is left to the caller (pick another name)."""
    where = f"{label} {path}".strip()
    target = Path(path)
    with _removed_on_signal() as tmps:
        fd, tmp = _mkstemp(target, where, tmps)
        try:
            _write_synced(fd, text.encode("utf-8"))
            os.chmod(tmp, 0o644)
            os.link(tmp, target)
        except FileExistsError:
            raise
        except OSError as err:
            raise _cannot_write(where, err) from None
        finally:
            _unlink(tmp)
    return target


def _cannot_write(where: str, err: OSError) -> K3PlanError:
    """A full disk, a quota or an I/O error is exit 74 (sysexits' EX_IOERR), as a refused stdout is; anything
    else (no permission, a read-only disk) is the user's to fix: exit 2."""
    cls = UnwritableFile if err.errno in WRITE_ERRNOS else K3PlanError
    return cls(f"{where}: cannot write: {err.strerror or err}")


# the signals that end a process by default while it writes: the temporary beside the target goes with it
CLEANUP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextlib.contextmanager
def _removed_on_signal() -> Iterator[list[str]]:
    """While the block runs, a SIGTERM or SIGHUP that would end the process first removes the temporaries in
    the list it yields (a `kill` mid-write left `.r.md.xxxx.tmp` beside the target), then ends it by that signal
    (its exit status says so). A handler the program set runs as before (an exception it raises unwinds
    through the writer's clean-up), and so does SIGINT's KeyboardInterrupt."""
    tmps: list[str] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield tmps
        return
    previous: dict[int, Any] = {}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def on_signal(signum: int, frame: Any) -> None:
        handler = previous[signum]
        if callable(handler):  # the program's own: if it raises, the writer's clean-up runs as it unwinds
            handler(signum, frame)
            return
        for tmp in tmps:  # the default: end the process by the same signal, as if no handler had been set
            _unlink(tmp)
        restore()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in CLEANUP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN:  # `nohup`: the process carries on, and so does the write
            previous[signum] = signal.signal(signum, on_signal)
    try:
        yield tmps
    finally:
        restore()


def _mkstemp(target: Path, where: str, tmps: list[str]) -> tuple[int, str]:
    """A temporary file beside ``target`` (same folder, so the final rename or link stays on one disk), listed in
    ``tmps`` for a signal's clean-up."""
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise _cannot_write(where, err) from None
    tmps.append(tmp)
    return fd, tmp


def _write_synced(fd: int, data: bytes) -> None:
    """``data`` to the open temporary file, flushed to disk before it is renamed or linked."""
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save_figure(fig: Any, path: Path, *, label: str = "", **kwargs: Any) -> Path:
    """matplotlib's ``fig.savefig(path, **kwargs)``, rendered in memory and written atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format=kwargs.pop("format", None) or Path(path).suffix.lstrip(".") or "png", **kwargs)
    return write_bytes(path, buf.getvalue(), label=label)


def check_target(path: Path, *, label: str = "") -> None:
    """Fail early (before long work) if `path` cannot be written: a folder, a loop, no folder."""
    _target(Path(path), f"{label} {path}".strip())


def _target(path: Path, where: str) -> Path:
    """The file to replace: `path` itself (its folder's links are followed, its own name is not), if it is a
    regular file or does not exist yet; K3PlanError otherwise."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:  # ENOTDIR, EACCES, ENAMETOOLONG, ELOOP in the folder's path
        raise K3PlanError(f"{where}: cannot write: {err.strerror or err}") from None
    if mode is not None and stat.S_ISLNK(mode):
        if _loops(path):
            raise K3PlanError(f"{where}: a symlink loop; expected a file path")
        raise K3PlanError(
            f"{where}: a symlink; expected a regular file path (k3plan writes through no link: give {_points_to(path)})"
        )
    if mode is not None and stat.S_ISDIR(mode):
        raise K3PlanError(f"{where}: is a folder; expected a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise K3PlanError(f"{where}: {not_regular(mode)}; expected a regular file path (it is never replaced)")
    if not path.parent.is_dir():
        raise K3PlanError(f"{where}: folder {path.parent} does not exist")
    return path


def _loops(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def _points_to(path: Path) -> str:
    try:
        return f"the path it points to, {os.readlink(path)}, or another name"
    except OSError:
        return "another name"


def _mode(target: Path) -> int:
    """Keep an existing file's permissions; a new file gets what open() would give it."""
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
