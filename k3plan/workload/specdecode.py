"""Speculative decoding (draft tokens + one verify step): what a step yields and what it costs.

A draft proposes k tokens; the target model verifies all k (plus the position after them) in one
forward pass. Position i is kept only if positions 1..i were all accepted, so with per-position
acceptance rates a_1..a_k (a_i: the chance position i is accepted given 1..i-1 were), the expected
number of accepted draft tokens a step is sum_i prod_{j<=i} a_j, and the step always emits one more
token of its own (the correction or the bonus token) -- Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", eq. 1 (one rate a: (1 - a^(k+1)) / (1 - a) tokens a step).

Counters a planner needs, because "forward tokens" and "tokens the user gets" differ (issue 14):
per step (forward tokens k + 1 a sequence), per drafted token (k) and per accepted token.
"""

from __future__ import annotations

import math

from k3plan.errors import K3PlanError, require
from k3plan.structs import Frozen

# The most draft tokens a sequence a verify step that an engine k3plan launches takes: vLLM's rejection sampler
# asserts metadata.max_spec_len <= MAX_SPEC_LEN = 128 ("the maximum number of speculative draft tokens allowed
# per request in a single step"; vllm-project/vllm@7f6fc1c5ce8d02f473b1b923debbfef3fa0b7a6a
# vllm/v1/sample/rejection_sampler.py, MAX_SPEC_LEN, RejectionSampler.forward; 32 in earlier versions). More
# cannot be served; the bound is vLLM's, SGLang's own cap is not checked here.
MAX_SPEC_TOKENS = 128


_Frozen = Frozen


class SpecDecode(_Frozen):
    """--spec-tokens k --acceptance a (one rate) or a1,a2,...,ak (per position)."""

    draft_tokens: int  # 1 to MAX_SPEC_TOKENS
    acceptance: tuple[float, ...]  # one rate for every position, or one a position

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.draft_tokens <= MAX_SPEC_TOKENS:
            raise ValueError(f"draft_tokens {self.draft_tokens}: expected 1 to {MAX_SPEC_TOKENS}")
        n = len(self.acceptance)
        if n not in (1, self.draft_tokens):
            raise ValueError(
                f"acceptance: {n} rates for {self.draft_tokens} draft tokens; expected 1 or {self.draft_tokens}"
            )
        if any(not (0.0 <= a <= 1.0) or math.isnan(a) for a in self.acceptance):
            raise ValueError(f"acceptance {self.acceptance}: every rate must lie in [0, 1]")

    @property
    def position_rates(self) -> tuple[float, ...]:
        return self.acceptance * self.draft_tokens if len(self.acceptance) == 1 else self.acceptance

    @property
    def expected_accepted_tokens(self) -> float:
        """sum over positions of the product of the rates up to it."""
        total, run = 0.0, 1.0
        for a in self.position_rates:
            run *= a
            total += run
        return total

    @property
    def expected_tokens_per_step(self) -> float:
        """Accepted draft tokens + the one token the verify step emits itself."""
        return self.expected_accepted_tokens + 1.0

    @property
    def forward_tokens_per_step(self) -> int:
        """Tokens a sequence pushes through the target model in one verify step."""
        return self.draft_tokens + 1


def parse_spec_decode(*, spec_tokens: int, acceptance: str) -> SpecDecode:
    """From the CLI: --spec-tokens 3 --acceptance 0.8 or --acceptance 0.9,0.8,0.7."""
    try:
        rates = tuple(float(x) for x in acceptance.split(","))
    except ValueError:
        raise K3PlanError(f"--acceptance {acceptance!r}: expected a rate in [0, 1] or comma-separated rates") from None
    require(
        1 <= spec_tokens <= MAX_SPEC_TOKENS,
        f"--spec-tokens {spec_tokens}: expected 1 to {MAX_SPEC_TOKENS} (vLLM's rejection sampler takes at most "
        f"MAX_SPEC_LEN = {MAX_SPEC_TOKENS} draft tokens a request a step)",
    )
    require(
        len(rates) in (1, spec_tokens),
        f"--acceptance: {len(rates)} rates for --spec-tokens {spec_tokens}; expected 1 or {spec_tokens}",
    )
    require(all(0.0 <= a <= 1.0 for a in rates), f"--acceptance {acceptance!r}: every rate must lie in [0, 1]")
    return SpecDecode(draft_tokens=spec_tokens, acceptance=rates)


class SpecDecodeSpeed(_Frozen):
    """One verify step at a batch, every rate per second; '_per_s' counts the whole batch."""

    spec: SpecDecode
    batch: int
    step_s: float  # verify step + drafting
    verify_step_s: float
    draft_s: float
    forward_tokens_per_step: int  # batch x (k + 1): what the target model processes
    extra_forward_tokens_per_step: int  # batch x k more than a plain decode step
    drafted_tokens_per_step: int
    accepted_tokens_per_step: float
    emitted_tokens_per_step: float
    emitted_tokens_per_s: float
    drafted_tokens_per_s: float
    accepted_tokens_per_s: float
    forward_tokens_per_s: float
    s_per_emitted_token: float  # the TPOT a user sees
    acceptance_fraction: float  # accepted / drafted
    speedup: float | None  # over plain decode at baseline_step_s
    draft_forwards_per_step: int = 0  # draft forwards a step: k for an MTP head or draft model, fewer for DSpark


def spec_decode_speed(
    *,
    spec: SpecDecode,
    batch: int,
    verify_step_s: float,
    draft_s_per_token: float = 0.0,
    baseline_step_s: float | None = None,
    draft_forwards: int | None = None,
) -> SpecDecodeSpeed:
    """``verify_step_s``: the target model's step over batch x (k+1) tokens (the roofline prices it);
    ``draft_s_per_token``: one draft forward (MTP head or draft model) a drafted position;
    ``baseline_step_s``: the plain decode step at this batch, for the speedup; ``draft_forwards``: draft
    forwards a step (None: one a drafted position, an MTP head or a draft model; DeepSeek-V4.1's DSpark drafts a
    block of positions a forward)."""
    require(batch >= 1, f"batch {batch}: expected a positive integer")
    require(verify_step_s > 0, f"verify step {verify_step_s} s: expected > 0")
    require(draft_s_per_token >= 0, f"draft time {draft_s_per_token} s: expected >= 0")
    k = spec.draft_tokens
    require(draft_forwards is None or 1 <= draft_forwards <= k, f"draft forwards {draft_forwards}: expected 1 to {k}")
    draft_s = (k if draft_forwards is None else draft_forwards) * draft_s_per_token
    step = verify_step_s + draft_s
    emitted = batch * spec.expected_tokens_per_step
    accepted = batch * spec.expected_accepted_tokens
    return SpecDecodeSpeed(
        spec=spec,
        batch=batch,
        step_s=step,
        verify_step_s=verify_step_s,
        draft_s=draft_s,
        forward_tokens_per_step=batch * (k + 1),
        extra_forward_tokens_per_step=batch * k,
        drafted_tokens_per_step=batch * k,
        accepted_tokens_per_step=accepted,
        emitted_tokens_per_step=emitted,
        emitted_tokens_per_s=emitted / step,
        drafted_tokens_per_s=batch * k / step,
        accepted_tokens_per_s=accepted / step,
        forward_tokens_per_s=batch * (k + 1) / step,
        s_per_emitted_token=step / spec.expected_tokens_per_step,
        acceptance_fraction=spec.expected_accepted_tokens / k,
        speedup=None if baseline_step_s is None else baseline_step_s * spec.expected_tokens_per_step / step,
        draft_forwards_per_step=k if draft_forwards is None else draft_forwards,
    )
