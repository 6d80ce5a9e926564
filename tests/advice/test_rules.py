"""Advice rules on small round numbers (GiB), every effect worked by hand."""

from __future__ import annotations

import pytest

from k3plan.advice import (
    AdviceInputs,
    BatchOption,
    KvDtypeOption,
    PartTime,
    SpecDecodeOption,
    TopologyOption,
    advise,
)

G = 2**30
CTX = 131072
BPT = 16384  # KV bytes a token a device: 131,072 tokens x 16,384 B = 2 GiB a sequence


def inputs(*, weights, seqs, state_per_seq, usable=100 * G, temp=5 * G, reserve=10 * G, **kw):
    kv, state = seqs * CTX * BPT, seqs * state_per_seq
    free = usable - (weights + kv + state + temp + reserve)
    base = {
        "usable_bytes": usable,
        "weights_bytes": weights,
        "kv_bytes": kv,
        "state_bytes": state,
        "temp_bytes": temp,
        "reserve_bytes": reserve,
        "free_bytes": free,
        "topology": "2x2x2",
        "devices": 16,
        "batch": seqs,
        "sequences": seqs,
        "context_tokens": CTX,
        "kv_dtype": "bf16",
        "kv_bytes_per_token": BPT,
        "state_bytes_per_sequence": state_per_seq,
    }
    return AdviceInputs(**{**base, **kw})


def test_weights_too_big_only_topology_helps():
    # 90 + 2 (KV) + 0.5 (state) + 5 + 10 = 107.5 GiB used of 100: free -7.5 GiB
    x = inputs(
        weights=90 * G,
        seqs=1,
        state_per_seq=G // 2,
        topology_options=(TopologyOption(topology="2x2x4", devices=32, weights_bytes=45 * G),),
    )
    a = advise(x)
    assert a.verdict == "fails" and a.free_bytes == -7.5 * G
    # weights + temp + reserve = 105 GiB > 100: no batch or context can fit
    assert (
        len(a.warnings) == 1
        and "no batch or context fits" in a.warnings[0]
        and "exceed 100.0 GiB by 5.0 GiB a device" in a.warnings[0]
    )
    (s,) = a.suggestions
    # 2x2x4 halves the weights: frees 45 GiB a device, free -7.5 -> 37.5 GiB
    assert s.action == "topology" and s.freed_bytes_per_device == 45 * G and s.free_bytes_after == 37.5 * G
    assert s.resolves and s.text == (
        "2x2x2 -> 2x2x4 (16 -> 32 devices): frees 45.0 GiB a device (free -7.5 GiB -> 37.5 GiB)"
    )


