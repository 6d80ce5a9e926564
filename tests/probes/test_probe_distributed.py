"""Two local processes on the CPU backend (loopback, gloo) run a small a2a; only process 0 writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from k3plan.evidence.probe_record import ProbeRecord
from k3plan.specfile import convert


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_a2a(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["JAX_PLATFORMS"] = "cpu"
    out = tmp_path / "records"
    procs = []
    for pid in range(2):
        cmd = [
            sys.executable,
            "-m",
            "k3plan.cli.app",
            "probe",
            "a2a",
            "--distributed",
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            "2",
            "--process-id",
            str(pid),
            "--cpu-devices",
            "2",
            "--bytes",
            "64,1792",
            "--iters",
            "1,3",
            "--unchained-iters",
            "1,4",
            "--repeats",
            "2",
            "--timeout",
            "50",
            "--out",
            str(out),
            "--json",
        ]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, stdout, stderr))
    for rc, _, stderr in results:
        assert rc == 0, stderr[-2000:]
    records = json.loads(results[0][1])  # process 0 prints clean JSON (native prints go to stderr)
    assert results[1][1].strip() == ""  # process 1 neither prints nor writes
    files = sorted(out.glob("*.json"))
    assert len(files) == 2 == len(records)
    for path in files:
        rec = convert(ProbeRecord, json.loads(path.read_text()), "a probe record")
        assert rec.process_count == 2 and rec.device_count == 4 and rec.local_device_count == 2
        assert rec.verified is True
        assert {v.check for v in rec.verification} == {"numerics", "hlo-collective"}
        assert any("distributed: 2 processes" in n for n in rec.notes)
