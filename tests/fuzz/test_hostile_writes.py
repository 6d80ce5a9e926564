"""Issue 48 item 5: the files k3plan writes. A target that is not a regular file (a FIFO, a socket, a device,
a symlink) is refused in one line, exit 2, and left as it was: never replaced by a regular file, never
written through. Every node here is made in tmp_path; no test touches a real /dev path."""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from k3_testing import one_error_line

from k3plan.errors import K3PlanError
from k3plan.io_safe import write_bytes, write_text

WRITERS = {
    "plan --emit launch": lambda p: ("plan", "--emit", "launch", p),
    "report --out": lambda p: ("report", "-H", "tpu-v7x", "-c", "131072", "--out", p),
    "curve --plot": lambda p: ("curve", "-t", "2x2x4", "--tp", "32", "--plot", p),
    "plan --plot": lambda p: ("plan", "--isl", "4000", "--osl", "500", "--plot", p),
    "validate --save-calibration": lambda p: ("validate", "--save-calibration", p),
}
ROOT = Path(__file__).resolve().parents[2]


def _node(tmp_path: Path, kind: str, suffix: str) -> tuple[Path, str]:
    """A non-regular file named like an output; -> (its path, what the error calls it)."""
    path = tmp_path / f"out{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
        return path, "a FIFO"
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(path))
        except OSError as err:  # a tmp path longer than a socket name may be
            pytest.skip(f"no unix socket here: {err}")
        finally:
            sock.close()
        return path, "not a regular file"
    if kind == "device":  # a private copy of /dev/null's node (1, 3), in tmp_path: root only
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except (PermissionError, AttributeError) as err:
            pytest.skip(f"cannot make a device node here: {err}")
        return path, "a device"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path.symlink_to(victim)
    return path, "a symlink"


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_an_output_that_is_not_a_regular_file_is_refused_and_kept(cli, tmp_path, writer, kind):
    if writer.startswith("validate"):  # without jax, validate stops at its missing extra first
        pytest.importorskip("jax")
    suffix = {
        "report --out": ".md",
        "curve --plot": ".png",
        "plan --plot": ".png",
        "validate --save-calibration": ".yaml",
    }.get(writer, ".sh")
    path, what = _node(tmp_path, kind, suffix)
    before = os.lstat(path)
    line = one_error_line(cli(*WRITERS[writer](path)))
    assert f"{path}: {what}" in line, line
    after = os.lstat(path)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    if kind == "symlink":
        assert (tmp_path / "victim").read_text() == "keep"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink"])
def test_the_shared_writer_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path, what = _node(tmp_path, kind, ".png")
    with pytest.raises(K3PlanError, match=f"plot {path}: {what}"):
        write_bytes(path, b"\x89PNG", label="plot")
    assert not stat.S_ISREG(os.lstat(path).st_mode)


def test_report_does_not_follow_a_link_planted_under_a_plot_name(cli, tmp_path):
    """Was: a symlink named r-memory.png beside --out r.md had the PNG written over the file it named."""
    pytest.importorskip("matplotlib")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "r-memory.png").symlink_to(victim)
    line = one_error_line(cli("report", "-H", "tpu-v7x", "-c", "131072", "--out", tmp_path / "r.md"))
    assert "r-memory.png: a symlink" in line
    assert victim.read_text() == "keep" and (tmp_path / "r-memory.png").is_symlink()


def test_a_regular_file_is_still_replaced_whole(tmp_path):
    target = tmp_path / "r.md"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_text(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]


# -- a full disk, a signal mid-write ---------------------------------------------------------------------------


def _no_space(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_exit_74_not_2(cli, tmp_path, monkeypatch):
    """sysexits' EX_IOERR, as a refused stdout: the input was fine, the disk was not. The old file stays."""
    import k3plan.io_safe as io_safe

    target = tmp_path / "run.sh"
    target.write_text("old")
    monkeypatch.setattr(io_safe, "_write_synced", _no_space)
    r = cli("plan", "--emit", "launch", target)
    assert r.exit_code == 74, r.output
    assert "No space left on device" in r.stderr and "Traceback" not in r.output
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["run.sh"]


def test_a_refusal_that_is_the_users_to_fix_stays_exit_2(tmp_path, monkeypatch):
    import k3plan.io_safe as io_safe

    def read_only(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(io_safe, "_write_synced", read_only)
    with pytest.raises(K3PlanError) as err:
        write_text(tmp_path / "r.md", "x")
    assert err.value.exit_code == 2


SLOW_WRITE = """
import os, sys, time
from pathlib import Path
import k3plan.io_safe as io_safe

def slow(fd, data):
    os.write(fd, data[:1])
    print("writing", flush=True)
    time.sleep(60)

io_safe._write_synced = slow
io_safe.write_text(Path(sys.argv[1]), "whole report")
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_signal_mid_write_leaves_no_temporary(tmp_path, signame):
    """Was: `kill` during a write left .r.md.XXXX.tmp beside the target. The process still ends by the signal."""
    target = tmp_path / "r.md"
    target.write_text("old")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, str(target)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        assert len(list(tmp_path.iterdir())) == 2  # the temporary is there mid-write
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(timeout=30) == -getattr(signal, signame)
    finally:
        proc.kill()
        proc.wait()
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"] and target.read_text() == "old"


def test_a_signal_handler_the_program_set_still_runs(tmp_path, monkeypatch):
    """The clean-up stands in front of a handler that was there before, and puts it back after the write."""
    import k3plan.io_safe as io_safe

    seen = []

    def mine(signum, frame):
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, mine)
    try:

        def interrupted_write(fd, data):
            os.kill(os.getpid(), signal.SIGTERM)
            os.write(fd, data)

        monkeypatch.setattr(io_safe, "_write_synced", interrupted_write)
        write_text(tmp_path / "r.md", "x")
        assert seen == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)
