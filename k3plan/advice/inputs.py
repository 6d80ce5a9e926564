"""What the advice rules read: one typed struct of per-device numbers plus alternatives the caller
computed (other topologies, KV dtypes, batches), and builders from a typed fit (k3plan.budget.fit.FitResult).

Per device throughout; bytes are ints. The rules never evaluate a model themselves: an alternative
they may suggest is passed in with its numbers, so the effect they print is k3plan's own figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from k3plan.sharding.resolve import fallback_summary
from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.budget.fit import FitResult


_Frozen = Frozen


class TopologyOption(_Frozen):
    """Another topology (or split) for the same model: its per-device weights, and KV/state/temp
    when they change (None: the same as now)."""

    topology: str
    devices: int
    weights_bytes: int
    kv_bytes: int | None = None
    state_bytes: int | None = None
    temp_bytes: int | None = None
    reserve_bytes: int | None = None
    usable_bytes: int | None = None  # another machine: its per-device usable HBM
    refused: str | None = None  # the compiled or measured graph there ran out of memory (k3plan.evidence)


class SplitOption(_Frozen):
    """Another split (tp, ep, dp, pp) of the same chips that plan's search finds fitting (issue 36): its
    free HBM a device, sequences at the context and TPOT, as plan's row prices them (a row is fit at one
    point), and the fit command that applies it."""

    split: str  # fit's words, e.g. "tp 8 ep 8 dp 1 pp 2"
    free_bytes: int
    max_sequences: int
    tpot_s: float | None = None
    command: str


class KvDtypeOption(_Frozen):
    kv_dtype: str
    kv_bytes_per_token: int  # per device, all MLA layers (0: a model with none, all KDA)
    block_tokens: int = 1  # KV allocation granularity under that dtype
    state_bytes_per_sequence: int | None = None  # per device, if paging pads it differently
    # the temporaries a fit under that dtype counts (its temp evidence may differ: a calibration is matched on
    # the KV dtype, k3plan.evidence); None: the same as now
    temp_bytes: int | None = None
    refused: str | None = None  # the compiled or measured graph under that dtype ran out of memory


class BatchOption(_Frozen):
    """The roofline at another decode batch: TPOT and the binding roof there."""

    batch: int
    tpot_s: float
    binding: str


class SpecDecodeOption(_Frozen):
    draft_tokens: int
    tokens_per_step: float  # expected tokens a verify step emits (k3plan.workload.specdecode)
    step_s: float  # verify + draft, at the current batch
    draft_weights_bytes: int = 0  # per device


class PartTime(_Frozen):
    """One part of a compute-bound step (a FLOP kind of the decode bound) and the time it takes."""

    part: str
    seconds: float


class AdviceInputs(_Frozen):
    usable_bytes: int
    weights_bytes: int
    kv_bytes: int
    state_bytes: int
    temp_bytes: int
    reserve_bytes: int
    free_bytes: int
    topology: str
    devices: int
    batch: int
    sequences: int  # sequences a device holds (batch / dp under DP attention)
    context_tokens: int
    kv_dtype: str
    kv_bytes_per_token: int  # per device, all MLA layers (0: a model with none, all KDA)
    block_tokens: int = 1
    state_bytes_per_sequence: int = 0  # per device
    binding: str | None = None  # the decode step's binding roof: memory, compute, collective ...
    tpot_s: float | None = None
    topology_options: tuple[TopologyOption, ...] = ()
    split_options: tuple[SplitOption, ...] = ()  # other splits of the same chips (k3plan.advice.splits)
    split: str | None = None  # the current split in fit's words, to name what the split options change
    dividing_tp: int | None = None  # under a fallback: the TP nearest the current one that divides the heads
    kv_dtype_options: tuple[KvDtypeOption, ...] = ()
    batch_options: tuple[BatchOption, ...] = ()
    spec_decode: SpecDecodeOption | None = None
    time_by_part_s: tuple[PartTime, ...] = ()  # compute-bound: where a step's time goes
    # DP groups the batch is split over (a device holds ceil(batch / groups) sequences; 1: every device
    # holds the whole batch), as k3plan.step.memory.budget_terms splits it; None: scale sequences / batch
    sequence_groups: int | None = None
    # fit's most sequences at the context (over the DP groups that split the batch; under --pp the fewest
    # any stage holds, k3plan.step.stages.bind): what the batch rule caps at. None: from this one
    # budget's terms (one stage's, which under --pp may hold more than another stage)
    fit_max_sequences: int | None = None
    # a stage's graph the calibration refuses (a measured compile at or above this size ran out of
    # memory): the fit fails whatever HBM is left free
    refused: str | None = None
    # tensor dimensions the mesh does not divide (they fall back to replication): fit and plan refuse the
    # split whatever HBM is left free; None: every sharded dimension divides
    fallback: str | None = None

    @property
    def fixed_bytes(self) -> int:
        """What does not scale with sequences: weights + temp + reserve."""
        return self.weights_bytes + self.temp_bytes + self.reserve_bytes


def _refused(fit: FitResult) -> str | None:
    t = fit.temp
    found = [f"{stage} {why}" for stage, why in (("prefill", t.prefill_refused), ("decode", t.decode_refused)) if why]
    return "; ".join(found) or None


def _block_tokens(fit: FitResult) -> int:
    return 1 if fit.cache_layout is None else fit.cache_layout.block_tokens


def inputs_from_fit(
    fit: FitResult, *, binding: str | None = None, tpot_s: float | None = None, **alternatives: Any
) -> AdviceInputs:
    """AdviceInputs from a typed fit; ``binding`` and ``tpot_s`` replace its speed line's when
    ``binding`` is given (roofline passes its own decode bound); ``alternatives``: topology_options,
    kv_dtype_options, batch_options, spec_decode, time_by_part_s, sequence_groups."""
    pd, hw = fit.per_device, fit.hardware
    if binding is None:
        # the decode bound's step: the alternatives are priced on the bound (like for like; the headline may be
        # measured, transferred or the model's)
        binding, tpot_s = (
            (None, None)
            if fit.speed is None
            else (
                fit.speed.binding,
                fit.speed.ceiling_tpot_s if fit.speed.ceiling_tpot_s is not None else fit.speed.tpot_s,
            )
        )
    return AdviceInputs(
        usable_bytes=hw.usable_bytes_per_device,
        weights_bytes=pd.weights_bytes,
        kv_bytes=pd.kv_bytes,
        state_bytes=pd.state_bytes,
        temp_bytes=pd.temp_bytes,
        reserve_bytes=pd.reserve_bytes,
        free_bytes=pd.free_bytes,
        topology=hw.topology,
        devices=hw.devices,
        batch=fit.workload.batch,
        sequences=pd.sequences,
        context_tokens=fit.workload.context_tokens,
        kv_dtype=fit.model_state.kv_dtype,
        kv_bytes_per_token=pd.kv_bytes_per_token,
        block_tokens=_block_tokens(fit),
        state_bytes_per_sequence=pd.state_bytes_per_sequence,
        binding=binding,
        tpot_s=tpot_s,
        refused=_refused(fit),
        fallback=fallback_summary(fit.replicated),
        fit_max_sequences=fit.capacity.max_sequences,
        **alternatives,
    )


def topology_option_from_fit(fit: FitResult) -> TopologyOption:
    """The same model fitted at another topology (another fit) as an option."""
    pd = fit.per_device
    return TopologyOption(
        topology=fit.hardware.topology,
        devices=fit.hardware.devices,
        weights_bytes=pd.weights_bytes,
        kv_bytes=pd.kv_bytes,
        state_bytes=pd.state_bytes,
        temp_bytes=pd.temp_bytes,
        reserve_bytes=pd.reserve_bytes,
        usable_bytes=fit.hardware.usable_bytes_per_device,
        refused=refusal(fit),
    )


def refusal(fit: FitResult) -> str | None:
    """Why the calibration evidence refuses the fit's graph (its temp is then no number), else None."""
    t = fit.temp
    parts = [f"{stage} {why}" for stage, why in (("prefill", t.prefill_refused), ("decode", t.decode_refused)) if why]
    return "; ".join(parts) or None


def kv_dtype_option_from_fit(fit: FitResult) -> KvDtypeOption:
    """The same setup fitted with another --kv-dtype as an option."""
    return KvDtypeOption(
        kv_dtype=fit.model_state.kv_dtype,
        kv_bytes_per_token=fit.per_device.kv_bytes_per_token,
        block_tokens=_block_tokens(fit),
        state_bytes_per_sequence=fit.per_device.state_bytes_per_sequence,
        temp_bytes=fit.per_device.temp_bytes,
        refused=refusal(fit),
    )
