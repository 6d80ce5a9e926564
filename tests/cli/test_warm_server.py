"""The warm server (k3plan.warm, k3plan.warm_server): a new question it answers is byte for byte what a
fresh process prints, with the same exit code; it steps aside when an import folder changes; it
stops when idle; nothing starts one where it is turned off or after the user's code ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm server is Linux only")

QUESTIONS = [
    ["fit", "-t", "2x2x4", "--tp", "32", "--json"],  # fits: exit 0
    ["fit", "-t", "2x2x4", "--tp", "16"],  # does not fit: exit 1, rich tables
    ["fit", "-t", "2x2x4", "--tp", "7"],  # bad input: one line, exit 2
    ["models", "show", "kimi-k3", "--json"],
]


@pytest.fixture
def world() -> Iterator[tuple[Path, dict[str, str]]]:
    """A folder to run in and an environment whose servers live in a short temporary folder (a socket
    path is at most 107 bytes); every server started there is stopped at the end."""
    root = Path(tempfile.mkdtemp(prefix="k3w-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "K3PLAN_NO_SERVER"}
    env.update(K3PLAN_CACHE_DIR=str(root / "c"), K3PLAN_NO_CACHE="1", COLUMNS="120")
    (root / "run").mkdir()
    (root / "pp").mkdir()
    # an import folder of the server's (test_stale), after this checkout's k3plan (not an installed one elsewhere)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(root / "pp")])
    try:
        yield root / "run", env
    finally:
        _k3plan(["server", "stop"], env, root / "run")
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _k3plan(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3plan", *args], capture_output=True, cwd=cwd, env=env,
                          check=False, timeout=120)


def _servers(env: dict[str, str], cwd: Path) -> list[dict]:
    done = _k3plan(["server", "status", "--json"], env, cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _wait_for_server(env: dict[str, str], cwd: Path, timeout: float = 60) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = _servers(env, cwd)
        if found:
            return found[0]
        time.sleep(0.3)
    raise AssertionError("no warm server started")


def test_served_answers_are_the_worked_out_ones(world):
    cwd, env = world
    cold_env = {**env, "K3PLAN_NO_SERVER": "1"}
    cold = [_k3plan(q, cold_env, cwd) for q in QUESTIONS]
    assert [c.returncode for c in cold] == [0, 1, 2, 0]
    assert _servers(env, cwd) == []  # K3PLAN_NO_SERVER=1 started none

    _k3plan(QUESTIONS[0], env, cwd)  # no server yet: worked out here, then one starts
    first = _wait_for_server(env, cwd)
    warm = [_k3plan(q, env, cwd) for q in QUESTIONS]
    for c, w, q in zip(cold, warm, QUESTIONS):
        assert (w.returncode, w.stdout, w.stderr) == (c.returncode, c.stdout, c.stderr), q
    after = _servers(env, cwd)
    assert [s["pid"] for s in after] == [first["pid"]]
    assert after[0]["served"] == first["served"] + len(QUESTIONS)  # each was the server's worker's


def test_pyenvs_working_folder_variable_is_not_another_environment(world):
    """pyenv's shims export PYENV_DIR, the working folder, on every run: a server a folder was no server at all."""
    cwd, env = world
    _k3plan(QUESTIONS[0], {**env, "PYENV_DIR": str(cwd)}, cwd)
    first = _wait_for_server(env, cwd)
    _k3plan(QUESTIONS[0], {**env, "PYENV_DIR": str(cwd.parent)}, cwd)
    assert _servers(env, cwd)[0]["served"] == first["served"] + 1


def test_another_environment_is_not_served(world):
    cwd, env = world
    _k3plan(QUESTIONS[0], env, cwd)
    first = _wait_for_server(env, cwd)
    other = {**env, "K3PLAN_TEST_OTHER": "1"}  # a variable a module could read at import: another server's
    _k3plan(QUESTIONS[0], other, cwd)
    assert _servers(env, cwd)[0]["served"] == first["served"]


def test_a_changed_import_folder_stops_the_server(world):
    cwd, env = world
    _k3plan(QUESTIONS[0], env, cwd)
    first = _wait_for_server(env, cwd)
    assert first["stale"] is False
    (Path(env["PYTHONPATH"].split(os.pathsep)[-1]) / "newmodule.py").write_text("")  # an import could now find it: the server is stale
    assert [s["stale"] for s in _servers(env, cwd)] == [True]  # status says so before a run meets it
    again = _k3plan(QUESTIONS[0], env, cwd)
    assert again.returncode == 0 and json.loads(again.stdout)  # worked out by the run itself
    time.sleep(0.5)
    assert all(s["pid"] != first["pid"] for s in _servers(env, cwd))


