"""From plan's rows to a deployment: cost columns, the Pareto front, the disaggregated alternative,
the launch command and the cold start of the pick -- ``k3plan.deploy``'s pure functions, wired.

Every model here is typed and lands in PlanResult (JSON) as it is; the render shows the same.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from k3plan.deploy.coldstart import ColdStart, cold_start
from k3plan.deploy.cost import (
    tokens_per_usd,
    usd_per_hour,
    usd_per_million_input_tokens,
    usd_per_million_output_tokens,
)
from k3plan.deploy.disagg import PoolSizing, Transfer, request_transfer, size_pools
from k3plan.deploy.pareto import ParetoPoint
from k3plan.deploy.prices import Price
from k3plan.engines.launch import LaunchConfig, engine_for_stack, launch_command, launch_text, takes_state_slots
from k3plan.engines.registry import engine_rules
from k3plan.engines.stack import Stack
from k3plan.errors import K3PlanError
from k3plan.hardware.spec import HardwareSpec
from k3plan.hardware.topology import Topology
from k3plan.models import Model
from k3plan.models.hub import hf_id
from k3plan.plan.rows import CostRow, PlanRow
from k3plan.setup import engine_refusals
from k3plan.structs import Frozen

UNPRICED = "n/a"


def _num(v) -> float | None:
    v = float(v)
    return None if math.isnan(v) or math.isinf(v) else v


def cost_rows(
    *,
    prices: list[Price],
    chips: list[int],
    output_tokens_per_s: list[float | None],
    input_tokens_per_s: list[float | None],
) -> list[CostRow]:
    """One CostRow a row: the deploy.cost functions called once on columns (None: not known)."""
    import numpy as np

    p = np.array([math.nan if x.usd_per_chip_hour is None else x.usd_per_chip_hour for x in prices], dtype=float)
    n = np.array(chips, dtype=float)
    out = np.array([math.nan if v is None else v for v in output_tokens_per_s], dtype=float)
    inp = np.array([math.nan if v is None else v for v in input_tokens_per_s], dtype=float)
    hour = usd_per_hour(chips=n, usd_per_chip_hour=p)
    with np.errstate(invalid="ignore"):
        m_out = usd_per_million_output_tokens(chips=n, usd_per_chip_hour=p, output_tokens_per_s=out)
        m_in = usd_per_million_input_tokens(chips=n, usd_per_chip_hour=p, input_tokens_per_s=inp)
    notes = {x.hardware: _note(x) for x in prices}
    return [
        CostRow(
            usd_per_chip_hour=x.usd_per_chip_hour,
            price_origin=x.origin,
            usd_per_hour=_num(hour[i]),
            usd_per_million_output_tokens=None if math.isnan(out[i]) else _num(m_out[i]),
            usd_per_million_input_tokens=None if math.isnan(inp[i]) else _num(m_in[i]),
            note=notes[x.hardware],
        )
        for i, x in enumerate(prices)
    ]


def _note(price: Price) -> str:
    return (
        price.source
        if price.usd_per_chip_hour is not None
        else f"{UNPRICED}: {price.source}"
        + ("" if "--price" in price.source else f"; --price {price.hardware}=USD fills it")
    )


def pareto_point(r: PlanRow, *, batch: int) -> ParetoPoint:
    sla, cost = r.sla_row(), r.cost_row()
    user, chip = sla.output_tokens_per_s_per_user, sla.output_tokens_per_s_per_chip
    if user is None or chip is None:
        raise ValueError(f"plan row {r.rank}: a Pareto point needs its tokens/s a user and a chip")
    per_usd = None
    if cost.usd_per_hour is not None and sla.output_tokens_per_s is not None:
        per_usd = _num(
            tokens_per_usd(
                chips=r.chips, usd_per_chip_hour=cost.usd_per_chip_hour, tokens_per_s=sla.output_tokens_per_s
            )
        )
    return ParetoPoint(
        hardware=r.hardware,
        topology=r.topology,
        chips=r.chips,
        split=r.split_text,
        stack=r.stack,
        batch=batch,
        tokens_per_s_per_user=user,
        tokens_per_s_per_chip=chip,
        usd_per_hour=cost.usd_per_hour,
        usd_per_million_output_tokens=cost.usd_per_million_output_tokens,
        tokens_per_usd=per_usd,
    )


class Disaggregated(Frozen):
    """Prefill and decode pools of the pick's instance shape, against the aggregated pick."""

    instance: str  # hardware topology split stack, both pools
    chips_per_instance: int
    prefill_tokens_per_s_per_instance: float  # a full chunk a step: chunk / T(0, chunk)
    decode_batch: int  # largest batch that fits memory and meets --tpot-ms
    decode_tokens_per_s_per_instance: float
    pools: PoolSizing
    transfer: Transfer
    prefill_chips: int
    decode_chips: int
    chips: int
    ttft_ms: float  # prefill of the ISL alone + the transfer
    tpot_ms: float
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    aggregated_chips: int
    aggregated_ttft_ms: float | None
    aggregated_tpot_ms: float | None
    aggregated_usd_per_hour: float | None
    notes: list[str]


