"""The score prices each public run as it ran: an SGLang run that sets no --moe-a2a-backend ran SGLang's own default,
none (the all-reduce MoE, shared experts split over TP), not the sglang stack's DeepEP deployment
(engines/sglang/flags.py SGLANG_A2A_DEFAULT, as fit --serve reads a command)."""

from __future__ import annotations

import msgspec

from k3plan.app.score import _setup
from k3plan.budget.fit import check_workload, fit
from k3plan.evidence.benchmarks import load_benchmarks


def _k3_b300():
    return next(b for b in load_benchmarks() if b.engine.name == "sglang" and b.model == "kimi-k3")


def test_an_sglang_run_without_a_backend_is_priced_at_sglang_s_default():
    b = _k3_b300()
    assert b.flags.moe_a2a_backend is None and "--moe-a2a-backend" not in b.flags.extra
    setup, _ = _setup(b)
    assert setup.stack.chosen["moe_a2a_backend"] == "none"
    assert setup.stack.chosen["mem_fraction_static"] == str(b.flags.gpu_memory_utilization)  # the run's own, kept
    deepep = msgspec.structs.replace(b, flags=msgspec.structs.replace(b.flags, moe_a2a_backend="deepep"))
    other, _ = _setup(deepep)
    assert other.stack.chosen["moe_a2a_backend"] == "deepep"
    # the shared experts split over the 8 GPUs without a backend, whole on every one under DeepEP; nothing else moves
    w = check_workload(context_tokens=9216, batch=1, prefill_chunk_tokens=8192)
    split, whole = ({r.role: r.bytes for r in fit(s, w).weights_by_role} for s in (setup, other))
    assert whole.pop("shared_expert") == 8 * split.pop("shared_expert") and split == whole
