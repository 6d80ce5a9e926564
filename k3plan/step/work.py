"""What one step moves and computes, from the inventory and the ShardingPlan.

Decode touches every non-expert weight each step, and of the routed experts the expected number of
distinct experts a layer's batch selects: E * (1 - (1 - k/E)^B) under uniform routing, or
sum_e 1 - (1 - p_e)^B from a router histogram (p_e = share of tokens choosing expert e, sum = k).
FLOPs: 2 x params a token for linear layers; absorbed MLA attention 2 x 2 x heads x kv_lora x ctx
a layer a token (docs/k3-facts.md §5); KDA 3 matrix-vector products on the [d, d] state a head a token.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from k3plan.errors import K3PlanError
from k3plan.models.spec import ModelSpec

if TYPE_CHECKING:
    from k3plan.models.inventory import TensorInventory


def experts_touched(*, num_experts: int, top_k: int, batch: int, histogram: Optional[Sequence[float]] = None) -> float:
    """Expected distinct experts a MoE layer touches for ``batch`` tokens."""
    if histogram is None:
        return num_experts * (1 - (1 - top_k / num_experts) ** batch)
    return sum(1 - (1 - min(1.0, p)) ** batch for p in histogram)


def load_histogram(path: Path, *, num_experts: int, top_k: int) -> list[float]:
    """A JSON list (or {"counts": [...]}) of per-expert selection counts or shares, len = E."""
    from k3plan.safeparse import parse_json, read_text

    label = f"--router-histogram {path}"
    data = parse_json(label, read_text(label, Path(path)))  # bounded depth and size, finite numbers
    counts = data.get("counts") if isinstance(data, dict) else data
    if (
        not isinstance(counts, list)
        or len(counts) != num_experts
        or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0 for c in counts)
    ):
        raise K3PlanError(f"--router-histogram {path}: expected {num_experts} finite non-negative numbers")
    total = sum(counts)
    if not math.isfinite(total) or total <= 0:
        raise K3PlanError(f"--router-histogram {path}: the counts must sum to a positive finite number")
    return [top_k * c / total for c in counts]


def attention_decode_flops_per_token(spec: ModelSpec, context_tokens: int) -> float:
    """Absorbed MLA over the latent: scores and values over kv_lora, 2 FLOPs a MAC (docs/k3-facts.md §5).
    DeepSeek-V4: its indexer and sparse / compressed / window attention (step/dsv4_ops.py)."""
    if spec.dsv4 is not None:
        from k3plan.step.dsv4_ops import attention_flops_at

        return attention_flops_at(spec, context_tokens)
    mla = 2 * 2 * spec.n_mla * spec.mla.heads * spec.mla.kv_lora_rank * context_tokens
    kda = 0 if spec.kda is None else 3 * 2 * spec.n_kda * spec.kda.heads * spec.kda.head_dim**2
    return mla + kda


def attention_prefill_flops_per_token(spec: ModelSpec, prompt_tokens: int) -> float:
    """Causal MLA (materialised K/V in prefill) averaged over a prompt + chunked KDA. DeepSeek-V4: its
    attention at the prompt's mean position (step/dsv4_ops.py; linear in the context past the top-k)."""
    if spec.dsv4 is not None:
        from k3plan.step.dsv4_ops import attention_flops_at

        return attention_flops_at(spec, (prompt_tokens + 1) / 2)
    mla = spec.mla
    avg_ctx = (prompt_tokens + 1) / 2
    per_layer = 2 * mla.heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) * avg_ctx
    kda = 0 if spec.kda is None else 3 * 2 * spec.n_kda * spec.kda.heads * spec.kda.head_dim**2
    return spec.n_mla * per_layer + kda


def linear_flops_per_token(active_params: float) -> float:
    """2 FLOPs a multiply-accumulate over every active parameter (docs/k3-facts.md §5: 2 x 104.19 B)."""
    return 2 * active_params


