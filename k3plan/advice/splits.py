"""Other splits of the same chips (issue 36: advice tries the same chips before more chips).

plan's search (k3plan.plan.search.plan), run on the fit's hardware, stack and KV dtype up to its chip count,
at its context, batch and prefill chunk; its rows on the fit's own topology with another (tp, ep, dp, pp) are
the options. A plan row is fit at one point (tests/step/test_plan_row_is_fit.py), so the free bytes the
advice prints are what `k3plan fit` prints with the row's flags. Nothing is tried where plan cannot price
what fit was asked (user ShardSpecs, a --calibration file, a speculative-decoding draft), or on a topology
plan does not enumerate (TPU multi-slice): the advice then says nothing about splits.
"""

from __future__ import annotations

from k3plan.advice.inputs import SplitOption
from k3plan.errors import K3PlanError

MAX_SPLITS = 2  # the fastest fitting split and, when another, the one that leaves the most free


def split_options(
    setup_options: dict, setup, workload, *, calibration=None, draft_bytes: int = 0
) -> tuple[tuple[SplitOption, ...], str | None]:
    """(options, what was computed) for ``setup``'s chips: at most MAX_SPLITS other splits that plan finds
    fitting, fastest first; ((), None) where plan cannot price the fit's configuration."""
    from k3plan.plan.search import plan

    if (
        setup_options.get("shardspecs")
        or calibration is not None
        or draft_bytes
        or setup_options.get("spec_verify_tokens")
        or setup_options.get("model_overrides")  # plan searches the bundled model, not one with fields set over it
    ):
        return (), None
    topo, par = setup.topology, setup.parallel
    kv = setup_options.get("kv_dtype")
    try:
        result = plan(
            model=setup_options.get("model") or setup.model.name,
            hardware=[setup_options.get("hardware") or setup.hardware.name],
            stacks=[setup.stack.name],
            max_chips=topo.chips,
            context=workload.context_tokens,
            concurrency=workload.batch,
            kv_dtypes=[kv] if kv else None,
            chunks=[workload.prefill_chunk_tokens],
            top=1000,
            engram=setup.stack.engram_placement,  # --engram: the other splits with the tables where fit has them
        )
    except K3PlanError:
        return (), None
    now = (par.tp, par.ep, par.dp, par.pp)
    rows = [r for r in result.ranked if r.topology == topo.text and (r.tp, r.ep, r.dp, r.pp) != now]
    picked = rows[:1] + [r for r in sorted(rows, key=lambda r: -r.free_gib_per_device)[:1] if r not in rows[:1]]
    ctx, batch = workload.context_tokens, workload.batch
    model = setup_options.get("model")
    flag = f"k3plan fit -m {model} " if model and model != "kimi-k3" else "k3plan fit "
    opts = tuple(
        SplitOption(
            split=r.split_words,
            free_bytes=r.per_device.free_bytes,
            max_sequences=r.max_sequences,
            tpot_s=None if r.tpot_ms is None else r.tpot_ms / 1e3,
            command=flag + r.fit_command(context=ctx, batch=batch).removeprefix("k3plan fit "),
        )
        for r in picked[:MAX_SPLITS]
    )
    n = (f"{len(rows)} others fit" if len(rows) > 1 else "1 other fits") if rows else "no other fits"
    return opts, f"plan's search of the {setup.hardware.name} {topo.text} splits ({n})"


def dividing_tp(setup) -> int | None:
    """The TP nearest ``setup``'s (the smaller on a tie) that divides what TP must divide (the attention
    heads, the vocabulary where the stack splits it: k3plan.setup.tp_must_divide) and the devices of a
    pipeline stage; None when the current TP already does, or none does."""
    from k3plan.setup import tp_must_divide

    must, tp, devices = tp_must_divide(setup.model, setup.stack), setup.parallel.tp, setup.parallel.devices
    if all(h % tp == 0 for h in must):
        return None
    ok = [t for t in range(1, devices + 1) if devices % t == 0 and all(h % t == 0 for h in must)]
    return min(ok, key=lambda t: (abs(t - tp), t)) if ok else None