def disaggregated(
    *,
    pick: PlanRow,
    model: Model,
    hw: HardwareSpec,
    stack: Stack,
    isl: int,
    osl: int,
    rate: float,
    tpot_ms: float | None,
    ttft_ms: float | None,
    price: Price,
) -> Disaggregated:
    s = pick.sla_row()
    base, a = s.step_base_ms / 1e3, s.step_per_decode_seq_ms / 1e3
    b, chunk, chips = s.step_per_prefill_token_us / 1e6, pick.chunk_tokens, pick.chips
    # the coefficients are a DP group's (plan/sla.py); an instance is dp groups stepping together
    dp = pick.dp
    prefill_rate = dp * chunk / (base + b * chunk)
    batch = pick.max_sequences
    if tpot_ms is not None and a > 0:
        batch = min(batch, math.floor(dp * (tpot_ms / 1e3 - base) / a))
    batch = max(1, batch)
    decode_rate = batch / (base + a * batch / dp)
    pools = size_pools(
        request_rate_per_s=rate,
        isl_tokens=isl,
        osl_tokens=osl,
        prefill_tokens_per_s_per_instance=prefill_rate,
        decode_tokens_per_s_per_instance=decode_rate,
    )
    total = (pools.prefill_instances + pools.decode_instances) * chips
    domain = hw.scale_up.domain_chips or hw.chips_per_host
    link = "scale_up" if total <= domain else "scale_out"
    xfer = request_transfer(
        spec=model.spec,
        stack=stack,
        hw=hw,
        isl_tokens=isl,
        link=link,
        ttft_target_s=None if ttft_ms is None else ttft_ms / 1e3,
    )
    ttft = (math.ceil(isl / chunk) * base + b * isl + xfer.transfer_s) * 1e3
    p = math.nan if price.usd_per_chip_hour is None else price.usd_per_chip_hour
    out_per_s = rate * osl
    notes = [
        (
            f"both pools use the pick's instance shape; the KV + KDA state crosses {xfer.link} ({link}: the "
            f"{total} chips {'fit' if link == 'scale_up' else 'exceed'} one {domain}-chip scale-up domain); "
            "one chip's link carries a request (sending_chips = 1, the bound)"
        )
    ]
    if tpot_ms is not None and base > tpot_ms / 1e3:
        notes.append(f"even one sequence misses --tpot-ms ({base * 1e3:.1f} ms a step)")
    return Disaggregated(
        instance=f"{pick.hardware} {pick.topology} {pick.split_text} {pick.stack}",
        chips_per_instance=chips,
        prefill_tokens_per_s_per_instance=prefill_rate,
        decode_batch=batch,
        decode_tokens_per_s_per_instance=decode_rate,
        pools=pools,
        transfer=xfer,
        prefill_chips=pools.prefill_instances * chips,
        decode_chips=pools.decode_instances * chips,
        chips=total,
        ttft_ms=ttft,
        tpot_ms=(base + a * batch) * 1e3,
        usd_per_hour=_num(usd_per_hour(chips=total, usd_per_chip_hour=p)),
        usd_per_million_output_tokens=_num(
            usd_per_million_output_tokens(chips=total, usd_per_chip_hour=p, output_tokens_per_s=out_per_s)
        ),
        aggregated_chips=chips,
        aggregated_ttft_ms=s.ttft_ms,
        aggregated_tpot_ms=s.tpot_ms,
        aggregated_usd_per_hour=pick.cost_row().usd_per_hour,
        notes=notes,
    )


class Launch(Frozen):
    config: LaunchConfig | None
    text: str | None  # the launch file's text
    error: str | None  # why the pick cannot be written for its engine


class SplitPick(Protocol):
    """What a launch reads of a configuration: a PlanRow, or plan's launch check's bare split (plan/launchable.py)."""

    @property
    def tp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def dp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def chunk_tokens(self) -> int: ...
    @property
    def kv_dtype(self) -> Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]: ...


