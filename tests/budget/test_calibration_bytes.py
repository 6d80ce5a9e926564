"""Issue 10 item 3: calibration files store sizes as int bytes a device (temp_bytes,
available_hbm_bytes, argument_bytes); files written before that (temp_gib, ...) are still read, as
int(gib * 2^30) bytes, and a file gives exactly one spelling a size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k3plan.errors import K3PlanError
from k3plan.evidence.calibration import load_calibration

SHIPPED = Path(__file__).resolve().parents[2] / "k3plan" / "evidence" / "calibrations"
HEAD = {
    "model": "kimi-k3",
    "hardware": "tpu-v7x",
    "topology": "2x2x4",
    "tp": 32,
    "ep": 32,
    "dp": 1,
    "stack": "jax-native",
    "backend": "tpu",
}
# GiB values exact in binary, so each has one byte count: 5.0 GiB = 5 * 2^30 B, 12.5 GiB, ...
GIB_FILE = {
    **HEAD,
    "available_hbm_gib": 94.75,
    "argument_gib": 50.25,
    "prefill": [{"tokens": 4096, "temp_gib": 5.0}, {"tokens": 16384, "temp_gib": 12.5, "fits": True}],
    "decode": [{"context": 8192, "temp_gib": 3.0, "batch": 8}],
}
BYTES_FILE = {
    **HEAD,
    "available_hbm_bytes": 94 * 2**30 + 3 * 2**28,
    "argument_bytes": 50 * 2**30 + 2**28,
    "prefill": [
        {"tokens": 4096, "temp_bytes": 5 * 2**30},
        {"tokens": 16384, "temp_bytes": 12 * 2**30 + 2**29, "fits": True},
    ],
    "decode": [{"context": 8192, "temp_bytes": 3 * 2**30, "batch": 8}],
}


def _load(tmp_path, data: dict, name: str = "cal.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    load_calibration.cache_clear()  # the same path rewritten: read it again
    return load_calibration(str(p))


@pytest.mark.parametrize("data", [GIB_FILE, BYTES_FILE], ids=["gib", "bytes"])
def test_both_spellings_read_as_the_same_int_bytes(tmp_path, data):
    cal = _load(tmp_path, data)
    assert [(p.tokens, p.temp_bytes) for p in cal.prefill] == [(4096, 5 * 2**30), (16384, 12 * 2**30 + 2**29)]
    assert [(p.context, p.batch, p.temp_bytes) for p in cal.decode] == [(8192, 8, 3 * 2**30)]
    assert cal.available_hbm_bytes == 94 * 2**30 + 3 * 2**28  # 94.75 GiB
    assert cal.argument_bytes == 50 * 2**30 + 2**28  # 50.25 GiB
    assert all(type(p.temp_bytes) is int for p in [*cal.prefill, *cal.decode])


def test_an_old_gib_value_converts_as_the_envelope_did(tmp_path):
    # 8.55 GiB is not exact in binary: 8.55 * 2^30 = 9,180,492,595.2, truncated to 9,180,492,595 B
    cal = _load(tmp_path, {**HEAD, "prefill": [{"tokens": 64, "temp_gib": 8.55}]})
    assert cal.prefill[0].temp_bytes == 9_180_492_595
    assert cal.available_hbm_bytes is None and cal.argument_bytes is None  # optional: not recorded


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            {"prefill": [{"tokens": 64, "temp_bytes": 2**30, "temp_gib": 1.0}]},
            "prefill.0: both temp_bytes and temp_gib",
        ),
        ({"prefill": [{"tokens": 64}]}, "prefill.0: no size; expected temp_bytes"),
        ({"decode": [{"context": 64, "fits": False}]}, "decode.0: no size"),
        ({"prefill": [{"tokens": 64, "temp_bytes": 1.0}]}, "prefill.0.temp_bytes"),  # bytes are ints
        ({"prefill": [{"tokens": 64, "temp_bytes": -1}]}, "prefill.0.temp_bytes"),
        ({"prefill": [{"tokens": 64, "temp_bytes": 2**51}]}, "prefill.0.temp_bytes"),
        ({"available_hbm_bytes": 2**36, "available_hbm_gib": 64.0}, "both available_hbm_bytes and available_hbm_gib"),
        ({"argument_bytes": 2**30, "argument_gib": 1.0}, "both argument_bytes and argument_gib"),
        ({"argument_bytes": 0}, "argument_bytes"),
        ({"argument_bytes": "5"}, "argument_bytes"),
    ],
)
def test_one_spelling_a_size_else_one_error(tmp_path, change, needle):
    data = {**HEAD, "prefill": [{"tokens": 64, "temp_bytes": 2**30}], **change}
    with pytest.raises(K3PlanError, match=needle) as err:
        _load(tmp_path, data)
    assert "\n" not in str(err.value)


def _fit_json(cli, path: Path, stack: str, *extra: str) -> str:
    load_calibration.cache_clear()
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--stack", stack, "--calibration", str(path), *extra, "--json")
    assert "Traceback" not in r.output and r.exit_code in (0, 1, 3), r.output  # 3: FITS IF (issue 50)
    return r.stdout


def _to_bytes(data: dict) -> dict:
    """An old file rewritten in the bytes spelling, each size int(gib * 2^30) as written out here."""
    out = {}
    for k, v in data.items():
        if k in ("available_hbm_gib", "argument_gib"):
            out[k.replace("_gib", "_bytes")] = None if v is None else int(v * 2**30)
        elif k in ("prefill", "decode"):
            out[k] = [
                {(kk.replace("_gib", "_bytes")): (int(vv * 2**30) if kk == "temp_gib" else vv) for kk, vv in pt.items()}
                for pt in v
            ]
        else:
            out[k] = v
    return out


def test_a_bytes_file_and_its_exact_gib_file_fit_the_same_to_the_byte(cli, tmp_path):
    p = tmp_path / "cal.yaml"
    p.write_text(yaml.safe_dump(GIB_FILE))
    # context 4,096: jax-native's 4,096 chunk x 4,096 context is the file's 4,096 point (issue 50: chunk x context)
    old = _fit_json(cli, p, "jax-native", "--context", "4096", "--chunk", "4096")
    p.write_text(yaml.safe_dump(BYTES_FILE))
    new = _fit_json(cli, p, "jax-native", "--context", "4096", "--chunk", "4096")
    assert new == old
    d = json.loads(new)
    # the calibration's point at chunk 4096, to the byte, never under the analytic bound (issue 50)
    assert d["temp"]["prefill_bytes"] == max(5 * 2**30, sum(d["temp"]["prefill_terms"].values()))
    assert d["temp"]["decode_bytes"] == max(3 * 2**30, sum(d["temp"]["decode_terms"].values()))


# the vllm-tpu graph's compiled file of 2026-12-01, shipped until issue 50 replaced it (bytes) and kept as history
HISTORY = SHIPPED.parents[2] / "reports" / "validation" / "vllm-tpu-tiled"


@pytest.mark.parametrize(
    "path, stack",
    [
        (SHIPPED / "k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml", "jax-native"),
        (HISTORY / "k3-tpu7x-2x2x4-tp32-vllm-tpu-compiled-20261201.yaml", "vllm-tpu"),
    ],
)
def test_a_shipped_gib_file_in_bytes_fits_the_same_to_the_byte(cli, tmp_path, path, stack):
    name = path.name
    data = yaml.safe_load(path.read_text())
    assert "temp_gib" in data["prefill"][0]  # the shipped records keep their GiB spelling
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    old = _fit_json(cli, p, stack, "--chunk", "16384")
    p.write_text(yaml.safe_dump(_to_bytes(data), sort_keys=False))
    assert _fit_json(cli, p, stack, "--chunk", "16384") == old
