"""The typed parts of a fit: named frozen models whose JSON dump is the fit's JSON contract
(field order = key order; reports/baseline and `fit --json` consumers rely on it). Read them by
attribute (``result.per_device.free_bytes``); the JSON is ``k3plan.structs.dump``.
"""

from __future__ import annotations

from k3plan.step.terms import Named, Terms, term_map

# where a configuration's temporaries come from, in fit's and plan's words alike (FitResult.temp_evidence; plan's
# temp_source column is an index into it: plan.evaluate.apply_evidence / apply_temp_model)
TEMP_EVIDENCE = ("analytic", "compiled", "measured", "temp model")


class ModelFacts(Named):
    name: str
    total_params: int
    active_params: int
    checkpoint_bytes: int
    runtime_weight_bytes: int


class HardwareFacts(Named):
    name: str
    topology: str
    chips: int
    devices: int
    hosts: int
    slices: int
    hbm_bytes_per_device: int
    usable_bytes_per_device: int


class ModelState(Named):
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    kv_dtype: str
    recurrent_dtype: str
    conv_dtype: str


class PerDevice(Named):
    weights_bytes: int
    replicated_weights_bytes: int
    kv_bytes: int
    state_bytes: int
    temp_bytes: int
    reserve_bytes: int
    free_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    sequences: int


class Capacity(Named):
    max_context_tokens: int
    memory_context_tokens: int
    max_sequences: int
    kv_state_crossover_tokens: float | None
    model_max_context_tokens: int | None
    # where the temp comes from the temp model (k3plan.budget.temp_model): the same at its band's lower end
    band_low_max_context_tokens: int | None = None
    band_low_max_sequences: int | None = None

    def _dump_extra(self, out):
        """The band keys appear only where a stage's temp is modelled (the JSON contract)."""
        for k in ("band_low_max_context_tokens", "band_low_max_sequences"):
            if out.get(k) is None:
                out.pop(k, None)
        return out


class Provenance(Named):
    weights: str
    kv: str
    state: str
    temp_prefill: str
    temp_decode: str
    reserve: str
    hbm: str
    stack_sources: str


class Temp(Named):
    """Analytic terms of both graphs; the bytes each stage counts (None: refused by calibration)."""

    __dump_with__ = {"prefill_terms": term_map, "decode_terms": term_map}

    prefill_terms: Terms = ()
    decode_terms: Terms = ()
    prefill_bytes: int | None = None
    decode_bytes: int | None = None
    prefill_refused: str | None = None
    prefill_outside: str | None = None
    decode_refused: str | None = None
    decode_outside: str | None = None
    # (low, high) bytes where the stage's temp comes from the temp model (k3plan.budget.temp_model); the
    # stage counts the high end
    prefill_band: tuple[int, int] | None = None
    decode_band: tuple[int, int] | None = None
    binding: str = ""

    def band_low(self) -> int | None:
        """The temp at the band's lower end (a stage without a band at its own bytes); None: no band."""
        stages = ((self.prefill_band, self.prefill_bytes), (self.decode_band, self.decode_bytes))
        if all(band is None for band, _ in stages):
            return None
        return max(band[0] if band is not None else x for band, x in stages if x is not None)

    def _dump_extra(self, out):
        """The calibration keys appear only when they say something (the JSON contract)."""
        for k in (
            "prefill_refused",
            "prefill_outside",
            "decode_refused",
            "decode_outside",
            "prefill_band",
            "decode_band",
        ):
            if out.get(k) is None:
                out.pop(k, None)
        return out


class CompiledPoint(Named):
    """fit --compile: the step compiled deviceless for the target at the asked point (k3plan.validate), a stage's
    temp its memory_analysis() temp; a stage whose compile ran out of HBM has None and ``*_refused`` says so."""

    source: str  # "compiled (deviceless tpu7x:2x2x4, jax X, libtpu Y, N layers, this point)"
    prefill_bytes: int | None = None
    decode_bytes: int | None = None
    prefill_refused: str = ""
    decode_refused: str = ""

    def of(self, stage: str) -> tuple[int | None, str]:
        """(the stage's temp bytes, why it was refused or "")."""
        if stage == "prefill":
            return self.prefill_bytes, self.prefill_refused
        return self.decode_bytes, self.decode_refused


class Unverified(Named):
    """Issue 50: the verdict rests on a temp that is a lower bound without evidence (the analytic model: no
    measured or compiled calibration, no temp model for this configuration; or a calibration's stage outside its
    measured range, counted at max(analytic, largest measured)). It fits only if every such
    stage's temporaries stay at or under ``max_temp_bytes`` (the counted temp plus the free bytes);
    ``settle`` is the command whose compile or measurement decides it."""

    stages: list[str]
    temp_bytes: int
    max_temp_bytes: int
    settle: str
    # why each stage's temp is no evidence at this point: the analytic lower bound, or a calibration's
    # stage outside its measured range (k3plan.budget.measured_range)
    why: list[str] = []


class Speed(Named):
    """The decode bound at the fit's workload (filled by the CLI)."""

    tpot_s: float
    tokens_per_s: float
    binding: str
    collective_latency_source: str
    probes: list[str]
    source: str
    tpot_source: str = "ceiling"  # measured / transferred (a serving benchmark), the model, or the ceiling
    tpot_label: str = ""
    ceiling_tpot_s: float | None = None  # the decode bound's step (= tpot_s when the source is the ceiling)
    records_used: list[str] = []  # issue 46: every probe record the TPOT used (model ratio, HBM bandwidth, latency)
    # issue 46 item 7: (low, high) seconds the TPOT sits in, as roofline's serving.tpot.band_s (speed.serving)
    tpot_band_s: tuple[float, float] | None = None
