"""HardwareSpec loading: golden figures from hardware-facts.md, sources, strict keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k3plan.errors import K3PlanError
from k3plan.hardware import DEFAULT_HARDWARE, list_hardware, load_hardware
from k3plan.hardware.loader import SPECS_DIR
from k3plan.units import GB, GiB

EXPECTED = {
    "tpu-v7x",
    "tpu-v6e",
    "tpu-v5p",
    "tpu-v5e",
    "nvidia-h20",
    "nvidia-h100-sxm",
    "nvidia-h200",
    "nvidia-b200",
    "nvidia-b300",
    "nvidia-gb200-nvl72",
    "nvidia-gb300-nvl72",
    "amd-mi300x",
    "amd-mi325x",
    "amd-mi355x",
}


def test_bundled_set_and_default():
    assert set(list_hardware()) == EXPECTED
    assert DEFAULT_HARDWARE == "tpu-v7x"


def test_v7x_golden():
    hw = load_hardware("tpu-v7x")
    assert hw.devices_per_chip == 2
    assert hw.usable_bytes_per_device == round(94.75 * GiB)
    assert hw.hbm_bytes_per_device == 96 * GiB
    assert hw.chips_per_host == 4
    assert hw.flops_per_s_per_device("bf16") == pytest.approx(2307e12 / 2)
    assert hw.flops_per_s_per_device("fp8") == pytest.approx(4614e12 / 2)
    assert hw.scale_up.bw_bytes_per_s == pytest.approx(600e9)  # 1200 GB/s bidirectional -> one-way
    assert hw.scale_up.latency_s == pytest.approx(9.88e-6)
    assert hw.scale_out.bw_bytes_per_s == pytest.approx(12.5e9)  # 100 Gb/s
    assert hw.scale_up.kind == "torus3d"
    assert hw.wraparound_min == (4, 4, 4)
    assert hw.price_usd_per_chip_hour is None


def test_v7x_known_disagreements():
    hw = load_hardware("tpu-v7x")
    # bandwidth: 7.38 TB/s is per chip; a device gets half
    assert hw.hbm_bw_bytes_per_s_per_device == pytest.approx(7.38e12 / 2)
    alts = {a.value for a in hw.file.hbm_bw_per_device.alternatives}
    assert "7.38TB/s" in alts
    # capacity: Google's "192 GB" is GiB, so a device has 96 GiB, not 96e9 B
    assert hw.hbm_bytes_per_device * 2 == 192 * GiB
    assert hw.hbm_bytes_per_device != 96 * GB
    assert "96GB" in {a.value for a in hw.file.hbm_per_device.alternatives}


def test_v6e_fp8_no_gain_and_genz_disagreement():
    hw = load_hardware("tpu-v6e")
    assert hw.flops_per_s_per_device("fp8") == hw.flops_per_s_per_device("bf16") == pytest.approx(918e12)
    assert "926TFLOP/s" in {a.value for a in hw.file.flops_per_device["bf16"].alternatives}
    assert hw.price_usd_per_chip_hour == pytest.approx(1.35)


def test_dtype_errors_name_the_dtype():
    hw = load_hardware("tpu-v7x")
    with pytest.raises(K3PlanError, match="int8"):
        hw.flops_per_s_per_device("int8")
    with pytest.raises(K3PlanError, match="fp16x"):
        hw.flops_per_s_per_device("fp16x")
    assert hw.flops_per_s_per_device("bfloat16") == hw.flops_per_s_per_device("bf16")


def test_gpu_links_one_way():
    h200 = load_hardware("nvidia-h200")
    assert h200.scale_up.bw_bytes_per_s == pytest.approx(450e9)
    assert h200.scale_out.bw_bytes_per_s == pytest.approx(50e9)
    assert h200.hbm_bytes_per_device == 141 * 2**30  # NVIDIA's "141 GB" is GiB-class (the driver sees more than 141e9)
    assert load_hardware("nvidia-gb200-nvl72").scale_up.domain_chips == 72


# memory.total as nvidia-smi prints it (MiB) / rocm-smi's VRAM Total Memory (B): what a GPU offers a process
DRIVER_TOTAL_BYTES = {
    "nvidia-h100-sxm": 81559 * 2**20,
    "nvidia-h20": 97871 * 2**20,
    "nvidia-h200": 143771 * 2**20,
    "nvidia-b200": 183359 * 2**20,
    "nvidia-gb200-nvl72": 189471 * 2**20,
    "nvidia-b300": 275040 * 2**20,
    "nvidia-gb300-nvl72": 284208 * 2**20,
    "amd-mi300x": 206158430208,
}


@pytest.mark.parametrize("name", sorted(DRIVER_TOTAL_BYTES))
def test_gpu_usable_hbm_is_what_the_driver_reports(name):
    hw = load_hardware(name)
    assert hw.usable_bytes_per_device == DRIVER_TOTAL_BYTES[name]
    assert hw.usable_bytes_per_device <= hw.hbm_bytes_per_device
    src = hw.sources()["usable_hbm_per_device"]
    assert ("nvidia-smi" in src) or ("rocm-smi" in src)
    assert "context" in src  # says where the CUDA/ROCm context goes


def test_h200_usable_is_about_140_gib_not_141e9():
    usable = load_hardware("nvidia-h200").usable_bytes_per_device
    assert 140 * 2**30 < usable < 141 * 2**30 and usable > 141 * GB


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_spec_loads_with_sources(name):
    hw = load_hardware(name)
    assert hw.name == name
    assert 0 < hw.usable_bytes_per_device <= hw.hbm_bytes_per_device
    assert hw.hbm_bw_bytes_per_s_per_device > 0 and hw.flops_per_s_per_device("bf16") > 0
    sources = hw.sources()
    for field in (
        "devices_per_chip",
        "hbm_per_device",
        "usable_hbm_per_device",
        "hbm_bw_per_device",
        "flops_per_device.bf16",
        "scale_up.bw_per_chip",
        "scale_up.latency",
        "scale_up.domain",
        "scale_out.bw_per_chip",
        "scale_out.latency",
        "chips_per_host",
        "max_chips",
    ):
        assert sources.get(field, "").strip(), f"{name}: {field} has no source"
    assert all(s.strip() for s in sources.values())
    for shape in hw.standard_topologies:
        assert shape  # each parsed at load time


def _write(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load((SPECS_DIR / "tpu-v7x.yaml").read_text())
    mutate(raw)
    path = tmp_path / "tpu-v7x.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_misspelt_key_names_file_and_key(tmp_path):
    path = _write(tmp_path, lambda r: r.__setitem__("hbm_per_devise", r.pop("hbm_per_device")))
    with pytest.raises(K3PlanError) as err:
        load_hardware(str(path))
    msg = str(err.value)
    assert "tpu-v7x.yaml" in msg and "unknown key 'hbm_per_devise'" in msg and "hbm_per_device" in msg
    assert "\n" not in msg


def test_nested_misspelt_key(tmp_path):
    path = _write(tmp_path, lambda r: r["scale_up"].__setitem__("bw_per_chp", r["scale_up"].pop("bw_per_chip")))
    with pytest.raises(K3PlanError, match=r"unknown key 'scale_up\.bw_per_chp'"):
        load_hardware(str(path))


def test_missing_source_is_an_error(tmp_path):
    path = _write(tmp_path, lambda r: r["hbm_bw_per_device"].pop("source"))
    with pytest.raises(K3PlanError, match=r"hbm_bw_per_device\.source"):
        load_hardware(str(path))
    blank = _write(tmp_path, lambda r: r["max_chips"].__setitem__("source", "  "))
    with pytest.raises(K3PlanError, match="source"):
        load_hardware(str(blank))


def test_a_tpu_spec_without_a_scale_out_reach_is_refused(tmp_path):
    """A TPU's N*slice topologies are bounded only by scale_out.domain: a spec without it is an error."""
    path = _write(tmp_path, lambda r: r["scale_out"].pop("domain"))
    with pytest.raises(K3PlanError, match=r"scale_out\.domain .* is required for a TPU"):
        load_hardware(str(path))


