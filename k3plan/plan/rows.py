"""One ranked configuration as a typed frozen PlanRow (table row and JSON), with fit's per-device terms.

``structs.dump(row)`` is the row's JSON contract: the keys, their order and the absent
extensions (``sla``, ``cost``, ``expected_*``: present only once the pass that fills them ran) are
what the plan's dict rows were."""

from __future__ import annotations

import math
from typing import Any, Literal, Optional

from k3plan.budget.result import TEMP_EVIDENCE, PerDevice
from k3plan.plan.sla import SlaRow
from k3plan.plan.space import Space
from k3plan.plan.table import StepColumns
from k3plan.sharding.resolve import uneven_words
from k3plan.step.collective import Collective, cross_node_ep_warning, scale_out_note
from k3plan.step.decode import BINDING
from k3plan.step.ops import COLLECTIVE_NAMES
from k3plan.structs import Frozen, fields, replace
from k3plan.units import GiB

# fit's per-device terms, one class for fit and plan (budget.result.PerDevice): a row's are the columns at its index
PER_DEVICE = fields(PerDevice)
# the column each field is read from, where the column's name differs (plan.table.StepColumns)
COLUMN_OF = {"replicated_weights_bytes": "replicated_bytes"}


class CostRow(Frozen):
    """A row's cost columns (plan.deployment.cost_rows fills them)."""

    usd_per_chip_hour: float | None
    price_origin: str  # override | spec | none
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    usd_per_million_input_tokens: float | None
    note: str  # where the price came from, or why there is none