def attention_linear_crossover_tokens(spec: ModelSpec, active_params: float) -> float | None:
    """Context at which absorbed-MLA decode attention FLOPs equal the linear part; None for a model with no
    MLA layer (its attention FLOPs do not grow with the context: no crossover, and JSON has no infinity)."""
    if spec.dsv4 is not None:  # DeepSeek-V4: constant (top-k, windows) + slope (indexer, HCA) x context
        from k3plan.step.dsv4_ops import attention_flops_per_token

        const, slope = attention_flops_per_token(spec, 0)
        return None if not slope else max(0.0, linear_flops_per_token(active_params) - const) / slope
    per_ctx = 2 * 2 * spec.n_mla * spec.mla.heads * spec.mla.kv_lora_rank
    return None if not per_ctx else linear_flops_per_token(active_params) / per_ctx


def expert_flops_per_token(inventory: TensorInventory) -> float:
    """The routed experts' share of ``linear_flops_per_token``: 2 x their active params (K3: 2 x 16 of 896
    experts x 3 x 3,584 x 3,072 x 92 MoE layers = 97.24 GFLOP of 208.38)."""
    return linear_flops_per_token(sum(t.active_params for t in inventory.text if t.role == "expert"))


def prompt_devices(*, devices, dp, ep, pp):
    """(devices that run one prompt's attention and non-expert matmuls, devices that run its routed experts),
    over ``int | numpy array`` columns: its DP group's tp x pp = devices / dp, and the EP group's ep x pp
    (all devices when EP spans the DP groups)."""
    from k3plan.columns import minimum

    return devices // dp, minimum(devices, ep * pp)


def prompt_flops_per_token(*, linear, attention, experts, group, expert_group):
    """A prompt's FLOPs a token as its DP group's ``group`` devices see them: the routed experts' run on
    ``expert_group`` devices, so they count group / expert_group of theirs. Time a token = this / (peak a
    device x group x MFU) = (linear - experts + attention) / (peak x group) + experts / (peak x expert_group);
    the experts' term is exactly 0 where they share the group's devices (DP 1)."""
    return linear + attention + experts * (group / expert_group - 1)


def busiest_rank_experts(
    *, num_experts: int, top_k: int, batch: int, ep: int, histogram: Optional[Sequence[float]] = None
) -> tuple[float, float]:
    """(expected distinct experts the busiest EP rank's local experts get from ``batch`` tokens, the mean over
    the ranks) for a MoE layer: rank r holds experts [r E/ep, (r+1) E/ep) (vLLM's linear expert placement), an
    expert is touched with p = 1 - (1 - share)^batch (share = top_k / E, or the router histogram's), the experts
    touched independently, so a rank's count is a sum of Bernoullis (exact by convolution) and
    E[max] = sum_m (1 - prod_r P(count_r <= m)). At batch 1 with K3's 16 of 896 over 32 ranks: 2.35 (the exact
    draw of 16 distinct experts: 2.36), against a mean of 0.5."""
    if ep <= 1 or num_experts % ep:
        mean = experts_touched(num_experts=num_experts, top_k=top_k, batch=batch, histogram=histogram) / max(ep, 1)
        return mean, mean
    shares = [top_k / num_experts] * num_experts if histogram is None else [min(1.0, p) for p in histogram]
    ps = [1 - (1 - s) ** batch for s in shares]
    per = num_experts // ep
    cdfs = []
    for r in range(1 if histogram is None else ep):  # uniform routing: every rank's count has one distribution
        # the convolution by one Bernoulli a step: entry i = dist[i - 1] p + dist[i] (1 - p) (fit imports no numpy:
        # whole-list comprehensions, the same two products summed as an indexed loop would)
        dist = [1.0]
        for p in ps[r * per : (r + 1) * per]:
            stay = [q * (1 - p) for q in dist]
            move = [q * p for q in dist]
            dist = [stay[0], *(m + s for m, s in zip(move, stay[1:])), move[-1]]
        acc, cdf = 0.0, []
        for q in dist:
            acc += q
            cdf.append(min(acc, 1.0))
        cdfs.append(cdf)
    emax = 0.0
    for m in range(per):
        prod = cdfs[0][m] ** ep if histogram is None else math.prod(cdf[m] for cdf in cdfs)
        emax += 1 - prod
    return emax, sum(ps) / ep
