"""Whether each feasible configuration's stack can launch it (issue 48 item 3): a configuration whose launch line
cannot be written for its engine (MaxText holds every sequence's KV on each device, so jax-native at dp > 1 has no
launch; tpu-inference's DP attention takes only some splits; ...) is no deployable recommendation. plan() leaves
such rows out of the ranking (reason ``launch``) unless --include-unlaunchable, which ranks them after every row
that can launch, each with its ``launch_error``.

The check is the launch itself (plan/deployment.launch_for, the engine rules in engines/launch.py), once a distinct
(machine kind, slices, stack, KV dtype, split): the rows of one search share a few hundred of those."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.models import Model
    from k3plan.plan.space import Space
    from k3plan.plan.table import StepColumns


class Split(Frozen):
    """The split a launch reads (plan/deployment.SplitPick)."""

    tp: int
    ep: int
    dp: int
    pp: int
    chunk_tokens: int
    kv_dtype: Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]


def launch_errors(
    *,
    space: Space,
    cols: StepColumns,
    idx: np.ndarray,
    model: Model,
    context: int,
    concurrency: int,
    output_tokens: int = 1,
) -> dict[int, str]:
    """Row index -> why its stack's engine cannot launch it (one line), for the rows of ``idx`` that cannot."""
    from k3plan.plan.deployment import launch_for

    seen: dict[tuple, str | None] = {}
    out: dict[int, str] = {}
    for i in (int(j) for j in idx):
        hw = space.hardware[int(cols.hw[i])]
        topo = space.topologies[int(cols.topo[i])]
        # what the engine rules read: the stack and its KV dtype, the split, the slices it spans, the machine's kind
        # (the chunk, the hosts and the memory fraction are written, never refused)
        key = (hw.kind, topo.slices, *(int(getattr(cols, c)[i]) for c in ("stack", "variant", "tp", "ep", "dp", "pp")))
        if key not in seen:
            split = Split(
                tp=int(cols.tp[i]),
                ep=int(cols.ep[i]),
                dp=int(cols.dp[i]),
                pp=int(cols.pp[i]),
                chunk_tokens=int(cols.chunk[i]),
                kv_dtype=space.variants[int(cols.variant[i])].kv_cache.dtype,
            )
            seen[key] = launch_for(
                pick=split,
                hw=hw,
                stack=space.stacks[int(cols.stack[i])],
                topology=topo,
                model=model,
                context=context,
                max_num_seqs=concurrency,
                output_tokens=output_tokens,
                check_only=True,
            ).error
        err = seen[key]
        if err is not None:
            out[i] = err
    return out