def test_scale_out_reach_bounds_slices_joined_over_it_not_one_slice(tmp_path):
    """scale_out.domain is the most chips a deployment joins over DCN: one slice joins nothing over it
    (its chips are on ICI, bounded by max_chips), so only N*slice topologies are held to it."""
    from k3plan.hardware import parse_topology

    hw = load_hardware(str(_write(tmp_path, lambda r: r["scale_out"]["domain"].__setitem__("value", 16))))
    assert parse_topology(hw, "2x4x4").chips == 32  # one slice of 32 chips: no DCN
    assert parse_topology(hw, "2*2x2x2").chips == 16  # two slices of 8 over DCN: within 16
    with pytest.raises(K3PlanError, match=r"2 slices of 16 chips = 32 chips exceed the most a deployment joins"):
        parse_topology(hw, "2*2x2x4")


def test_bad_unit_names_field(tmp_path):
    path = _write(tmp_path, lambda r: r["hbm_per_device"].__setitem__("value", "96 gallons"))
    with pytest.raises(K3PlanError, match="hbm_per_device"):
        load_hardware(str(path))


def test_malformed_yaml_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nkind: [tpu\n")
    with pytest.raises(K3PlanError) as err:
        load_hardware(str(path))
    assert "invalid YAML" in str(err.value) and "\n" not in str(err.value)


def test_unknown_name_lists_known():
    with pytest.raises(K3PlanError, match="tpu-v7x") as err:
        load_hardware("tpu-v8")
    assert "unknown hardware 'tpu-v8'" in str(err.value)
