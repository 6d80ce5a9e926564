"""The answer cache (k3plan.answers): a repeated question is answered from the record of its first
run only while nothing that run read has changed; anything it cannot vouch for is worked out afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3plan import answers

FIT = ["fit", "-t", "2x2x4", "--tp", "32", "--json"]


class Cli:
    """A stand-in command: reads what ``reads`` names, prints what it found, exits ``rc``."""

    def __init__(self, tmp: Path, rc: int = 0) -> None:
        self.calls, self.tmp, self.rc = 0, tmp, rc
        self.write_to: Path | None = None

    def __call__(self, args: list[str]) -> None:
        self.calls += 1
        data = (self.tmp / "input.txt").read_text()
        extra = (self.tmp / "optional.txt").exists()
        listed = sorted(os.listdir(self.tmp / "folder"))
        print(f"{data} optional={extra} folder={listed}")
        sys.stderr.write("a warning\n")
        if self.write_to is not None:
            self.write_to.write_text("side effect")
        raise SystemExit(self.rc)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("K3PLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("K3PLAN_NO_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "input.txt").write_text("one")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a").write_text("")
    return tmp_path


def ask(cli: Cli, capsys: pytest.CaptureFixture[str], args: list[str] | None = None) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        answers.run(args or ["fit", "-t", "2x2x4"], cli)
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def records(world: Path) -> list[Path]:
    return sorted((world / "cache" / "answers").glob("*.json"))


def test_a_repeated_question_is_answered_from_its_record_with_the_same_output_and_exit_code(world, capsys):
    cli = Cli(world, rc=1)
    first = ask(cli, capsys)
    assert first == (1, "one optional=False folder=['a']\n", "a warning\n")
    assert ask(cli, capsys) == first and cli.calls == 1
    assert len(records(world)) == 1


def test_a_changed_file_is_read_again_even_at_the_same_size_and_mtime(world, capsys):
    cli = Cli(world)
    ask(cli, capsys)
    st = (world / "input.txt").stat()
    (world / "input.txt").write_text("two")  # same size; the mtime put back: only the content tells
    os.utime(world / "input.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ask(cli, capsys)[1].startswith("two") and cli.calls == 2
    assert ask(cli, capsys)[1].startswith("two") and cli.calls == 2  # the new answer is the record now


def test_a_file_that_was_missing_and_a_new_name_in_a_listed_folder_each_count(world, capsys):
    cli = Cli(world)
    ask(cli, capsys)
    (world / "optional.txt").write_text("")  # it only checked that this was there (os.stat)
    assert "optional=True" in ask(cli, capsys)[1] and cli.calls == 2
    (world / "folder" / "b").write_text("")
    assert "['a', 'b']" in ask(cli, capsys)[1] and cli.calls == 3
    ask(cli, capsys)
    assert cli.calls == 3


def test_other_arguments_folder_or_environment_are_another_question(world, capsys, monkeypatch):
    cli = Cli(world)
    ask(cli, capsys)
    ask(cli, capsys, ["fit", "-t", "2x2x2"])
    monkeypatch.setenv("COLUMNS", "200")
    ask(cli, capsys)
    assert cli.calls == 3


def test_bad_input_side_effects_and_no_cache_are_never_recorded(world, capsys, monkeypatch):
    bad = Cli(world, rc=2)
    ask(bad, capsys), ask(bad, capsys)
    assert bad.calls == 2 and not records(world)
    writer = Cli(world)
    writer.write_to = world / "out.txt"
    ask(writer, capsys), ask(writer, capsys)
    assert writer.calls == 2 and not records(world)
    plain = Cli(world)
    ask(plain, capsys, ["fit", "--no-cache"]), ask(plain, capsys, ["fit", "--no-cache"])
    monkeypatch.setenv("K3PLAN_NO_CACHE", "1")
    ask(plain, capsys), ask(plain, capsys)
    assert plain.calls == 4 and not records(world)


def test_only_the_cached_commands_are_recorded(world, capsys):
    cli = Cli(world)
    ask(cli, capsys, ["plan"]), ask(cli, capsys, ["plan"])
    assert cli.calls == 2 and not records(world)


def test_a_damaged_record_or_a_cache_that_cannot_be_written_is_no_error(world, capsys, monkeypatch):
    cli = Cli(world)
    ask(cli, capsys)
    records(world)[0].write_text('{"format": 1, "rc": 0, "prints": [["x"')
    assert ask(cli, capsys)[1].startswith("one") and cli.calls == 2
    (world / "blocked").write_text("a file where the cache folder would be")
    monkeypatch.setenv("K3PLAN_CACHE_DIR", str(world / "blocked"))
    assert ask(cli, capsys)[0] == 0 and ask(cli, capsys)[1].startswith("one") and cli.calls == 4


def test_the_oldest_records_go_beyond_keep(world, capsys, monkeypatch):
    monkeypatch.setattr(answers, "KEEP", 2)
    cli = Cli(world)
    for topology in ("2x2x1", "2x2x2", "2x2x4"):
        ask(cli, capsys, ["fit", "-t", topology])
    assert len(records(world)) == 2


def _fit_process(env: dict[str, str], cwd: Path) -> dict:
    """A fresh `python -m k3plan fit ...`: its stdout, exit code and whether typer or pydantic was imported."""
    code = (
        "import json, os, sys\n"
        f"sys.argv = ['k3plan', *{FIT!r}]\n"
        "from k3plan.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
        "with open(os.environ['MARK'], 'w') as f:\n"
        "    json.dump({'rc': rc, 'typer': 'typer' in sys.modules, 'pydantic': 'pydantic' in sys.modules}, f)\n"
    )
    mark = cwd / "mark.json"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                         env=env | {"MARK": str(mark)}, check=True).stdout
    return json.loads(mark.read_text()) | {"out": out}


def test_a_second_fit_gives_the_same_bytes_without_importing_typer_or_pydantic(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "K3PLAN_NO_CACHE"} | {"K3PLAN_CACHE_DIR": str(tmp_path / "c")}
    first, second = _fit_process(env, tmp_path), _fit_process(env, tmp_path)
    assert first["rc"] == second["rc"] == 0 and first["typer"] and first["pydantic"]
    assert second["out"] == first["out"] and json.loads(second["out"])["fits"] is True
    assert not second["typer"] and not second["pydantic"]
    fresh = _fit_process(env | {"K3PLAN_NO_CACHE": "1"}, tmp_path)
    assert fresh["typer"] and fresh["out"] == first["out"]


def _k3plan(args: list[str], env: dict[str, str], cwd: Path, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3plan", *args], stdout=stdout, stderr=subprocess.PIPE, cwd=cwd,
                          env=env, check=False, timeout=120)


def test_an_ascii_stream_gets_the_same_bytes_and_a_closed_pipe_still_exits_141(tmp_path):
    """The tables' box rules reach an ASCII stream as the CLI's ASCII fallback makes them, from the
    cache too (what was recorded is bytes); a reader gone before a cached answer is exit 141, as before."""
    env = {k: v for k, v in os.environ.items() if k != "K3PLAN_NO_CACHE"}
    env |= {"K3PLAN_CACHE_DIR": str(tmp_path / "c"), "PYTHONIOENCODING": "ascii", "COLUMNS": "120"}
    args = ["fit", "-t", "2x2x4", "--tp", "32"]
    first, second = _k3plan(args, env, tmp_path), _k3plan(args, env, tmp_path)
    assert first.returncode == second.returncode == 0 and first.stderr == second.stderr == b""
    assert second.stdout == first.stdout and first.stdout.isascii() and b"FITS" in first.stdout
    assert len(list((tmp_path / "c" / "answers").glob("*.json"))) == 1
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        gone = _k3plan(args, env, tmp_path, stdout=write)
    finally:
        os.close(write)
    assert (gone.returncode, gone.stderr) == (141, b"")


def test_stdout_and_stderr_replay_in_the_order_they_were_written(world):
    code = (
        "import sys\n"
        "from k3plan import answers\n"
        "def cli(args):\n"
        "    print('first', flush=True); sys.stderr.write('second\\n'); sys.stderr.flush(); print('third', flush=True)\n"
        "answers.run(['fit'], cli)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True,
                           env=dict(os.environ), cwd=world).stdout for _ in range(2)]
    assert runs[0] == runs[1] == b"first\nsecond\nthird\n"
    assert len(records(world)) == 1


def test_what_came_from_a_pipe_is_not_recorded(world, capsys):
    """A run that read a pipe (`-m /dev/stdin`) cannot be checked again: it is worked out every time."""
    read, write = os.pipe()
    os.write(write, b"piped")
    os.close(write)

    def cli(args: list[str]) -> None:
        with open(f"/dev/fd/{read}") as f:
            print(f.read())

    with pytest.raises(SystemExit):
        answers.run(["fit"], cli)
    os.close(read)
    assert capsys.readouterr().out == "piped\n" and not records(world)


def _stand_in(world: Path, body: str, *, options: tuple[str, ...] = (), env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess:
    """A fresh `python OPTIONS -c` asking `fit` through answers.run, with a stand-in command whose body
    (a line of Python: sys and os are imported) is ``body``; run in the world folder."""
    code = (
        "import os, sys\n"
        "from k3plan import answers\n"
        f"def cli(args):\n    {body}\n"
        "answers.run(['fit'], cli)\n"
    )
    return subprocess.run([sys.executable, *options, "-c", code], capture_output=True, cwd=world, check=False,
                          env=dict(os.environ) if env is None else env, timeout=timeout)


def test_the_interpreters_options_are_part_of_the_question(world):
    """Under LC_ALL=C, `python -X utf8` writes UTF-8 and `python -X utf8=0` ASCII (PEP 540): the same
    argv, folder and environment, other bytes. The cache replayed the UTF-8 answer to the ASCII run."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8")} | {"LC_ALL": "C"}
    body = "sys.stdout.reconfigure(errors='replace'); print('\\u2500')"
    utf8 = _stand_in(world, body, options=("-X", "utf8"), env=env)
    ascii_ = _stand_in(world, body, options=("-X", "utf8=0"), env=env)
    assert (utf8.returncode, utf8.stdout) == (0, "\u2500\n".encode())
    assert (ascii_.returncode, ascii_.stdout) == (0, b"?\n")


