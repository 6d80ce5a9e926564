"""Writing the files k3plan produces (reports, plots, calibrations, baselines), one way.

Each write goes to a temporary file beside the target and is moved over it with ``os.replace``,
so a crash or a full disk never leaves half a report or a truncated baseline. A target that is a
folder, a symlink loop or in a folder that does not exist is a one-line ``K3PlanError`` naming it.
A symlink to a file is followed: the file it points to is replaced, the link stays.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

from k3plan.errors import K3PlanError


def write_text(path: Path, text: str, *, label: str = "") -> Path:
    """Write `text` (UTF-8) to `path` atomically; -> the path written."""
    return write_bytes(path, text.encode("utf-8"), label=label)


def write_bytes(path: Path, data: bytes, *, label: str = "") -> Path:
    where = f"{label} {path}".strip()
    target = _target(Path(path), where)
    fd, tmp = _mkstemp(target, where)
    try:
        _write_synced(fd, data)
        os.chmod(tmp, _mode(target))
        os.replace(tmp, target)
    except OSError as err:
        _unlink(tmp)
        raise K3PlanError(f"{where}: cannot write: {err.strerror or err}") from None
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
    fd, tmp = _mkstemp(target, where)
    try:
        _write_synced(fd, text.encode("utf-8"))
        os.chmod(tmp, 0o644)
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError as err:
        raise K3PlanError(f"{where}: cannot write: {err.strerror or err}") from None
    finally:
        _unlink(tmp)
    return target


def _mkstemp(target: Path, where: str) -> tuple[int, str]:
    """A temporary file beside ``target`` (same folder, so the final rename or link stays on one disk)."""
    try:
        return tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise K3PlanError(f"{where}: cannot write in {target.parent}: {err.strerror or err}") from None


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
    """The file to replace: `path`, or what its symlinks point to; K3PlanError if unusable."""
    try:
        target = path.resolve(strict=False)  # a symlink loop: RuntimeError (<3.13) or OSError
    except (RuntimeError, OSError):
        raise K3PlanError(f"{where}: a symlink loop; expected a file path") from None
    if path.is_symlink() and not path.exists() and target == path.absolute():
        raise K3PlanError(f"{where}: a symlink loop; expected a file path")
    if target.is_dir():
        raise K3PlanError(f"{where}: is a folder; expected a file name")
    if not target.parent.is_dir():
        raise K3PlanError(f"{where}: folder {target.parent} does not exist")
    return target


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
