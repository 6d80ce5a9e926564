"""`k3plan curve`: issue 4's "Must show" — with the v7x calibration file it prints the context each
prefill chunk leaves and refuses the chunk sizes whose measured compile ran out of memory; the
envelope of measured points is used, never extrapolated; --plot; bad input -> exit 2, one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k3_testing import CALIBRATION, one_error_line

GiB = 2**30
CONFIG = ("-t", "2x2x4", "--tp", "32", "--stack", "jax-native")
MEASURED_PREFILL = {64: 10.44, 4096: 8.55, 16384: 18.10, 32768: 35.30, 49152: 36.54, 53248: 39.51}
OOM_CHUNK = 57344


def curve_json(cli, *args) -> dict:
    r = cli("curve", *args, "--json")
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    return json.loads(r.stdout)


def by_chunk(d: dict) -> dict[int, dict]:
    return {p["chunk_tokens"]: p for p in d["points"]}


def test_calibrated_curve_refuses_the_oom_chunk_and_keeps_53248(cli):
    d = curve_json(cli, *CONFIG, "--calibration", CALIBRATION)
    assert d["warnings"] == []  # the file was measured for exactly this configuration
    pts = by_chunk(d)
    # every calibrated size is on the curve, plus the defaults up to 64K
    assert set(MEASURED_PREFILL) | {OOM_CHUNK} <= set(pts)
    assert max(pts) == 65536
    ok = pts[53248]  # compiles, but leaves < 128K: no whole sequence of the context (issue 11: not "ok")
    assert ok["status"] == "no room" and "no sequence of 131,072 tokens" in ok["detail"]
    # issue 50: jax-native's scores are chunk x context; 53,248 x 131,072 is past every measured chunk^2, so
    # max(analytic, largest measured), never under the 53,248 point's 39.51
    assert ok["prefill_temp_bytes"] >= int(39.51 * GiB)
    assert ok["max_context_tokens"] < 131072 and ok["max_sequences"] == 0
    assert pts[16384]["status"] == "ok" and pts[16384]["max_sequences"] >= 1
    for c in (OOM_CHUNK, 65536):
        p = pts[c]
        assert p["status"] == "refused"
        assert p["max_context_tokens"] == 0 and p["max_sequences"] == 0
        assert p["prefill_temp_bytes"] is None
        assert "57,344" in p["detail"] and "ran out of memory" in p["detail"]
    for c, p in pts.items():
        assert (p["status"] == "refused") == (c >= OOM_CHUNK)


def test_the_envelope_never_extrapolates(cli):
    """A chunk between measured sizes takes the largest measured temp up to the next measured size;
    a chunk whose next measured size ran out of memory is refused; decode at 128K context (beyond
    the measured 32K) takes the largest measured decode temp, not a fitted slope."""
    # context 4,096: each chunk >= 4,096 reads a context of its own size, as the calibration's points were taken
    # (issue 50: jax-native's range is judged on chunk and chunk x context), so the envelope is over the chunk
    args = (*CONFIG, "--context", "4096", "--chunks", "1024,8192,50000,53248,55000,100000")
    pts = by_chunk(curve_json(cli, *args, "--calibration", CALIBRATION))
    analytic = by_chunk(curve_json(cli, *args))
    assert list(pts) == [1024, 8192, 50000, 53248, 55000, 100000]

    def counted(c, gib):  # the measured envelope, never under the analytic bound
        return max(int(gib * GiB), analytic[c]["prefill_temp_bytes"])

    assert pts[1024]["prefill_temp_bytes"] == counted(1024, 10.44)  # max(64 -> 10.44, 4096 -> 8.55)
    assert pts[8192]["prefill_temp_bytes"] == counted(8192, 18.10)
    assert pts[50000]["prefill_temp_bytes"] == counted(50000, 39.51)  # up to 53,248: not interpolated
    # past the refused 57,344 compile: refused; under it but past every chunk that fit: no evidence, not refused
    assert pts[100000]["status"] == "refused" and pts[55000]["status"] != "refused"
    for p in pts.values():
        if p["status"] == "ok":
            assert "envelope of measured points" in p["temp_source"]
        # decode at 4,096 tokens: the measured 4,096 point (29.8), never under the analytic bound
        assert p["decode_temp_bytes"] == max(analytic[p["chunk_tokens"]]["decode_temp_bytes"], int(29.8 * GiB))


def test_longer_chunks_never_leave_more_context(cli):
    d = curve_json(cli, *CONFIG, "--calibration", CALIBRATION)
    ok = [p for p in d["points"] if p["status"] == "ok"]
    ctx = [p["max_context_tokens"] for p in ok]
    assert ctx == sorted(ctx, reverse=True)
    assert ctx[0] > ctx[-1] > 0


def test_table_prints_the_context_each_chunk_leaves(cli):
    d = curve_json(cli, *CONFIG, "--calibration", CALIBRATION)
    r = cli("curve", *CONFIG, "--calibration", CALIBRATION)
    assert r.exit_code == 0, r.output
    rows = {}
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 6 and cells[0].replace(",", "").isdigit():
            rows[int(cells[0].replace(",", ""))] = cells
    assert set(rows) == {p["chunk_tokens"] for p in d["points"]}
    for p in d["points"]:
        cells = rows[p["chunk_tokens"]]
        assert cells[3] == f"{p['max_context_tokens']:,}"
        assert cells[5] == p["status"]
    # a refused chunk has no prefill temp: the missing mark
    assert rows[53248][5] == "no room" and rows[OOM_CHUNK][5] == "refused" and rows[OOM_CHUNK][1] == "-"
    flat = " ".join(r.stdout.split())
    assert (
        "refused at chunk 57,344: chunk 57,344 x context 131,072: the measured compile at chunk 57,344 ran out of memory"
        in flat
    )
    assert CALIBRATION.name in "".join(r.stdout.split())


def test_calibration_for_another_stack_is_warned_about(cli):
    """The default stack is vllm-tpu; the file was measured on jax-native. `fit` warns; curve
    applied it silently before the fix."""
    # jax-native's measured 29.83 GiB decode temp leaves vllm-tpu no room at 4,096: exit 1 (no fit), still warned
    j = cli("curve", "-t", "2x2x4", "--tp", "32", "--calibration", CALIBRATION, "--chunks", "4096", "--json")
    assert j.exit_code == 1, j.output
    d = json.loads(j.stdout)
    assert any("different configuration" in w and "jax-native" in w for w in d["warnings"])
    r = cli("curve", "-t", "2x2x4", "--tp", "32", "--calibration", CALIBRATION, "--chunks", "4096")
    assert r.exit_code == 1 and "warning:" in r.stdout


def test_modelled_curve_without_calibration(cli):
    # 2x4x4 TP=32 jax-native: no shipped calibration matches (they are all 2x2x4), so the curve is
    # the shipped temp model's upper end (issue 15 item 1, tier c) and says so; CONFIG itself takes the
    # shipped measured file by default
    d = curve_json(cli, "-t", "2x4x4", "--tp", "32", "--stack", "jax-native")
    assert d["calibration"] is None and "temp model" in d["title"]
    assert [p["status"] for p in d["points"]][:4] == ["ok"] * 4  # chunks up to 8,192 leave room
    assert all(p["temp_source"].startswith("temp model k3plan/evidence/temp_model.yaml") for p in d["points"])
    temps = [p["prefill_temp_bytes"] for p in d["points"]]
    assert temps == sorted(temps)
    ctx = [p["max_context_tokens"] for p in d["points"]]
    assert ctx == sorted(ctx, reverse=True)


def test_curve_names_the_shipped_evidence_by_default(cli):
    # the 2x2x4 TP=32 jax-native configuration has a shipped measured file: with no --calibration
    # the curve takes its temps from it and every point names it and its kind
    d = curve_json(cli, *CONFIG)
    assert all("measured calibration" in p["temp_source"] for p in d["points"])
    assert all("k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml" in p["temp_source"] for p in d["points"])
    assert not any("/work/" in p["temp_source"] for p in d["points"])  # no checkout path


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_plot_writes_a_file(cli, tmp_path, suffix):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"curve.{suffix}"
    r = cli("curve", *CONFIG, "--calibration", CALIBRATION, "--plot", out)
    assert r.exit_code == 0, r.output
    assert "plot written to" in r.stdout
    data = out.read_bytes()
    if suffix == "png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--chunks", "abc"], "--chunks"),
        (["--chunks", "0"], "--chunks"),
        (["--chunks", "4096,-1"], "--chunks"),
        (["--chunks", ","], "--chunks"),
        (["--batch", "0"], "--batch 0"),
        (["--context", "-5"], "--context -5"),
        (["--calibration", "/nonexistent/cal.yaml"], "--calibration"),
        (["--plot", "curve.jpg"], "--plot"),
        (["--plot", "/nonexistent/dir/curve.png"], "--plot"),
    ],
)
def test_bad_input_exits_2_one_line(cli, args, needle):
    line = one_error_line(cli("curve", *CONFIG, *args))
    assert needle in line


@pytest.mark.parametrize(
    "payload", [b"prefill: [unclosed", b"\x89PNG\r\n\x1a\n\xd0\xff binary", b"- just\n- a list\n", b"model: kimi-k3\n"]
)
def test_unreadable_calibration_exits_2_one_line(cli, tmp_path, payload):
    p = tmp_path / "cal.yaml"
    p.write_bytes(payload)
    line = one_error_line(cli("curve", *CONFIG, "--calibration", p))
    assert "--calibration" in line or "cal.yaml" in line


def test_chunks_beyond_the_calibration_are_marked_not_extrapolated(cli):
    """The committed deviceless-TPU sweep measured chunks up to 32,768: a 65,536 chunk is not called
    'ok' — it takes the largest measured temp (never a fitted slope) and says it is outside."""
    sweep = Path(__file__).resolve().parents[2] / "reports" / "validation" / "k3-tpu7x-2x2x4-tp32-vllm-tpu-sweep.yaml"
    r = cli(
        "curve",
        "-t",
        "2x2x4",
        "--tp",
        "32",
        "--calibration",
        sweep,
        "--chunks",
        "32768,65536",
        "--context",
        "4096",
        "--json",
    )
    assert r.exit_code == 0, r.output
    points = {p["chunk_tokens"]: p for p in json.loads(r.stdout)["points"]}
    assert points[32768]["status"] == "ok"
    assert points[65536]["status"] == "outside calibration"
    assert points[65536]["prefill_temp_bytes"] == points[32768]["prefill_temp_bytes"]


def test_a_curve_with_no_room_at_any_chunk_exits_1_with_the_reason(cli):
    """issue 10 item 6: `curve -t 2x2x2 --tp 16` printed "no room" on every row and exited 0; a
    workload that fits at no chunk size does not fit: exit 1, as fit, with a one-line reason."""
    r = cli("curve", "-t", "2x2x2", "--tp", "16")
    assert r.exit_code == 1, r.output
    assert "ok at chunk" not in r.stdout and "no room at chunk 8,192" in r.stdout
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("DOES NOT FIT: no prefill chunk size leaves room for 1 sequence(s) of 131,072 tokens")
    j = cli("curve", "-t", "2x2x2", "--tp", "16", "--json")
    assert j.exit_code == 1 and "DOES NOT FIT" in j.stderr
    assert {p["status"] for p in json.loads(j.stdout)["points"]} == {"no room"}  # the JSON stays whole


def test_sessions_on_a_workload_that_does_not_fit_are_not_bad_input(cli):
    """issue 10 item 6: with --turns the same workload exited 2 ("bad input"); it does not fit: exit 1."""
    r = cli("curve", "-t", "2x2x2", "--tp", "16", "--turns", "5", "--user-tokens", "800", "--answer-tokens", "1200")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and "error:" not in r.output
    assert r.stdout.strip().splitlines()[-1].startswith("DOES NOT FIT")


def test_a_curve_with_room_exits_0(cli):
    assert cli("curve", "-t", "2x2x4", "--tp", "32", "--context", "8192").exit_code == 0


def test_a_batch_that_fits_at_no_chunk_is_no_room_and_exits_1_as_fit(cli):
    """Was: `curve -t 2x2x4 --tp 32 --batch 32 --context 32768` marked chunks "ok" that hold 9 of the 32
    sequences and exited 0, while `fit` with the same flags says DOES NOT FIT (exit 1). "Room for the
    workload" is room for --batch sequences of --context tokens, fit's concurrency rule."""
    args = ("-t", "2x2x4", "--tp", "32", "--batch", "32", "--context", "32768")
    assert cli("fit", *args).exit_code == 1
    r = cli("curve", *args, "--json")
    assert r.exit_code == 1, r.output
    pts = json.loads(r.stdout)["points"]
    # (issue 50: batch 32 x 32,768 is past the compiled decode points: no chunk holds a sequence of the batch here)
    for p in pts:
        assert p["status"] != "ok" and p["status"] in ("no room", "refused"), p
        if p["status"] == "no room" and p["max_sequences"] > 0:
            assert f"{p['max_sequences']} of the 32 sequences" in p["detail"], p
    # batch 8 x 8,192 (a compiled point, issue 50) fits at the default chunk: that row stays ok and curve exits 0, as fit does
    ok = cli("curve", "-t", "2x2x4", "--tp", "32", "--batch", "8", "--context", "8192", "--json")
    assert (
        ok.exit_code == 0
        and cli("fit", "-t", "2x2x4", "--tp", "32", "--batch", "8", "--context", "8192").exit_code == 0
    )
    assert by_chunk(json.loads(ok.stdout))[8192]["status"] == "ok"