def test_a_path_through_a_symlink_and_up_is_checked_where_the_system_found_it(world, capsys):
    """`link/../x` is x beside the link's target, not beside the link: the file read there is the one
    checked (os.path.abspath made it ./x, which is not there, and the answer stayed as the target changed)."""
    (world / "elsewhere" / "deep").mkdir(parents=True)
    (world / "elsewhere" / "x.txt").write_text("one")
    (world / "sub").mkdir()
    (world / "sub" / "link").symlink_to(world / "elsewhere" / "deep")

    def cli(args: list[str]) -> None:
        print(Path("sub/link/../x.txt").read_text())

    assert ask(cli, capsys)[1] == "one\n"
    (world / "elsewhere" / "x.txt").write_text("two")
    assert ask(cli, capsys)[1] == "two\n"


def test_a_working_folder_removed_under_the_shell_is_worked_out_not_a_traceback(world, capsys, monkeypatch):
    """`cd x; rm -r ../x; k3plan fit`: os.getcwd() fails; the key needed it (FileNotFoundError, exit 1)."""
    gone = world / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    cli = Cli(world)
    assert ask(cli, capsys) == (0, "one optional=False folder=['a']\n", "a warning\n")
    assert ask(cli, capsys)[0] == 0 and cli.calls == 2 and not records(world)


