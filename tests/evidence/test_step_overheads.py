"""Issue 38: the step-overhead evidence the step-time model reads: the lent TPU's record (measured on a TPU
backend only) and the engine's published host time a synchronous step."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.evidence.hosts import FOLDER, engine_step_overheads, load_step_overheads, shipped_step_overheads


def test_the_shipped_record_was_measured_on_a_tpu():
    (rec,) = shipped_step_overheads()
    assert rec.backend == "tpu" and rec.device_kind.startswith("TPU")
    assert 0 < rec.fusion_chain.s_per_dependent_op < 1e-5
    assert rec.host_sync.s_host_round_trip == pytest.approx(
        rec.host_sync.s_per_step_sync - rec.host_sync.s_per_step_queued, rel=1e-3
    )
    # a K3 layer folded in one program ran at the chip's HBM rate: no fixed cost a layer beside the ops'
    assert rec.layer_scan.bytes_per_layer / rec.layer_scan.s_per_layer < 819e9  # v5e's HBM peak


def test_a_record_from_a_cpu_backend_is_refused(tmp_path):
    src = next(FOLDER.glob("*.yaml")).read_text().replace("backend: tpu", "backend: cpu")
    p = tmp_path / "cpu.yaml"
    p.write_text(src)
    with pytest.raises(K3PlanError, match="only a record measured on a TPU"):
        load_step_overheads(p)


def test_the_engine_figure_carries_its_source():
    (e,) = engine_step_overheads()
    assert e.engine_family == "vllm" and e.seconds == 0.0045 and e.scheduling == "sync"
    assert e.source == "https://github.com/tenstorrent/vllm/issues/351" and "4.5 ms" in e.quote
