"""`k3plan report`: Markdown + one self-contained HTML with embedded plots, a platform that cannot
hold K3 said so in the report, no jax imported, fast."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    out = tmp_path_factory.mktemp("report") / "cap.md"
    t = time.perf_counter()
    r = CliRunner().invoke(
        app, ["report", "-H", "tpu-v7x,tpu-v5e", "-c", "131072", "--max-chips", "64", "--out", str(out), "--html"]
    )
    return r, out, time.perf_counter() - t


def test_report_writes_markdown_html_and_plots_quickly(written):
    r, out, seconds = written
    assert r.exit_code == 0, r.output
    assert seconds < 20
    md = out.read_text()
    for stem in ("memory", "curve", "roofline", "pareto"):
        png = out.with_name(f"cap-{stem}.png")
        assert png.stat().st_size > 5000 and png.read_bytes()[:4] == b"\x89PNG"
        assert f"(cap-{stem}.png)" in md
    assert "## Summary" in md and "## tpu-v7x" in md and "Where these numbers come from" in md
    assert "smallest viable" in md.lower() and "2x2x4" in md
    page = out.with_suffix(".html").read_text()
    assert page.count("src='data:image/png;base64,") == 4  # memory, curve, roofline, Pareto front
    assert "## Deployment: Pareto front and cost" in md and "### Cost" in md
    assert not re.search(r"src='(?!data:)", page)  # nothing linked: one self-contained file
    assert "[1/2] tpu-v7x" in r.stderr and "[2/2] tpu-v5e" in r.stderr


def test_a_platform_that_cannot_fit_says_so(written):
    _, out, _ = written
    md = out.read_text()
    assert "tpu-v5e cannot hold K3" in md
    assert "K3 cannot be served here at this context" in md
    assert re.search(r"no standard tpu-v5e topology up to 64 chips holds kimi-k3", md)


def test_report_prints_token_counts_exact_and_memory_in_gib(written):
    """Issue 10 item 6: the summary, findings and headings say 131,072 (never "128K", K = 1,024) and the
    checkpoint in GiB like `models show` (1,452.83 GiB, not "1.56 TB")."""
    _, out, _ = written
    md = out.read_text()
    assert "| 131,072 |" in md  # the summary's context column
    assert "At a 131,072-token context the fewest chips" in md
    assert "### 131,072-token context" in md
    assert not re.search(r"\b\d+K\b", md), re.findall(r".{30}\b\d+K\b.{10}", md)
    assert re.search(r"checkpoint [\d,]+\.\d\d GiB\.", md) and " TB." not in md


def test_report_does_not_import_jax(tmp_path):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from k3plan.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['report', '-H', 'nvidia-gb300-nvl72', '-c', '131072', '--out', r'{tmp_path / 'r.md'}', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "args, words",
    [
        (["-c", "lots"], "--context"),
        (["--out", "x.txt"], "expected a .md"),
        (["-H", "tpu-v9"], "unknown hardware"),
        (["--stack", "cpu=foo"], "--stack"),
        (["--plot-format", "gif"], "--plot-format"),
    ],
)
def test_bad_input_one_line(cli, tmp_path, args, words):
    if "--out" not in args:
        args = args + ["--out", str(tmp_path / "r.md")]
    r = cli("report", *args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines


def test_json_lists_platforms(cli, tmp_path):
    r = cli("report", "-H", "nvidia-b200", "-c", "131072", "--out", tmp_path / "r.md", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    row = d["platforms"][0]["rows"][0]
    assert row["fits"] and row["setup"]["topology"] and row["decode"]["concurrency"]["tokens_per_s"] > 0


def test_report_takes_the_probed_hbm_bandwidth_as_fit_does(cli, tmp_path):
    """One answer: with an HBM probe record for the device, fit's speed uses the probed bandwidth; the report's
    row for the same pick must too (it used the spec's while the plan it takes its pick from used the probe's)."""
    from k3plan.evidence.probe_record import ProbeRecord
    from k3plan.probes.store import write_record
    from k3plan.specfile import convert

    probes = tmp_path / "probes"
    points = [{"params": {"bytes": 2**30}, "value": 3.0e12, "unit": "bytes/s"}]
    write_record(
        record=convert(
            ProbeRecord,
            dict(
                probe="hbm",
                op=None,
                mode=None,
                backend="tpu",
                device_kind="TPU7x",
                device_count=1,
                date="2030-01-01T00:00:00Z",
                label="a test record",
                points=points,
            ),
            "a probe record",
        ),
        out_dir=probes,
    )
    f = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "-c", "8192", "--probes", str(probes), "--json").stdout)
    plain = json.loads(cli("fit", "-t", "2x2x4", "--tp", "32", "-c", "8192", "--json").stdout)
    # the decode bound (issue 38: speed.tpot_s is a serving benchmark's here, the bound is ceiling_tpot_s)
    assert f["speed"]["ceiling_tpot_s"] > plain["speed"]["ceiling_tpot_s"]  # 3.0 TB/s is below the spec's bandwidth
    r = cli(
        "report",
        "-H",
        "tpu-v7x",
        "-c",
        "8192",
        "--concurrency",
        "1",
        "--probes",
        str(probes),
        "--out",
        str(tmp_path / "r.md"),
        "--json",
    )
    row = json.loads(r.stdout)["platforms"][0]["rows"][0]
    assert (row["setup"]["topology"], row["setup"]["tp"]) == ("2x2x4", 32)
    d = row["decode"]["concurrency"]
    assert d["ceiling_tpot_s"] == f["speed"]["ceiling_tpot_s"] and d["tpot_s"] == f["speed"]["tpot_s"]
    assert row["provenance"]["hbm_bw"].startswith("probe: HBM bandwidth 3.000 TB/s a device from probed on TPU7x")


def test_report_applies_cpu_records_only_under_allow_cpu_probes_as_fit_does(cli, tmp_path):
    """The probe options are one set: a CPU-backend HBM record is refused by default and applied under
    --allow-cpu-probes, by fit and by the report alike (the report had no --allow-cpu-probes)."""
    from k3plan.evidence.probe_record import ProbeRecord
    from k3plan.probes.store import write_record
    from k3plan.specfile import convert

    probes = tmp_path / "probes"
    points = [{"params": {"bytes": 2**30}, "value": 2.0e12, "unit": "bytes/s"}]
    write_record(
        record=convert(
            ProbeRecord,
            dict(
                probe="hbm",
                op=None,
                mode=None,
                backend="cpu",
                device_kind="cpu",
                device_count=1,
                date="2030-01-01T00:00:00Z",
                label="a CPU test record",
                points=points,
            ),
            "a probe record",
        ),
        out_dir=probes,
    )
    base = ["-t", "2x2x4", "--tp", "32", "-c", "8192", "--probes", str(probes), "--json"]
    refused = json.loads(cli("fit", *base).stdout)["speed"]["ceiling_tpot_s"]  # the bound (issue 38)
    allowed = json.loads(cli("fit", *base, "--allow-cpu-probes").stdout)["speed"]["ceiling_tpot_s"]
    assert allowed > refused  # 2.0 TB/s is below the spec's bandwidth

    def report_row(*extra):
        r = cli(
            "report",
            "-H",
            "tpu-v7x",
            "-c",
            "8192",
            "--concurrency",
            "1",
            "--probes",
            str(probes),
            "--out",
            str(tmp_path / "r.md"),
            "--json",
            *extra,
        )
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["platforms"][0]["rows"][0]

    row = report_row()
    assert (row["setup"]["topology"], row["setup"]["tp"]) == ("2x2x4", 32)
    assert row["decode"]["concurrency"]["ceiling_tpot_s"] == refused  # the bound, beside the TPOT stood behind
    row = report_row("--allow-cpu-probes")
    assert row["decode"]["concurrency"]["ceiling_tpot_s"] == allowed
    assert row["provenance"]["hbm_bw"].startswith("probe: HBM bandwidth 2.000 TB/s a device")


def test_a_context_where_nothing_fits_still_states_the_platforms_usable_hbm(cli, tmp_path):
    """The JSON said usable_bytes_per_device 0 for a context where nothing fits: the HBM did not vanish."""
    r = cli("report", "-H", "tpu-v5e", "-c", "1048576", "--out", str(tmp_path / "r.md"), "--json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["platforms"][0]["rows"][0]
    hw = json.loads(cli("hardware", "show", "tpu-v5e", "--json").stdout)
    assert not row["fits"]
    assert row["usable_bytes_per_device"] == hw["usable_bytes_per_device"] > 0


def test_one_stack_with_an_option_is_one_stack_for_every_platform(cli, tmp_path):
    # 'vllm:all2all_backend=deepep_low_latency' has an '=' of its own: it was read as a kind=stack pair
    # and refused ("expected kind=stack pairs with kind tpu or gpu")
    from k3plan.cli.report import _stacks

    one = "vllm:all2all_backend=deepep_low_latency+gpu_memory_utilization=0.8"
    assert _stacks(one) == {"tpu": one, "gpu": one}
    # a kind not named keeps its machines' default stacks (the ones fit and plan pick)
    assert _stacks("gpu=vllm:all2all_backend=deepep_low_latency") == {"gpu": "vllm:all2all_backend=deepep_low_latency"}
    assert _stacks("auto") == {}
    res = cli("report", "-H", "nvidia-gb200-nvl72", "-s", one, "-c", "131072", "--out", tmp_path / "r.md", "--json")
    assert res.exit_code == 0, res.stderr
    import json

    rows = json.loads(res.stdout)["platforms"][0]["rows"]
    assert rows[0]["setup"]["stack"] == "vllm:all2all_backend=deepep_low_latency+gpu_memory_utilization=0.8"