def test_an_idle_server_stops(world):
    cwd, env = world
    env = {**env, "K3PLAN_SERVER_IDLE": "1"}
    _k3plan(QUESTIONS[0], env, cwd)
    end = time.monotonic() + 60
    sockets = Path(env["K3PLAN_CACHE_DIR"]) / "warm"
    while time.monotonic() < end and not list(sockets.glob("*.sock")):
        time.sleep(0.2)
    assert list(sockets.glob("*.sock")), "no warm server started"
    while time.monotonic() < end and list(sockets.glob("*.sock")):
        time.sleep(0.2)
    assert not list(sockets.glob("*.sock"))


def test_no_server_after_the_users_code(world):
    cwd, env = world
    (Path(env["PYTHONPATH"].split(os.pathsep)[-1]) / "myspecs.py").write_text(
        "def specs(model, parallel):\n    raise RuntimeError('boom')\n"
    )
    done = _k3plan(["fit", "-t", "2x2x4", "--tp", "32", "--shardspecs", "myspecs:specs"], env, cwd)
    assert done.returncode == 2
    time.sleep(1.0)
    assert not list((Path(env["K3PLAN_CACHE_DIR"]) / "warm").glob("*.sock"))


def _on_a_terminal(args: list[str], env: dict[str, str], cwd: Path, columns: int) -> bytes:
    """What ``k3plan ARGS`` writes to a terminal ``columns`` wide (stdout and stderr both on it)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("4H", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "k3plan", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the terminal's last writer closed it
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) in (0, 1, 2)
    return out


def test_a_terminal_gets_its_own_width_and_colours(world):
    """The server imported k3plan.cli.common with its stdout on /dev/null: its consoles were 140 columns and
    colourless, and a served run on a 60-column terminal printed them so (its worker builds them again)."""
    cwd, env = world
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    questions = [["hardware"], ["fit", "-t", "2x2x4", "--tp", "7"]]  # a table on stdout; a red error on stderr
    cold = [_on_a_terminal(q, {**env, "K3PLAN_NO_SERVER": "1"}, cwd, 60) for q in questions]
    assert b"\x1b[" in cold[1]
    _k3plan(QUESTIONS[0], env, cwd)
    first = _wait_for_server(env, cwd)
    warm = [_on_a_terminal(q, env, cwd, 60) for q in questions]
    assert warm == cold
    assert _servers(env, cwd)[0]["served"] == first["served"] + len(questions)


def test_a_message_sent_whole_is_not_sent_again():
    """A status or stop that the server had answered (and closed) before the client's trailing sendall(b"") failed
    with EPIPE: `k3plan server status` then missed a running server, one run in a few."""
    from k3plan import warm

    class Answered:  # the server read it all, answered and closed
        def send(self, data: bytes) -> int:
            return len(data)

        def sendall(self, data: bytes) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    warm.send(Answered(), {"op": "status"})  # type: ignore[arg-type]


def test_a_server_that_does_not_answer_is_not_waited_for(world, tmp_path):
    """A process at the socket that never answers (a stopped or hung server): the run works it out itself, and its
    streams were never handed over (an in-flight descriptor would hold a pipe open, its reader waiting for ever)."""
    import socket

    cwd, env = world
    helper = tmp_path / "helper.py"
    helper.write_text(
        "import sys\nfrom k3plan import warm\n"
        "if sys.argv[1] == 'path':\n    print(warm.socket_path(warm.identity()))\n"
        "else:\n    warm.REPLY_S = 0.3\n    from k3plan.__main__ import main\n    sys.argv[1:] = sys.argv[2:]\n    main()\n"
    )
    run_env = env
    path = subprocess.run([sys.executable, str(helper), "path"], capture_output=True, text=True, cwd=cwd, env=run_env,
                          check=True).stdout.strip()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(path)
    mute.listen(4)  # never accepts
    try:
        cold = _k3plan(QUESTIONS[0], {**env, "K3PLAN_NO_SERVER": "1"}, cwd)
        done = subprocess.run([sys.executable, str(helper), "run", *QUESTIONS[0]], capture_output=True, cwd=cwd,
                              env=run_env, check=False, timeout=20)
        assert (done.returncode, done.stdout, done.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    finally:
        mute.close()
        os.unlink(path)


def _slow(env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen, int]:
    """A served run whose worker is busy: 3.8 MB of plan to a pipe nobody reads (its read end returned)."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "k3plan", "plan", "--max-chips", "4096", "--top", "100000",
                             "--json"], stdout=w, stderr=subprocess.PIPE, cwd=cwd, env=env)
    os.close(w)
    end = time.monotonic() + 30
    while time.monotonic() < end and not any(s["running"] for s in _servers(env, cwd)):
        time.sleep(0.1)
    assert any(s["running"] for s in _servers(env, cwd)), "no worker ran it"
    time.sleep(0.2)  # the run has heard the worker's pid (P) and forwards signals
    return proc, r


