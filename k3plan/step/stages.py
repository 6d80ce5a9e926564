"""Pipeline stages: which decoder layers (and which global tensors) a ``--pp`` stage holds, and the
activations one stage sends the next.

- layers: the engine's ``get_pp_indices`` (``Stack.pipeline``): floor(L / pp) a stage, the L mod pp
  left over one each to the stages before the last counting back from the second-to-last (vLLM) or
  to the last stages (SGLang). K3's 93 layers at pp 2: vLLM [0, 47) + [47, 93), SGLang [0, 46) +
  [46, 93).
- globals: the embedding on the first stage; the final norm(s) and the LM head on the last (vLLM
  and SGLang build them only where ``pp_group.is_first_rank`` / ``is_last_rank``, PPMissingLayer
  elsewhere). With pp = 1 the one stage holds everything.
- what a stage sends: k3plan/step/p2p.py.
The per-device arithmetic of a stage is the step's own (memory.budget_terms with the stage's layer
counts, weights from the stage's tensors); this module only says which layers and tensors.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from k3plan.columns import C, where
from k3plan.errors import K3PlanError
from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.models.spec import ModelSpec
from k3plan.step.memory import BudgetTerms, budget_terms
from k3plan.structs import Frozen


def stage_bounds(num_layers: int, pp: int, remainder: str = "before_last") -> tuple[tuple[int, int], ...]:
    """[start, end) of each stage's decoder layers, as the engine's get_pp_indices splits them."""
    if pp < 1 or pp > num_layers:
        raise K3PlanError(f"--pp {pp}: expected 1 to {num_layers} (the model's decoder layers)")
    base, extra = divmod(num_layers, pp)
    sizes = [base] * pp
    if remainder == "before_last":  # vLLM: partitions[-i] += 1 for i in 2 .. extra + 1
        for i in range(2, extra + 2):
            sizes[-i] += 1
    else:  # SGLang: the last ``extra`` partitions get one more
        for i in range(pp - extra, pp):
            sizes[i] += 1
    out, start = [], 0
    for n in sizes:
        out.append((start, start + n))
        start += n
    return tuple(out)


class Stage(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    __coerce__ = False

    index: int
    pp: int
    start: int  # first decoder layer
    end: int  # one past the last
    n_mla: int
    n_kda: int
    n_moe: int

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.pp - 1

    def holds(self, t: Tensor) -> bool:
        """Whether this stage builds tensor ``t``: its layers; the embedding on the first stage; the
        other globals (final norms, LM head) on the last."""
        if t.layer is not None:
            return self.start <= t.layer < self.end
        return self.first if t.role == "embed" else self.last

    def describe(self) -> str:
        ends = [x for x, on in (("embedding", self.first), ("final norm + LM head", self.last)) if on]
        return (
            f"stage {self.index + 1}/{self.pp}: layers {self.start}-{self.end - 1} ({self.end - self.start}: "
            f"{self.n_mla} MLA, {self.n_kda} KDA)" + (f" + {' and '.join(ends)}" if ends else "")
        )


def stages(spec: ModelSpec, pp: int, remainder: str = "before_last") -> tuple[Stage, ...]:
    out = []
    for i, (a, b) in enumerate(stage_bounds(spec.num_layers, pp, remainder)):
        mixers, mlps = spec.mixers[a:b], spec.mlps[a:b]
        out.append(
            Stage(
                index=i,
                pp=pp,
                start=a,
                end=b,
                n_mla=mixers.count("mla"),
                n_kda=mixers.count("kda"),
                n_moe=mlps.count("moe"),
            )
        )
    return tuple(out)


def stage_tensors(inventory: TensorInventory, stage: Stage) -> list[Tensor]:
    return [t for t in inventory.text if stage.holds(t)]


def microbatch(batch, pp):
    """Sequences in one microbatch: the batch split into pp microbatches so every stage is busy
    (an assumption, stated in the output); fewer sequences than stages leave stages idle (the bubble)."""
    return -(-batch // pp)


def bind(per_stage: list[BudgetTerms[C]], valid=None) -> BudgetTerms[C]:
    """One budget from each stage's ``memory.budget_terms``: the stage with the least free bytes
    binds (its terms are the device's), except ``max_sequences``, the fewest any stage holds.
    ``valid[s]``: whether stage s exists (plan's columns mix pp values); stage 0 always does. The
    result's ``stage`` is the binding stage's index, so a stage's other figures are that stage's entry
    (every field but ``max_sequences`` is taken from it). fit and plan both call this."""
    first: Any = per_stage[0]  # int or array fields alike (the element-wise helpers of step.columns)
    out = replace(first, stage=first.free_bytes * 0)  # 0, or a 0 a configuration
    names = [f.name for f in fields(BudgetTerms) if f.name not in ("max_sequences", "stage")]
    terms: Any
    for s, terms in enumerate(per_stage[1:], start=1):
        ok = True if valid is None else valid[s]
        worse = ok & (terms.free_bytes < out.free_bytes)
        fewer = ok & (terms.max_sequences < out.max_sequences)
        out = replace(
            out,
            **{n: where(worse, getattr(terms, n), getattr(out, n)) for n in names},
            max_sequences=where(fewer, terms.max_sequences, out.max_sequences),
            stage=where(worse, s, out.stage),
        )
    return out


def stage_budgets(
    spec: ModelSpec, *, stages: list[tuple[Any, Any, Any]], usable: C, valid: Any = None, **common: Any
) -> tuple[list[BudgetTerms[C]], BudgetTerms[C]]:
    """The one assembly of a device's memory terms, which fit (one configuration, ints) and plan (numpy
    columns) both call: each pipeline stage's ``memory.budget_terms`` with that stage's (weights bytes, MLA
    layers, KDA layers), ``usable`` and every other keyword ``common`` to all stages, and the binding stage's (``bind``;
    ``valid``: which stages exist, plan's columns mixing pp values). -> (every stage's terms, the binding)."""
    per_stage = [budget_terms(spec, usable=usable, weights=w, n_mla=m, n_kda=k, **common) for w, m, k in stages]
    return per_stage, bind(per_stage, valid)
