"""plan's output table: every per-configuration figure of ``evaluate()``, one named numpy column a field.

One entry a configuration of the space, in the space's order (``k3plan.plan.space.SpaceCols``). The
input columns keep their names (the space's, ``HardwareCols``', ``WeightCols``'), the step's figures
are named as fit's terms are (``k3plan.step.memory.BudgetTerms``: bytes a device, ints); times are
seconds. A frozen dataclass, not pydantic: its fields hold numpy columns, built once a search.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from k3plan.plan.space import SpaceCols


@dataclass(frozen=True, slots=True, eq=False)  # eq: numpy fields have no truth value
class StepColumns(SpaceCols):
    """Per configuration, every figure plan reads (int64 unless said): the space's columns (what the
    configuration is, inherited from ``SpaceCols``), then the step's."""

    # the hardware and topology (``HardwareCols``)
    usable: np.ndarray  # usable HBM bytes a device
    hbm_bw: np.ndarray  # float, bytes/s a device
    flops: np.ndarray  # float, FLOP/s a device in the compute dtype
    devices_per_chip: np.ndarray
    scale_up_bw: np.ndarray  # float, bytes/s
    scale_out_bw: np.ndarray  # float, bytes/s
    price: np.ndarray  # float, USD a chip-hour; NaN: no price (plan: ``priced`` sets the --price list's)
    chips: np.ndarray
    spans_slices: np.ndarray  # bool: the EP group spans slices (roofline.comm.ep_spans_slices)
    domain_devices: np.ndarray  # devices of one scale-up domain (a wider group crosses it: step.ops.crosses)
    scale_up_latency: np.ndarray  # float, s a call of the stack's expert collective
    scale_out_latency: np.ndarray  # float, s
    # the weights (``WeightCols``): the whole path's sums decode reads
    fallbacks: np.ndarray  # tensors replicated by a divisibility fallback
    dense_bytes: np.ndarray  # dense weights a device (embeddings excluded)
    expert_bytes: np.ndarray  # routed experts a device
    dense_params: np.ndarray
    expert_params: np.ndarray
    # the cache layout a device (``step.memory.CacheTerms``)
    kv_bytes_per_token_layer: np.ndarray  # one MLA layer
    state_bytes_per_layer: np.ndarray  # one KDA layer, padded to the page under hybrid paging
    block_tokens: np.ndarray  # KV allocation granularity
    # temporaries a device: analytic (``step.temporaries``), else a calibration's or the temp model's
    prefill_temp_bytes: np.ndarray  # one prefill chunk
    decode_temp_bytes: np.ndarray  # one decode step
    temp_source: np.ndarray  # int8 code: 0 analytic, 1 compiled, 2 measured, 3 temp model (budget.result.TEMP_EVIDENCE)
    # a calibration answered but the point is outside its measured range (budget.measured_range): unverified
    temp_outside: np.ndarray
    prefill_temp_low_bytes: np.ndarray  # the temp model's band's lower end (= prefill_temp_bytes elsewhere)
    decode_temp_low_bytes: np.ndarray
    temp_bytes: np.ndarray  # the larger of the two: the budget's (the graphs are compiled apart)
    # the budget of the binding pipeline stage (``step.stages.bind`` of ``step.memory.BudgetTerms``)
    weights_bytes: np.ndarray  # the weights a device of the binding stage holds
    reserve_bytes: np.ndarray
    sequences: np.ndarray  # sequences a device holds
    kv_bytes: np.ndarray
    state_bytes: np.ndarray
    free_bytes: np.ndarray
    room_bytes: np.ndarray  # usable - (weights + temp + reserve): what KV and state may take
    sequence_bytes: np.ndarray  # one sequence's KV and state
    max_sequences: np.ndarray  # most sequences, the fewest any stage holds
    kv_bytes_per_token: np.ndarray
    state_bytes_per_sequence: np.ndarray
    # the binding stage
    binding_stage: np.ndarray  # its index (0 without pipeline parallelism)
    replicated_bytes: np.ndarray  # replicated weights a device of it holds
    stage_mla_layers: np.ndarray
    stage_kda_layers: np.ndarray
    stage_first_layer: np.ndarray
    stage_end_layer: np.ndarray  # one past its last layer
    # a decode step of a microbatch (``step.comm``, ``step.stages.p2p_terms``, ``step.decode``)
    scale_out_ops: np.ndarray  # uint16, bit k: step.ops.COLLECTIVE_NAMES[k] crosses the scale-out link
    # (evaluate.scale_out_ops)
    scale_out_calls: np.ndarray  # of the collectives' calls, those over the scale-out link
    scale_out_s: np.ndarray  # float, the collectives' time on the scale-out link (in comm_s)
    comm_calls: np.ndarray  # collective calls + stage-to-stage sends
    comm_bytes_per_chip: np.ndarray  # float, bytes a chip puts on the links
    pipeline_s: np.ndarray  # float, the stage-to-stage sends' share of comm_s
    comm_s: np.ndarray  # float, collectives' latency + bandwidth time + pipeline_s
    memory_s: np.ndarray  # float
    compute_s: np.ndarray  # float
    tpot_s: np.ndarray  # float, the decode step: max(memory_s, compute_s) + comm_s
    binding: np.ndarray  # index into step.decode.BINDING
    tokens_per_s_per_chip: np.ndarray  # float, batch / tpot_s / chips
    cost_per_hour: np.ndarray  # float, USD: price x chips

    def priced(self, price: np.ndarray) -> StepColumns:
        """The table with ``price`` (USD a chip-hour a configuration, NaN: none) and the cost an hour it sets."""
        return replace(self, price=price, cost_per_hour=price * self.chips)


@dataclass(frozen=True, slots=True, eq=False)  # eq: numpy fields have no truth value
class TempCols:
    """Per configuration, the temporaries a device as they are refined: the analytic bound, then a
    calibration's (``evaluate.apply_evidence``), then the temp model's band (``evaluate.apply_temp_model``);
    the arrays are filled in place while ``evaluate`` builds the table (the fields of StepColumns' names)."""

    prefill_temp_bytes: np.ndarray
    decode_temp_bytes: np.ndarray
    temp_source: np.ndarray  # int8 code (StepColumns.temp_source)
    temp_outside: np.ndarray  # bool (StepColumns.temp_outside)
    prefill_temp_low_bytes: np.ndarray
    decode_temp_low_bytes: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)  # eq: numpy fields have no truth value
class Evaluated:
    """``evaluate()``'s answer: the table, the fallback kinds and the probe notes."""

    cols: StepColumns
    kinds: dict[str, np.ndarray]  # fallback kind (data: the tensors' own) -> bool a configuration
    notes: list[str]  # probe latency notes