def launch_for(
    *,
    pick: SplitPick,
    hw: HardwareSpec,
    stack: Stack,
    topology: Topology,
    model: Model,
    context: int,
    max_num_seqs: int,
    output_tokens: int = 1,
    check_only: bool = False,
) -> Launch:
    """The launch file of ``pick``, or why its engine cannot run it (``error``, one line). ``check_only``: plan's
    launch check of every row, which asks only whether the line can be written: ``text`` is the command alone
    (engines.launch.launch_command) and the engine's refusals for the model are not gathered."""
    try:
        engine = engine_for_stack(stack.name, hw.kind)
        cfg = LaunchConfig(
            hardware=hw.name,
            platform=hw.kind,
            stack=stack.label,
            engine=engine,
            model_path=launch_model(model),
            model=model.name if hf_id(model.name) else None,
            architecture=model.spec.architecture,
            tp=pick.tp,
            ep=pick.ep,
            dp=pick.dp,
            pp=pick.pp,
            hosts=topology.hosts,
            slices=topology.slices,
            max_model_len=context,
            max_num_batched_tokens=stack.engine_chunk(pick.chunk_tokens, dp=pick.dp),  # the engine's flag
            max_num_seqs=max(1, max_num_seqs),
            max_output_tokens=output_tokens,
            kv_dtype=pick.kv_dtype,
            memory_fraction=1.0
            - stack.reserve_fraction(
                usable_bytes=hw.usable_bytes_per_device,
                tp=pick.tp,
                pp=pick.pp,
                chunk=pick.chunk_tokens,
                vendor=hw.vendor,
                dp=pick.dp,
            ),
            dp_attention=stack.dp_attention,
            tpu_dp_attention=engine_rules(stack.name).tpu_dp_attention,
            state_slots_per_request=stack.state.slots_per_request
            if model.spec.kda is not None and takes_state_slots(engine)
            else None,
            expert_width=model.spec.moe.expert_intermediate,
            engine_options=engine_options(stack),
            refusals=() if check_only else tuple(engine_refusals(model, stack)),
        )
        return Launch(config=cfg, text=launch_command(cfg) if check_only else launch_text(cfg), error=None)
    except (K3PlanError, ValueError) as err:
        return Launch(config=None, text=None, error=str(err).splitlines()[0])


def launch_model(model: Model) -> str:
    """What the engine loads: a bundled model's Hugging Face id (``org/name``, k3plan.models.hub), which the engine
    resolves and fit --serve reads back; a model read from a config.json path, the folder that holds it (vLLM and
    SGLang load a local folder of config + weights)."""
    from pathlib import Path

    return hf_id(model.name) or str(Path(model.spec.source).parent)


def engine_options(stack: Stack) -> tuple[tuple[str, str, tuple[str, str, str]], ...]:
    """The stack's options as launch flags, each at the value the plan priced -- its default too: a
    stack's default is its deployment, not always the engine's (vllm-tpu prices MODEL_IMPL_TYPE=vllm where
    tpu-inference resolves to flax_nnx; sglang prices --moe-a2a-backend deepep where SGLang's default is
    none), so a command that left it out would run another configuration. The reserve and the KV dtype
    are written by the command from the plan's numbers already (--gpu-memory-utilization /
    --mem-fraction-static, --kv-cache-dtype), and vLLM's --enable-expert-parallel from the split.
    Options changed away from their defaults come first, in the order chosen, then the rest."""
    changed = [k for k, _, _ in stack.changed_options()]
    out = []
    for name in [*changed, *(k for k in stack.options if k not in changed)]:
        opt = stack.options[name]
        if opt.sets == "reserve" or opt.flag in ("--kv-cache-dtype", "--enable-expert-parallel"):
            continue
        value = stack.chosen.get(name, str(opt.default))
        if opt.unset is not None and value == opt.unset:  # the engine's variable left unset (Option.unset)
            continue
        if opt.switch is not None:  # a flag without a value, written alone at its choice (--disable-radix-cache)
            if value != opt.switch:
                continue
            value = ""
        out.append((opt.flag, value, (opt.source.repo, opt.source.file, opt.source.symbol)))
        effect = opt.choices.get(stack.chosen.get(name, str(opt.default)))
        for var, val in ((effect.launch_env or {}) if effect is not None else {}).items():
            out.append((var, val, (opt.source.repo, opt.source.file, opt.source.symbol)))
    return tuple(out)


def cold_start_for(*, pick: PlanRow, hw: HardwareSpec, topology: Topology, load_gbps: float, model: Model) -> ColdStart:
    return cold_start(
        weight_bytes_per_device=pick.per_device.weights_bytes,
        topology=topology,
        hw=hw,
        load_gbps=load_gbps,
        checkpoint_bytes=int(model.inventory.checkpoint_bytes),
    )