def test_the_run_ends_as_its_worker_and_its_worker_as_the_run(world):
    """SIGTERM: a fresh run dies of it (-15), a served one exited 143. SIGKILL: a fresh run's streams close, a
    served one's worker wrote on (its reader waited for ever). SIGTSTP: the worker stops too. The server killed:
    exit 70, its worker gone."""
    import signal

    cwd, env = world
    _k3plan(QUESTIONS[0], env, cwd)
    server = _wait_for_server(env, cwd)["pid"]

    proc, r = _slow(env, cwd)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    os.close(r)

    proc, r = _slow(env, cwd)
    proc.kill()
    _, err = proc.communicate(timeout=10)  # the worker held stderr open: this waited until the test's timeout
    assert (proc.returncode, err) == (-signal.SIGKILL, b"")
    os.close(r)

    proc, r = _slow(env, cwd)  # Ctrl-Z: the worker stopped with the run (it wrote on while the shell said Stopped)
    proc.send_signal(signal.SIGTSTP)
    worker = int(Path(f"/proc/{server}/task/{server}/children").read_text().split()[0])
    states = []
    for _ in range(50):
        states = [Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[0] for p in (proc.pid, worker)]
        if states == ["T", "T"]:
            break
        time.sleep(0.02)
    assert states == ["T", "T"]
    proc.send_signal(signal.SIGCONT)
    os.close(r)  # the worker goes on: it meets the closed pipe and ends as a fresh run would (141)
    assert proc.wait(timeout=20) == 141

    proc, r = _slow(env, cwd)
    os.kill(server, signal.SIGKILL)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 70 and err.count(b"\n") == 1, err
    os.close(r)


def test_a_file_written_in_the_working_folder_leaves_the_server(world):
    """With `python -m`, the working folder is on sys.path: the server listed every file in it (its own working
    folder is elsewhere), so a report written there, or any file, made it stale; now only a file that an import
    would find first does, as for the answer cache."""
    cwd, env = world
    _k3plan(QUESTIONS[0], env, cwd)
    first = _wait_for_server(env, cwd)
    (cwd / "notes.md").write_text("")
    _k3plan(QUESTIONS[0], env, cwd)
    assert [(s["pid"], s["served"]) for s in _servers(env, cwd)] == [(first["pid"], first["served"] + 1)]
    (cwd / "rich.py").write_text("")  # rich, imported by the server, would now be imported from here
    _k3plan(QUESTIONS[0], env, cwd)
    (cwd / "rich.py").unlink()
    time.sleep(0.5)
    assert all(s["pid"] != first["pid"] for s in _servers(env, cwd))


def test_a_stopped_server_does_not_hold_a_run_whose_worker_ended(world, tmp_path):
    """The server stopped (SIGSTOP) while its worker ran: the worker ended, nobody said its exit code, and the run
    waited for ever; it now says so and exits 70 once REPLY_S has passed after the worker's end."""
    import signal

    cwd, env = world
    helper = tmp_path / "helper.py"
    helper.write_text(
        "import sys\nfrom k3plan import warm\nwarm.REPLY_S = 0.3\nfrom k3plan.__main__ import main\nmain()\n"
    )
    subprocess.run([sys.executable, str(helper), *QUESTIONS[0]], capture_output=True, cwd=cwd, env=env, check=True)
    server = _wait_for_server(env, cwd)["pid"]  # the helper's (its folder on sys.path: its own identity)
    proc = subprocess.Popen([sys.executable, str(helper), "plan", "--max-chips", "4096", "--top", "100000", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env)
    end = time.monotonic() + 30
    while time.monotonic() < end and not Path(f"/proc/{server}/task/{server}/children").read_text().split():
        time.sleep(0.05)
    time.sleep(0.2)  # the worker is writing its answer
    os.kill(server, signal.SIGSTOP)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        os.kill(server, signal.SIGCONT)
    assert proc.returncode == 70 and err.count(b"\n") == 1, err
    assert json.loads(out)  # the worker's answer, whole


@pytest.mark.parametrize("idle", ["abc", "-1", "0", "nan", "1e309"])
def test_a_bad_idle_time_is_refused(world, idle):
    cwd, env = world
    done = _k3plan(QUESTIONS[0], {**env, "K3PLAN_SERVER_IDLE": idle}, cwd)
    assert done.returncode == 2 and done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "K3PLAN_SERVER_IDLE" in lines[0] and repr(idle) in lines[0]


def test_a_socket_folder_open_to_others_is_not_used(world):
    """In a cache folder shared with others, their links could point the server's log at the user's files."""
    cwd, env = world
    warm = Path(env["K3PLAN_CACHE_DIR"]) / "warm"
    warm.mkdir(parents=True)
    warm.chmod(0o777)
    (warm / "planted").symlink_to(cwd / "victim.txt")
    done = _k3plan(QUESTIONS[0], env, cwd)
    assert done.returncode == 0
    time.sleep(1.0)
    assert sorted(p.name for p in warm.iterdir()) == ["planted"] and not (cwd / "victim.txt").exists()