def test_capacity_fails_kv_dtype_batch_context_ranked():
    # 12 sequences x (2 GiB KV + 0.5 GiB state) = 30 GiB; 60 + 30 + 5 + 10 = 105: free -5 GiB
    x = inputs(
        weights=60 * G,
        seqs=12,
        state_per_seq=G // 2,
        kv_dtype_options=(KvDtypeOption(kv_dtype="fp8_ds_mla", kv_bytes_per_token=BPT // 2),),
    )
    a = advise(x)
    assert a.verdict == "fails" and a.warnings == ()
    kv, ctx, batch = a.suggestions
    # fp8 halves KV: 24 -> 12 GiB, frees 12 GiB, free 7 GiB
    assert kv.action == "kv_dtype" and kv.freed_bytes_per_device == 12 * G and kv.free_bytes_after == 7 * G
    # max context at 12 sequences: (25 GiB / 12 - 0.5 GiB) = 19/12 GiB a sequence for KV
    #   / 16,384 B = 103,765.3 -> 103,765 tokens; / 8,192 B = 207,530.7 -> 207,530: +103,765
    assert kv.context_tokens_gained == 103765 and "103,765 -> 207,530 tokens (+103,765)" in kv.text
    # shrinking the workload ranks after what keeps it; context frees 12 x (131,072 - 103,765) x 16,384 B
    assert ctx.action == "context" and ctx.shrinks_workload
    assert ctx.freed_bytes_per_device == 12 * (131072 - 103765) * 16384
    assert ctx.text.startswith("context 131,072 -> 103,765 tokens at batch 12")
    # room 25 GiB / 2.5 GiB a sequence = 10 sequences: batch 12 -> 10 frees 2 x 2.5 = 5 GiB, free 0
    assert batch.action == "batch" and batch.freed_bytes_per_device == 5 * G and batch.free_bytes_after == 0
    assert batch.text.startswith("batch 12 -> 10 (12 -> 10 sequences a device at 131,072 tokens)")
    assert all(s.resolves for s in a.suggestions)


def test_small_terms_print_in_gib_with_three_significant_digits():
    # 93 + 5 + 2 = 100 GiB of fixed bytes leaves 0 < one sequence (64 MiB state + one 16 KiB block):
    # (64 x 2^20 + 16 x 2^10) / 2^30 = 0.0625 + 0.0000153 = 0.0625 GiB to 3 significant digits, not "0.1 GiB"
    a = advise(inputs(weights=93 * G, seqs=1, state_per_seq=64 * 2**20, reserve=2 * G))
    assert "leave 0.0 GiB of 100.0 GiB a device" in a.warnings[0]
    assert "(0.0625 GiB)" in a.warnings[0] and "MiB" not in a.warnings[0]


def test_thin_headroom_warns_with_margin():
    # 8 x (2 + 0.375) = 19 GiB; 60 + 19 + 5 + 10 = 94: 6 GiB free = 6.0% of 100 GiB
    x = inputs(weights=60 * G, seqs=8, state_per_seq=3 * G // 8)
    a = advise(x)
    assert a.verdict == "thin" and a.headroom_fraction == pytest.approx(0.06)
    assert a.warnings[0].startswith(
        "it fits, with thin headroom: 6.0 GiB = 6.0% of usable HBM (100.0 GiB), under the 10% margin; 4.0 GiB more"
    )
    # bar 10 GiB free: room 25 - 10 = 15 GiB / 2.375 = 6.3 -> 6 sequences; frees 2 x 2.375 = 4.75 GiB
    (s,) = [s for s in a.suggestions if s.action == "batch"]
    assert s.freed_bytes_per_device == 4.75 * G and s.free_bytes_after == 10.75 * G and s.resolves
    # 10.0% exactly is not thin
    assert advise(inputs(weights=56 * G, seqs=8, state_per_seq=3 * G // 8)).verdict == "ok"


def test_memory_bound_batch_and_spec_decode():
    # one sequence of 2.375 GiB: room 25 GiB holds 10 sequences; TPOT 10 ms at batch 1 = 100 tok/s
    x = inputs(
        weights=60 * G,
        seqs=1,
        state_per_seq=3 * G // 8,
        binding="memory",
        tpot_s=0.010,
        batch_options=(
            BatchOption(batch=8, tpot_s=0.012, binding="memory"),
            BatchOption(batch=10, tpot_s=0.014, binding="compute"),
            BatchOption(batch=16, tpot_s=0.020, binding="compute"),
        ),
        spec_decode=SpecDecodeOption(draft_tokens=3, tokens_per_step=2.952, step_s=0.013, draft_weights_bytes=G),
    )
    a = advise(x)
    assert a.verdict == "ok"
    flip, b8, spec = a.suggestions  # batch 16 needs 16 sequences, memory holds 10: not offered
    # batch 10 at 14 ms: 714 tok/s, x7.14, and the roof flips to compute: ranked first
    assert flip.resolves and flip.speedup == pytest.approx(10 / 0.014 / 100)
    assert flip.text == (
        "batch 1 -> 10: memory-bound -> compute-bound at the decode bound's TPOT 14.00 ms (10.00 now), "
        "100 -> 714 tok/s (x7.14); 10 of the 10 sequences a device memory holds"
    )
    assert b8.speedup == pytest.approx(8 / 0.012 / 100) and "stays memory-bound" in b8.text
    # 2.952 tokens a 13 ms step: TPOT 4.40 ms, x2.27; 1 GiB of draft weights leaves 21.6 GiB
    assert spec.speedup == pytest.approx(0.010 * 2.952 / 0.013)
    assert spec.free_bytes_after == x.free_bytes - G
    assert "TPOT 10.00 -> 4.40 ms (x2.27); draft weights 1.0 GiB a device (free 21.6 GiB)" in spec.text


def test_batch_under_dp_counts_the_sequences_a_device_holds():
    # dp 2 splits the batch: batch 16 is 8 sequences a device, batch 24 is 12; memory holds 10 (as above).
    # At batch 1 (1 sequence a device) the ratio sequences / batch cannot show the split: the groups do.
    x = inputs(
        weights=60 * G,
        seqs=1,
        state_per_seq=3 * G // 8,
        binding="memory",
        tpot_s=0.010,
        sequence_groups=2,
        batch_options=(
            BatchOption(batch=16, tpot_s=0.012, binding="memory"),
            BatchOption(batch=24, tpot_s=0.014, binding="memory"),
        ),
    )
    (b16,) = advise(x).suggestions
    assert b16.text.startswith("batch 1 -> 16:") and b16.text.endswith("8 of the 10 sequences a device memory holds")


def test_compute_bound_names_the_dominant_part():
    x = inputs(
        weights=60 * G,
        seqs=1,
        state_per_seq=G // 2,
        binding="compute",
        tpot_s=0.01,
        time_by_part_s=(
            PartTime(part="kda", seconds=0.001),
            PartTime(part="experts", seconds=0.006),
            PartTime(part="attention", seconds=0.003),
        ),
    )
    (s,) = advise(x).suggestions
    assert s.text == (
        "compute-bound: experts takes 60% of the step (6.00 of 10.00 ms), then attention 30%, "
        "then kda 10%; make it cheaper before adding compute"
    )
    assert s.score == pytest.approx(0.6)


def test_healthy_and_unknown_roof_say_nothing():
    a = advise(inputs(weights=40 * G, seqs=1, state_per_seq=G // 2))
    assert (a.verdict, a.warnings, a.suggestions) == ("ok", (), ())


def test_a_split_that_falls_back_to_replication_fails_whatever_is_free():
    """Was: `fit -H nvidia-h200 -t 3x8` said DOES NOT FIT (vocab and experts do not divide 24) and then
    "advice (ok: free 44.65 GiB ...) nothing to suggest". A fallback fails the fit (plan refuses it), so
    the advice says fails, names the dimensions, and says what is expected."""
    # 40 + 2 (KV) + 0.5 (state) + 5 + 10 = 57.5 GiB of 100: 42.5 GiB free, well over the 10% bar
    why = "2 tensor dimension(s) do not divide the mesh (vocab=163840 by tp=24)"
    a = advise(inputs(weights=40 * G, seqs=1, state_per_seq=G // 2, fallback=why))
    assert a.verdict == "fails" and a.free_bytes == 42.5 * G
    (w,) = a.warnings
    assert w.startswith(why) and "fall back to replication" in w and "expected a --tp / --ep" in w
    assert advise(inputs(weights=40 * G, seqs=1, state_per_seq=G // 2)).verdict == "ok"  # the same numbers, divided
    # thin headroom with a fallback: still fails (the fallback, not the headroom, is what is wrong)
    assert advise(inputs(weights=78 * G, seqs=1, state_per_seq=G // 2, fallback=why)).verdict == "fails"
