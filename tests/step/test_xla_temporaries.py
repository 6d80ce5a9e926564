"""Issue 50: jax-native's analytic prefill temporaries are the porting study's graph's own (``Engine.temp_graph``
"xla": f32 scores over the chunk x context, group_sort rows over every token-expert pair, the layer's experts
dequantized in f32), held against the real v7x slice the study measured.

Golden values: the porting study's measurement log (2026-07-31), K3 on a real TPU v7x 2x2x4 (32 devices), TP=32,
jax-native, ``temp_size_in_bytes`` of the prefill step by chunk (GiB = 2^30 B), as shipped in
k3plan/evidence/calibrations/k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml (typed here, not read from it).
"""

from __future__ import annotations

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.setup import make_setup
from k3plan.units import GiB

REAL_PREFILL_GIB = {64: 10.44, 4096: 8.55, 16384: 18.10, 32768: 35.30, 49152: 36.54, 53248: 39.51, 57344: 44.55}
REAL_ARGUMENTS_GIB = 50.27  # the slice's jit arguments (weights)
# where the model misses by more than 15%, and why (reports/validation/README.md, "jax-native: the porting study's
# graph against the real v7x slice"): at 64 tokens the real graph keeps a floor of experts dequantized ahead of use
# (10.44 GiB, above its 4,096-token point) that no shape rule sizes; at 32,768 the allocator stacks the MLA scores'
# region on the MoE rows' (k3plan's own compile: 14.8 GiB of other buffers under the 12 GiB of scores)
OUTSIDE = {64: (-0.40, -0.15), 32768: (-0.25, -0.15)}


@pytest.fixture(scope="module")
def setup():
    return make_setup(topology="2x2x4", tp=32, stack="jax-native")


def _analytic(setup, chunk: int):
    return fit(setup, Workload(context_tokens=chunk, batch=1, prefill_chunk_tokens=chunk), evidence=False)


@pytest.mark.parametrize("chunk", sorted(REAL_PREFILL_GIB))
def test_prefill_temp_against_the_real_v7x(setup, chunk):
    r = _analytic(setup, chunk)
    err = r.temp.prefill_bytes / (REAL_PREFILL_GIB[chunk] * GiB) - 1
    lo, hi = OUTSIDE.get(chunk, (-0.15, 0.15))
    assert lo <= err <= hi, f"prefill {chunk}: analytic {r.temp.prefill_bytes / GiB:.2f} GiB, {err:+.1%}"


def test_4k_within_15_percent(setup):
    # the point: k3plan's own compile of the graph is +94% there (reports/validation/README.md)
    r = _analytic(setup, 4096)
    assert abs(r.temp.prefill_bytes / (8.55 * GiB) - 1) <= 0.15
    labels = [t.name for t in r.temp.prefill_terms]
    assert any(lab.startswith("MoE: ") for lab in labels)  # the MoE block is the peak at 4K


def test_the_oom_boundary_of_the_real_slice(setup):
    # the slice fit a 53,248-token chunk and refused 57,344 (arguments + temp 94.82 > 94.74 GiB): the analytic temp
    # beside the weights draws the same line
    fits = _analytic(setup, 53248)
    assert fits.per_device.weights_bytes / GiB == pytest.approx(REAL_ARGUMENTS_GIB, abs=0.05)
    assert fits.fits and fits.unverified is not None  # FITS IF: the analytic temp is never a plain FITS
    refused = _analytic(setup, 57344)
    assert not refused.fits and refused.per_device.free_bytes < 0  # DOES NOT FIT: budget


def test_57k_peaks_at_the_scores(setup):
    # at 57,344 tokens the f32 scores of 3 local heads over the chunk x context (36.75 GiB) are the largest block
    terms = {t.name: t.bytes for t in _analytic(setup, 57344).temp.prefill_terms}
    scores = next(b for n, b in terms.items() if n.startswith("MLA: scores"))
    assert scores == 3 * 57344 * 57344 * 4