def _damage(record: Path, how: str) -> None:
    rec = json.loads(record.read_text())
    record.unlink()
    if how == "a FIFO":
        os.mkfifo(record)
    elif how == "a link to /dev/zero":
        record.symlink_to("/dev/zero")
    elif how == "nested 100,000 deep":
        record.write_text("[" * 100_000)
    elif how == "exit code 2":
        record.write_text(json.dumps(rec | {"rc": 2}))
    elif how == "output past Latin-1":
        record.write_text(json.dumps(rec | {"output": [[1, "\u2500"]]}))


def _one_gib() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _asked(world: Path, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -c CODE` in the world folder, in 1 GiB of address space."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=world, check=False, timeout=timeout,
                          preexec_fn=_one_gib)


@pytest.mark.parametrize("how", ["a FIFO", "a link to /dev/zero", "nested 100,000 deep", "exit code 2",
                                 "output past Latin-1"])
def test_a_record_that_is_not_one_is_worked_out_afresh_never_waited_on_nor_a_traceback(world, how):
    """Whatever is found where a record should be: it was a hang (a FIFO), all memory (/dev/zero), a
    RecursionError or a UnicodeEncodeError traceback, or an exit code no run is recorded with."""
    code = "from k3plan import answers\nanswers.run(['fit'], lambda args: print('worked out'))\n"
    assert _asked(world, code).stdout == b"worked out\n"
    _damage(records(world)[0], how)
    again = _asked(world, code, timeout=10)
    assert (again.returncode, again.stdout, again.stderr) == (0, b"worked out\n", b"")


def test_a_file_read_that_grew_past_memory_is_not_read_to_check_it(world):
    """The check read a whole file into memory to hash it: a file grown to 2 GiB was a MemoryError
    traceback. Another size is another file without reading it; a hash is taken a MiB at a time."""
    code = "from k3plan import answers\nanswers.run(['fit'], lambda args: print(repr(open('input.txt').read(3))))\n"
    assert _asked(world, code).stdout == b"'one'\n"
    with open(world / "input.txt", "r+b") as f:
        f.truncate(2 << 30)  # sparse: no disk taken
    again = _asked(world, code)
    assert (again.returncode, again.stdout, again.stderr) == (0, b"'one'\n", b"")


def test_a_run_interrupted_by_ctrl_c_is_not_kept_whatever_exit_code_it_ended_with(world):
    """Click's main turns a Ctrl-C into "Aborted!" and exit 1 (typer 0.29's copy: exit 130): kept, that
    was a "does not fit" verdict given from then on, though nothing was worked out to the end."""
    aborted = ("import signal\n    try:\n        os.kill(os.getpid(), signal.SIGINT)\n"
               "    except KeyboardInterrupt:\n        print('Aborted!')\n        raise SystemExit(1)")
    first = _stand_in(world, aborted)
    assert (first.returncode, first.stdout) == (1, b"Aborted!\n")
    again = _stand_in(world, "print('worked out')")
    assert (again.returncode, again.stdout) == (0, b"worked out\n")


def test_a_file_changed_while_the_first_run_read_it_is_not_kept(world, capsys, monkeypatch):
    """What a run read was fingerprinted at its end: an edit landing between the read and the end was
    recorded as what the run had seen, and its answer (from the old content) replayed from then on.
    The same for a module loaded from its .pyc (its source is never opened) and rewritten meanwhile."""
    editor = os.open(world / "input.txt", os.O_WRONLY)  # someone else's: opened before the run

    def cli(args: list[str]) -> None:
        print((world / "input.txt").read_text())
        os.pwrite(editor, b"two", 0)

    try:
        assert ask(cli, capsys)[1] == "one\n"
        assert ask(cli, capsys)[1] == "two\n"
    finally:
        os.close(editor)
    import py_compile

    (world / "modq.py").write_text("VALUE = 'one'\n")
    st = (world / "modq.py").stat()
    os.utime(world / "modq.py", ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # written well before the run
    py_compile.compile(str(world / "modq.py"))
    monkeypatch.syspath_prepend(str(world))
    source = os.open(world / "modq.py", os.O_WRONLY)

    def imports(args: list[str]) -> None:
        sys.modules.pop("modq", None)
        import modq  # type: ignore[import-not-found]

        print(modq.VALUE)
        os.pwrite(source, b"VALUE = 'two'\n", 0)

    try:
        assert ask(imports, capsys)[1] == "one\n"
        assert ask(imports, capsys)[1] == "two\n"
    finally:
        os.close(source)
        sys.modules.pop("modq", None)


def test_a_run_that_compiles_a_module_is_kept(world):
    """The import system writes a module's .pyc as ``x.pyc.<id>`` and renames it: that open for writing
    counted as the run writing a file, so the first fit after a checkout or an edit was never kept (and
    test_a_second_fit... failed in a fresh clone without PYTHONDONTWRITEBYTECODE)."""
    (world / "modp.py").write_text("VALUE = 'compiled'\n")
    st = (world / "modp.py").stat()
    os.utime(world / "modp.py", ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # not one written as the run starts
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first = _stand_in(world, "import modp; print(modp.VALUE)", env=env)
    assert (first.returncode, first.stdout) == (0, b"compiled\n")
    assert list((world / "__pycache__").glob("modp.*.pyc")) and len(records(world)) == 1


def test_a_module_put_ahead_of_one_imported_is_a_new_question(world):
    """A colorsys.py put in the working folder (sys.path[0] of `python -c`/`-m`) or in a PYTHONPATH folder
    is the colorsys the next run imports: the record checked colorsys' own file only. Other files coming
    and going in the working folder (outputs, notes) still get the recorded answer."""
    body = "import colorsys; print(getattr(colorsys, 'WHO', 'stdlib'), os.getpid())"
    first = _stand_in(world, body)
    assert first.stdout.startswith(b"stdlib ")
    (world / "notes.txt").write_text("")
    assert _stand_in(world, body).stdout == first.stdout  # answered from the record: the same pid
    (world / "colorsys.py").write_text("WHO = 'the working folder'\n")
    assert _stand_in(world, body).stdout.startswith(b"the working folder ")
    (world / "colorsys.py").unlink()
    extra = world / "extra"
    extra.mkdir()
    env = dict(os.environ) | {"PYTHONPATH": os.pathsep.join([str(extra), *sys.path[1:]])}
    assert _stand_in(world, body, env=env).stdout.startswith(b"stdlib ")
    (extra / "colorsys.py").write_text("WHO = 'a PYTHONPATH folder'\n")
    assert _stand_in(world, body, env=env).stdout.startswith(b"a PYTHONPATH folder ")


def _oldest_python() -> str | None:
    """A python3.10 on PATH that runs (the oldest Python pyproject.toml allows), else None."""
    import shutil

    exe = shutil.which("python3.10")
    if exe is None or subprocess.run([exe, "-c", "pass"], capture_output=True, check=False).returncode != 0:
        return None
    return exe


def test_on_python_3_10_a_path_looked_for_through_pathlib_is_recorded(world):
    """pathlib 3.10 calls the os.stat its _NormalAccessor took at import, not os.stat: `Path.exists()`
    was not recorded there, and a file that appeared kept the answer given without it."""
    exe = _oldest_python()
    if exe is None:
        pytest.skip("no python3.10 that runs")
    code = ("import pathlib\nfrom k3plan import answers\n"
            "answers.run(['fit'], lambda args: print(pathlib.Path('optional.txt').exists()))\n")
    env = dict(os.environ) | {"PYTHONPATH": str(Path(answers.__file__).parent.parent)}

    def ask310() -> bytes:
        return subprocess.run([exe, "-c", code], capture_output=True, cwd=world, env=env, check=True).stdout

    assert ask310() == b"False\n"
    (world / "optional.txt").write_text("")
    assert ask310() == b"True\n"


def test_a_fit_that_runs_the_users_shardspecs_function_is_not_kept(world, capsys, monkeypatch):
    """`--shardspecs module:function` runs the user's code: it may read what no audit event names (here
    SQLite, opened in C), and the record replayed the ShardSpecs of the first run after the database
    changed (free 4717187138 bytes a device where working it out gives 2441777218)."""
    import sqlite3

    from k3plan.cli.app import main as cli_main

    (world / "lib").mkdir()
    (world / "lib" / "k3qa_team_loader.py").write_text(
        "import json, sqlite3\n"
        "def specs():\n"
        "    with sqlite3.connect('plan.db') as con:\n"
        "        return {n: json.loads(s) for n, s in con.execute('select name, spec from specs')}\n"
    )
    monkeypatch.syspath_prepend(str(world / "lib"))
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as the CLI sets it: the two asks, one question
    with sqlite3.connect(world / "plan.db") as con:
        con.execute("create table specs(name, spec)")
        con.execute("insert into specs values ('language_model.lm_head.weight', '[\"tp\", null]')")
    con.close()
    args = [*FIT, "--shardspecs", "k3qa_team_loader:specs"]
    first = json.loads(ask(cli_main, capsys, args)[1])["per_device"]["free_bytes"]
    with sqlite3.connect(world / "plan.db") as con:
        con.execute("update specs set spec = '[null, null]'")  # lm_head copied to every device
    con.close()
    again = json.loads(ask(cli_main, capsys, args)[1])["per_device"]["free_bytes"]
    assert again < first and not records(world)


def test_the_size_of_the_terminal_on_stdin_is_part_of_the_question(monkeypatch):
    """rich.console.Console.size asks stdin's terminal first, then stdout's: a table on a terminal is
    drawn to stdin's width, which the key did not hold (widest line 166 bytes replayed where 213 is drawn)."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    try:
        with open(follower, closefd=False) as stdin:
            monkeypatch.setattr(sys, "stdin", stdin)
            keys = []
            for columns in (70, 200):
                fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
                keys.append(answers.key(["fit"]))
    finally:
        os.close(leader)
        os.close(follower)
    assert keys[0] != keys[1]


def test_a_folder_listed_by_its_descriptor_is_not_kept(world, capsys):
    """os.listdir(fd) (as os.fwalk does) names no path: its names were not checked, and a name added to
    the folder kept the answer given without it."""

    def cli(args: list[str]) -> None:
        fd = os.open(world / "folder", os.O_RDONLY)
        try:
            print(sorted(os.listdir(fd)))
        finally:
            os.close(fd)

    assert ask(cli, capsys)[1] == "['a']\n"
    (world / "folder" / "b").write_text("")
    assert ask(cli, capsys)[1] == "['a', 'b']\n"


def test_a_read_in_another_thread_while_the_recorder_looks_at_a_path_is_seen(world, capsys, monkeypatch):
    """The recorder looks at each path as the run comes to it; that look turned the recorder off for
    every thread, so a file another thread read meanwhile was not recorded."""
    import threading

    (world / "other.txt").write_text("one")
    look = answers.fingerprint
    read: list[str] = []

    def fingerprint(path: str, how: str, was: object = None) -> list:
        if path.endswith("input.txt") and not read:  # while looking at input.txt, another thread reads
            reader = threading.Thread(target=lambda: read.append((world / "other.txt").read_text()))
            reader.start()
            reader.join()
        return look(path, how, was)

    monkeypatch.setattr(answers, "fingerprint", fingerprint)

    def cli(args: list[str]) -> None:
        (world / "input.txt").read_text()
        print(read[-1])

    assert ask(cli, capsys)[1] == "one\n"
    (world / "other.txt").write_text("two")
    read.clear()
    assert ask(cli, capsys)[1] == "two\n"


def test_a_module_that_was_not_there_is_looked_for_again_in_the_working_folder(world):
    """An optional import that failed (importlib.import_module raises no "import" audit event) named no
    module to look for: the module put in the working folder later was not seen, and the answer given
    without it stayed."""
    body = ("import importlib\n    try:\n        importlib.import_module('k3qa_optional')\n"
            "    except ImportError:\n        print('without it')\n    else:\n        print('with it')")
    assert _stand_in(world, body).stdout == b"without it\n"
    (world / "k3qa_optional.py").write_text("")
    assert _stand_in(world, body).stdout == b"with it\n"


def test_a_write_the_stream_refuses_is_no_output(world, capsys):
    """click.echo (typer.echo) first writes b"" to tell a text stream from a binary one; the copy kept it,
    and the end of a run that had answered turned into an AttributeError traceback, exit 1."""

    def cli(args: list[str]) -> None:
        try:
            sys.stdout.write(b"")  # type: ignore[arg-type]  # click.utils._is_binary_writer
        except TypeError:
            pass
        print("answered")

    assert ask(cli, capsys) == (0, "answered\n", "")
    assert ask(cli, capsys) == (0, "answered\n", "") and len(records(world)) == 1


def test_a_record_another_user_wrote_is_not_trusted(world, capsys, monkeypatch):
    """In a cache folder others can write (K3PLAN_CACHE_DIR=/tmp/team-cache), a record written by someone
    else, well-formed and naming files as they are, was replayed: any verdict they put in it."""
    cli = Cli(world)
    ask(cli, capsys)
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # the record is now another user's
    assert ask(cli, capsys)[1].startswith("one") and cli.calls == 2


def test_a_save_cut_short_leaves_no_temporary_file(world, capsys, monkeypatch):
    """Was: a Ctrl-C (or a full disk) while the record was written left `.<key>.json.<pid>.tmp` in answers/."""
    real = Path.write_text

    def cut(self: Path, *a, **k):
        real(self, "half a rec", encoding="utf-8")
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut)
    with pytest.raises(KeyboardInterrupt):
        ask(Cli(world), capsys)
    assert list((world / "cache" / "answers").iterdir()) == []
