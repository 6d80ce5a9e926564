"""Issue 10 item 3: a report row's provenance is typed (RowProvenance: the fit's Provenance, then the
sources the report adds), each field naming the source of its own number; a context where nothing
fits has none and dumps {} as the JSON contract has it."""

from __future__ import annotations

import pytest

from k3plan.budget.result import Provenance
from k3plan.hardware import load_hardware
from k3plan.report.capacity import platform_report
from k3plan.report.capacity_model import RowProvenance
from k3plan.roofline.bounds import Efficiency
from k3plan.structs import dump, fields


def test_fields_are_the_fits_then_the_reports():
    added = ["expected", "hbm_bw", "flops", "collective_latency", "efficiency"]
    assert fields(RowProvenance) == (*fields(Provenance), *added)


@pytest.fixture(scope="module")
def b200():
    eff = Efficiency(mfu=0.25, bw_efficiency=0.8)
    return platform_report(
        model="kimi-k3", hardware="nvidia-b200", stack="sglang", contexts=[131072], concurrency=1, max_chips=16, eff=eff
    )


def test_each_source_names_its_own_number(b200):
    row = b200.rows[0]
    assert row.fits and isinstance(row.provenance, RowProvenance)
    p = row.provenance
    src = load_hardware("nvidia-b200").sources()
    assert p.hbm_bw == src["hbm_bw_per_device"]  # the bandwidth's source, not the FLOPs'
    assert p.flops == src.get("flops_per_device.bf16", src.get("flops_per_device"))
    assert p.efficiency == "assumed: MFU 25%, HBM efficiency 80% (k3plan roofline defaults)"
    assert p.collective_latency == row.decode.concurrency.latency_source
    assert p.lines()[0] == f"weights: {p.weights}" and p.lines()[-1] == f"efficiency: {p.efficiency}"


def test_nothing_fits_has_no_provenance():
    r = platform_report(  # K3 on at most 8 B200s: the weights alone do not fit
        model="kimi-k3",
        hardware="nvidia-b200",
        stack="sglang",
        contexts=[131072],
        concurrency=1,
        max_chips=8,
        eff=Efficiency(),
    )
    row = r.rows[0]
    assert not row.fits and row.provenance is None
    assert dump(row)["provenance"] == {}