def layout_notes(*, space: Space, cols: StepColumns, i: int) -> list[str]:
    """Why a row crosses the scale-out network, in words: pipeline stages over hosts (the binding
    stage and the stage-to-stage sends), an EP group wider than a scale-up domain (its
    collective over the scale-out link, bandwidth and latency from the hardware spec), which
    collectives cross the scale-out link (``scale_out_ops``), in fit's words, and an expert group that
    does not divide the routed experts where the engine places them unevenly (fit's note)."""
    hw = space.hardware[int(cols.hw[i])]
    topo = space.topologies[int(cols.topo[i])]
    st = space.stacks[int(cols.stack[i])]
    pp, ep = int(cols.pp[i]), int(cols.ep[i])
    out = []
    if pp > 1 and st.pipeline is not None:
        link = hw.scale_out if topo.spans_slices else hw.scale_up
        a, b = int(cols.stage_first_layer[i]), int(cols.stage_end_layer[i])
        out.append(
            f"pp {pp}: each stage is {topo.devices // pp} devices ({topo.slices // pp} {hw.scale_up.name} domain(s)); "
            f"stage {int(cols.binding_stage[i]) + 1}/{pp} binds (layers {a}-{b - 1}: "
            f"{int(cols.stage_mla_layers[i])} MLA, {int(cols.stage_kda_layers[i])} KDA; weights "
            f"{int(cols.weights_bytes[i]) / GiB:.2f} GiB a device); {pp - 1} stage-to-stage send(s) a step over {link.name} "
            f"({link.bw_bytes_per_s / 1e9:g} GB/s a GPU, {link.latency_s * 1e6:g} us: "
            f"{float(cols.pipeline_s[i]) * 1e3:.3f} ms of the TPOT)"
        )
    if bool(cols.spans_slices[i]):
        pattern = st.for_dp(int(cols.dp[i])).collectives.experts  # the pattern the engine runs at this DP
        out.append(cross_node_ep_warning(hw, topo, ep=ep, op=Collective.pattern_text(pattern)))
    mask = int(cols.scale_out_ops[i])
    if mask:
        crossing = [name for k, name in enumerate(COLLECTIVE_NAMES) if mask >> k & 1]
        out.append(scale_out_note(hw, topo, crossing=crossing))
    placed, experts = st.sharding.expert_placement, space.experts
    if placed is not None and placed.uneven and experts % ep:
        split = uneven_words(
            axis="expert", size=experts, mesh_axis=st.sharding.rules.get("expert") or "ep", mesh_size=ep
        )
        out.append(placed.note(split, -(-experts // ep)))
    if st.engram_placement is not None:  # a model with Engram (plan.search.engram_stacks)
        from k3plan.budget.engram import engine_default

        default, src = engine_default(st)
        if st.engram_placement != default:
            out.append(
                f"Engram tables in {'HBM' if st.engram_placement == 'hbm' else 'host memory'} (--engram "
                f"{st.engram_placement}): not stack {st.name}'s default ({default}: {src.repo} {src.file} "
                f"{src.symbol.split(' (')[0]}); set the engine's option yourself, the launch line does not"
            )
    return out


KvDtype = Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]  # sharding.stack.KvCache.dtype
# absent from the JSON until set
EXTENSIONS = (
    "sla",
    "cost",
    "expected_tpot_ms",
    "expected_source",
    "expected_records",
    "tpot_source",
    "launch_error",
    "estimate_tpot_ms",
    "estimate_source",
    "tpot_band_ms",
)


class PlanRow(Frozen):
    """One ranked (or closest-miss) configuration of plan."""

    rank: int
    hardware: str
    topology: str
    chips: int
    devices: int
    tp: int
    ep: int
    dp: int
    pp: int
    stack: str
    kv_dtype: KvDtype
    kv_dtype_override: Optional[str]  # --kv-dtypes (checked by plan): None where the stack's own
    chunk_tokens: int
    free_gib_per_device: float
    weights_gib_per_device: float
    max_sequences: int
    # the decode bound at --concurrency: None on a closest miss that does not fit memory (a speed
    # figure only for a workload that fits, as fit's "decode bound: not computed")
    tpot_ms: Optional[float]
    tokens_per_s_per_chip: Optional[float]
    binding: Optional[str]
    cost_usd_per_hour: Optional[float]
    per_device: PerDevice
    temp_evidence: str
    # the memory rests on a temp without evidence at this point (the analytic lower bound, or a calibration's
    # stage outside its measured range): fit says FITS IF and exits 3 (issue 50), plan marks the row
    temp_unverified: bool
    layout_notes: list[str]
    # the later passes (plan/wire.py, plan/expected.py, plan/serving.py) set these with extended(...): a key is
    # dumped once set, None included (pydantic's model_fields_set did this)
    sla: Optional[SlaRow] = None
    cost: Optional[CostRow] = None
    expected_tpot_ms: Optional[float] = None
    expected_source: Optional[str] = None
    expected_records: Optional[tuple[str, ...]] = None  # issue 46: the probe records expected_tpot_ms used
    tpot_source: Optional[str] = None  # issue 38: set where a serving benchmark gives tpot_ms (plan/serving.py)
    # issue 48: why the row's stack cannot launch it (plan/launchable.py); such a row is ranked only under
    # --include-unlaunchable, after every row that can launch (absent from the JSON where it can)
    launch_error: Optional[str] = None
    # issue 48: the row's best estimate of its TPOT and its kind (plan/expected.best_estimate): measured or
    # transferred (a serving benchmark, tpot_source), model (expected_tpot_ms), else ceiling (the decode bound);
    # plan ranks on it by default (--rank-by best)
    estimate_tpot_ms: Optional[float] = None
    estimate_source: Optional[str] = None
    # issue 46 item 7: the best estimate's band (lo, hi) in ms, the type roofline's ServingFigure.band_s has (there
    # in seconds): a serving benchmark's, the model's between its ops' ceiling and it, the ceiling's between it and
    # the model (plan/expected.with_bands); under --isl/--osl the row's SLA figures carry theirs (SlaRow)
    tpot_band_ms: Optional[tuple[float, float]] = None
    # issue 49: where a DeepSeek-V4.1 row's Engram tables live, "hbm" or "host" (--engram, else the engine's
    # default); None (and absent from the JSON) for a model without Engram
    engram: Optional[str] = None

    # the extensions set to None that are dumped still (a value other than None is always dumped)
    shown: tuple[str, ...] = ()

    __exclude__ = ("shown",)

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        for k in EXTENSIONS:
            if out.get(k) is None and k not in self.shown:
                out.pop(k, None)
        if out.get("engram") is None:
            out.pop("engram", None)
        return out

    def extended(self, **update: Any) -> PlanRow:
        """The row with ``update`` set (structs.replace), each extension named in it dumped from now on, None too."""
        shown = tuple(dict.fromkeys([*self.shown, *(k for k in update if k in EXTENSIONS)]))
        return replace(self, **update, shown=shown)

    def sla_row(self) -> SlaRow:
        """The row's figures under the load (rows of an --isl/--osl plan carry them)."""
        if self.sla is None:
            raise ValueError(f"plan row {self.rank} ({self.hardware} {self.topology}) has no SLA figures")
        return self.sla

    def cost_row(self) -> CostRow:
        """The row's cost columns (every ranked row carries them)."""
        if self.cost is None:
            raise ValueError(f"plan row {self.rank} ({self.hardware} {self.topology}) has no cost")
        return self.cost

    @property
    def split_text(self) -> str:
        """The parallel split, e.g. "TP8 EP8 DP1 PP2" (PP only when > 1)."""
        return f"TP{self.tp} EP{self.ep} DP{self.dp}" + (f" PP{self.pp}" if self.pp > 1 else "")

    @property
    def split_words(self) -> str:
        """The split in fit's words, e.g. "tp 8 ep 8 dp 1 pp 2" (pp only when > 1)."""
        return f"tp {self.tp} ep {self.ep} dp {self.dp}" + (f" pp {self.pp}" if self.pp > 1 else "")

    def fit_args(self) -> str:
        """fit's flags for this configuration: -H, -t, --tp/--ep/--dp, --pp when > 1, --stack, --kv-dtype."""
        return (
            f"-H {self.hardware} -t {self.topology} --tp {self.tp} --ep {self.ep} --dp {self.dp} "
            + (f"--pp {self.pp} " if self.pp > 1 else "")
            + f"--stack {self.stack} --kv-dtype {self.kv_dtype}"
            + (f" --engram {self.engram}" if self.engram else "")
        )

    def fit_command(self, *, context: int, batch: int) -> str:
        """The same configuration in `k3plan fit`, at the plan's context, batch and chunk."""
        return f"k3plan fit {self.fit_args()} --context {context} --batch {batch} --chunk {self.chunk_tokens}"

    def setup_options(self, model: str) -> dict[str, Any]:
        """The row as the options ``k3plan.setup.make_setup`` takes (fit's spelling)."""
        return {
            "model": model,
            "hardware": self.hardware,
            "topology": self.topology,
            "tp": self.tp,
            "ep": self.ep,
            "dp": self.dp,
            "pp": self.pp,
            "stack": self.stack,
            "kv_dtype": self.kv_dtype_override,
            "shardspecs": None,
            "engram": self.engram,
        }


def row(*, space: Space, cols: StepColumns, i: int, rank: int, fits: bool = True) -> PlanRow:
    """Configuration ``i`` as a typed row; ``fits`` False (a closest miss rejected on memory): no
    speed figure (tpot_ms, tokens_per_s_per_chip and binding are None)."""
    hw = space.hardware[int(cols.hw[i])]
    topo = space.topologies[int(cols.topo[i])]
    variant = space.variants[int(cols.variant[i])]
    kv = space.kv_dtypes[int(cols.variant[i]) % len(space.kv_dtypes)]
    cost = float(cols.cost_per_hour[i])
    return PlanRow(
        rank=rank,
        hardware=hw.name,
        topology=topo.text,
        chips=topo.chips,
        devices=topo.devices,
        tp=int(cols.tp[i]),
        ep=int(cols.ep[i]),
        dp=int(cols.dp[i]),
        pp=int(cols.pp[i]),
        stack=space.stacks[int(cols.stack[i])].label,  # with its options: two variants are two rows
        kv_dtype=variant.kv_cache.dtype,
        kv_dtype_override=kv,
        chunk_tokens=int(cols.chunk[i]),
        free_gib_per_device=int(cols.free_bytes[i]) / GiB,
        weights_gib_per_device=int(cols.weights_bytes[i]) / GiB,
        max_sequences=int(cols.max_sequences[i]),
        tpot_ms=float(cols.tpot_s[i]) * 1e3 if fits else None,
        tokens_per_s_per_chip=float(cols.tokens_per_s_per_chip[i]) if fits else None,
        binding=BINDING[int(cols.binding[i])] if fits else None,
        cost_usd_per_hour=None if math.isnan(cost) else cost,
        per_device=PerDevice(**{k: int(getattr(cols, COLUMN_OF.get(k, k))[i]) for k in PER_DEVICE}),
        temp_evidence=TEMP_EVIDENCE[int(cols.temp_source[i])],
        temp_unverified=bool(cols.temp_source[i] == 0 or cols.temp_outside[i]),
        layout_notes=layout_notes(space=space, cols=cols, i=i),
        engram=variant.engram_placement,  # set by plan for a model with Engram (search.py: engram_stacks)
    )
