"""The op list's collectives against the compiled HLO's (issue 17 item 7), kind by kind (jax-free).

Expected: k3plan.step.ops.collective_ops for the stage at the job's tokens -- calls (count x calls an
execution) and a device's message bytes summed over them. Compiled: validate's census
(k3plan.validate.hlo_census), each instruction times the trip counts of the loops it sits in. A
difference in count is either covered by a named ``Exception`` below (each says what the graph
does, why the op list counts it otherwise, and the source) or it is a finding: ``ok`` is False and
the output names the kind. Bytes are shown beside the counts with their ratio; they are not
required to match (validate reduces in f32 where a stack's activations are bf16; the all-to-all
buffers are fixed-capacity, k3plan.validate.dispatch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from k3plan.structs import Frozen
from k3plan.validate.hlo_census import OPS, Census


class Exception_(Frozen):
    """A named, explained count difference: ``calls`` more (or fewer, negative) of ``kind`` in the HLO."""

    name: str
    kind: str
    calls: int
    why: str
    source: str


class KindRow(Frozen):
    kind: str
    op_list_calls: int
    hlo_calls: int
    explained_calls: int  # by the named exceptions
    op_list_bytes: int  # a device's messages, summed over the step's calls
    hlo_bytes: int  # the HLO results, a device, summed over the executed instructions
    exceptions: tuple[str, ...] = ()

    __computed__ = ("unexplained_calls", "bytes_ratio")

    @property
    def unexplained_calls(self) -> int:
        return self.hlo_calls - self.op_list_calls - self.explained_calls

    @property
    def bytes_ratio(self) -> Optional[float]:
        return self.hlo_bytes / self.op_list_bytes if self.op_list_bytes else None


class CollectiveCheck(Frozen):
    stack: str
    stage: str
    rows: tuple[KindRow, ...]
    exceptions: tuple[Exception_, ...]

    __computed__ = ("ok", "findings")

    @staticmethod
    def read(data: Mapping[str, Any]) -> dict[str, Any]:
        """A dumped check as its fields: the computed keys (ok, findings, a row's unexplained_calls and
        bytes_ratio) dropped, as they are recomputed."""
        rows = [
            {k: v for k, v in r.items() if k not in KindRow.__computed__} if isinstance(r, Mapping) else r
            for r in data.get("rows", ())
        ]
        return {**{k: v for k, v in data.items() if k not in CollectiveCheck.__computed__}, "rows": rows}

    @property
    def ok(self) -> bool:
        return all(r.unexplained_calls == 0 for r in self.rows)

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(
            f"{r.kind}: op list {r.op_list_calls} call(s), HLO {r.hlo_calls}, {r.unexplained_calls:+d} unexplained"
            for r in self.rows
            if r.unexplained_calls
        )


def op_list_collectives(ops: list) -> dict[str, tuple[int, int]]:
    """kind -> (calls, bytes) of the step's collective ops (k3plan.step.ops.Op, scalar columns)."""
    out: dict[str, tuple[int, int]] = {}
    for o in ops:
        if o.kind != "collective" or o.collective is None or not o.calls:
            continue
        calls = int(o.count * o.calls)
        c, b = out.get(o.collective.value, (0, 0))
        out[o.collective.value] = (c + calls, b + round(calls * float(o.message_bytes)))
    return out


SGLANG_SCATTERED = (
    "sgl-project/sglang python/sglang/srt/layers/communicator.py sparse_mlp_scatter_mode, "
    "LayerScatterModes._compute_layer_output_mode, tp_reduce_scatter @0090b34ce0e68cd2dace8bb0aa2148938ad4c7db"
)


def _split(setup, suffix: str, dim: int) -> bool:
    t = next((t for t in setup.model.inventory.text if t.name.endswith(suffix)), None)
    return t is not None and bool(setup.plan.specs[t.name].partition[dim])


DEEPEP_NOTIFY = "deepseek-ai/DeepEP csrc/kernels/intranode.cu notify_dispatch @f7fb36f407252e26be743be7fd50a8eb07fd1266"


