"""`python -u` output written whole: the text layer of an unbuffered stream drops what a short write left."""

from __future__ import annotations

import io
import subprocess
import sys

from k3plan.__main__ import _whole_writes


class _Short(io.RawIOBase):
    """A file that takes at most 100 bytes a write, as a pipe does when a signal interrupts a long write."""

    def __init__(self) -> None:
        self.got = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        n = min(len(b), 100)
        self.got += bytes(b[:n])
        return n


def test_an_unbuffered_stdout_loses_nothing_to_short_writes(monkeypatch):
    raw = _Short()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    _whole_writes()
    text = "x" * 10_000 + "\n" + "é" * 3
    sys.stdout.write(text)
    sys.stdout.flush()
    assert raw.got.decode("utf-8") == text


def test_unbuffered_k3plan_prints_the_same_bytes(tmp_path):
    args = [sys.executable, "-m", "k3plan", "fit", "-t", "2x2x4", "--tp", "7"]  # stdout empty, one line on stderr
    runs = [
        subprocess.run([args[0], *flags, *args[1:]], capture_output=True, cwd=tmp_path, check=False)
        for flags in ([], ["-u"])
    ]
    assert [(r.returncode, r.stdout, r.stderr) for r in runs[1:]] == [
        (runs[0].returncode, runs[0].stdout, runs[0].stderr)
    ]
    args[-1] = "32"  # at 8,192 tokens: a workload that fits on the compiled calibration's points (exit 0)
    runs = [
        subprocess.run(
            [args[0], *flags, *args[1:], "--context", "8192", "--json"], capture_output=True, cwd=tmp_path, check=False
        )
        for flags in ([], ["-u"])
    ]
    assert runs[0].returncode == runs[1].returncode == 0 and runs[0].stdout == runs[1].stdout