def exceptions_for(setup, *, ragged: bool = False) -> list[Exception_]:
    """The named count differences of this setup's compiled step vs its op list, each a MoE layer.
    ``ragged``: the step dispatches with ragged_all_to_all (TPU targets, k3plan.validate.dispatch)."""
    n_moe = setup.model.spec.n_moe
    st, par = setup.stack, setup.parallel
    out: list[Exception_] = []
    if st.sharding.rules_for("embed")["vocab"] == "ep" and par.dp > 1 and par.ep == par.tp * par.dp:
        # the vocabulary over every device while the tokens are split over DP (tpu-inference's MLP_TENSOR): the
        # op list counts the TP-edge collectives over TP only (k3plan.step.ops.tp_edge_ops), so these are extra
        why = (
            "the stack splits the embedding and the LM head's vocabulary over every device while the tokens are "
            "split over DP: the lookup all-gathers the token ids and all-reduces the masked rows of the whole "
            "batch; the LM head all-gathers the final hidden rows; the split argmax reshuffles its index iota "
            "with an all-to-all and all-gathers each shard's max and index. The op list counts the TP-edge "
            "collectives over TP (k3plan.step.ops.tp_edge_ops), none of these: the stack says so"
        )
        src = f"the stack's sharding rules ({st.name}.yaml: vocab -> ep, every device); validate's graph"
        out += [
            Exception_(name="vocab-split-over-every-device", kind=k, calls=n, why=why, source=src)
            for k, n in (("all-gather", 4), ("all-reduce", 1), ("all-to-all", 1))
        ]
    if not n_moe:
        return out
    if ragged and st.collectives.experts == "all_to_all":
        out.append(
            Exception_(
                name="dispatch-counts-exchange",
                kind="all-to-all",
                calls=n_moe,
                why=(
                    "a ragged dispatch's receivers need the sizes first: one all_to_all of the per-destination "
                    "counts (n int32) goes ahead of the ragged payload, a MoE layer; DeepEP's normal dispatch "
                    "does the same (notify_dispatch exchanges the tokens per rank before the dispatch). The op "
                    "list counts the dispatch as one call: one small call's latency a MoE layer short"
                ),
                source=DEEPEP_NOTIFY,
            )
        )
    if st.collectives.experts == "all_to_all" and par.tp > 1:
        out.append(
            Exception_(
                name="moe-output-gathered-over-tp",
                kind="all-gather",
                calls=n_moe,
                why=(
                    "under an all-to-all backend the MoE takes this rank's share of the TP-replicated tokens "
                    "and its output is all-gathered back to the attention-TP group before the next layer, one "
                    "all-gather a MoE layer; SGLang does the same (the sparse MLP's scatter mode is SCATTERED, "
                    "the attention's sum a reduce-scatter, the next layer's input all-gathered). The op list "
                    "counts the attention's sum as one all-reduce and no gather: the same ring bytes "
                    "(reduce-scatter + all-gather = all-reduce) but one call's latency a MoE layer short"
                ),
                source=SGLANG_SCATTERED,
            )
        )
    if st.collectives.experts == "all_reduce" and _split(setup, ".gate.weight", 0):
        why = (
            "the stack splits the router gate over the expert axis: the top-k over the split expert scores "
            "all-gathers them and the chosen weights come back with an all-reduce, a MoE layer; the op list's "
            "collectives do not see the router's split (k3plan.step.ops.collective_ops)"
        )
        src = f"the stack's sharding rules ({st.name}.yaml: expert -> ep, router not overridden); validate's graph"
        out += [
            Exception_(name="router-split-over-experts", kind=k, calls=n_moe, why=why, source=src)
            for k in ("all-gather", "all-reduce")
        ]
    from k3plan.roofline.comm import latent_reduce_calls

    if latent_reduce_calls(st, setup.model.spec) > 1 and st.collectives.experts != "all_to_all":
        out.append(
            Exception_(
                name="latent-reduced-apart-in-the-engine",
                kind="all-reduce",
                calls=-n_moe,
                why=(
                    "the engine reduces a LatentMoE's routed latent before its norm and up-projection and the shared "
                    "expert's output apart, two all-reduces a MoE layer (the stack's collectives.latent_reduce); "
                    "validate's graph reduces the (hidden, latent) pair in one: one call a MoE layer fewer, the same bytes"
                ),
                source=f"{st.name}.yaml collectives.latent_reduce_sources; validate's graph",
            )
        )
    if st.collectives.experts == "all_reduce" and _split(setup, "routed_expert_down_proj.weight", 0):
        why = (
            "the stack splits the LatentMoE latent over TP: the down-projection's split latent is all-gathered "
            "before the experts, and the row-parallel up-projection's partial sums are a second all-reduce beside "
            "the experts' psum, a MoE layer; the op list counts one all-reduce of the latent and the hidden state together"
        )
        src = f"the stack's sharding rules ({st.name}.yaml: latent -> tp); validate's graph"
        out += [
            Exception_(name="latent-split-over-tp", kind=k, calls=n_moe, why=why, source=src)
            for k in ("all-gather", "all-reduce")
        ]
    return out


def step_ops(setup, *, stage: str, tokens: int, sequences: int) -> list:
    """The collective ops of one compiled step: ``tokens`` tokens (all DP groups') of ``sequences``."""
    from k3plan.roofline.comm import collective_args
    from k3plan.step.ops import collective_ops

    a = collective_args(setup)
    spec = a.pop("spec")
    return collective_ops(spec, **a, tokens=tokens, sequences=sequences)


HLO_KINDS = {"all-to-all": ("all-to-all", "ragged-all-to-all")}  # an op list kind -> the HLO ops that carry it


def check(*, stack: str, stage: str, ops: list, hlo: Census, exceptions: list[Exception_]) -> CollectiveCheck:
    expected = op_list_collectives(ops)
    folded = {h for k, hs in HLO_KINDS.items() for h in hs if h != k}
    kinds = [
        k
        for k in OPS
        if k not in folded
        and (k in expected or any(h in hlo.ops for h in HLO_KINDS.get(k, (k,))) or any(e.kind == k for e in exceptions))
    ]
    rows = []
    for k in kinds:
        calls, nbytes = expected.get(k, (0, 0))
        stats = [hlo.ops[h] for h in HLO_KINDS.get(k, (k,)) if h in hlo.ops]
        mine = [e for e in exceptions if e.kind == k]
        rows.append(
            KindRow(
                kind=k,
                op_list_calls=calls,
                hlo_calls=sum(st.executed for st in stats),
                explained_calls=sum(e.calls for e in mine),
                op_list_bytes=nbytes,
                hlo_bytes=sum(st.executed_bytes for st in stats),
                exceptions=tuple(e.name for e in mine),
            )
        )
    return CollectiveCheck(stack=stack, stage=stage, rows=tuple(rows), exceptions=tuple(exceptions))
