"""SGLang's scheduling as the speed model prices it (issue 51 item 2: an engine's speed rules in its folder).

Data and pure functions over ints: which runs SGLang's scheduler serves (its prefill-first rule,
``k3plan.speed.scheduler.PREFILL_FIRST_RULE``) and its token budget a step where a run does not publish one.
"""

from __future__ import annotations

from k3plan.engines.flags import SGLANG_CHUNK_SOURCE, sglang_default_chunk

STACKS = ("sglang",)  # the stacks (and benchmark engines) SGLang's own scheduler serves


def default_token_budget(engine: str, *, hbm_bytes_per_device: int) -> tuple[int, str] | None:
    """(token budget a step, where it is read) for a run on ``engine`` that publishes no --chunked-prefill-size:
    SGLang's default for the GPU's memory (``engines.flags.sglang_default_chunk``); None for another engine."""
    if engine not in STACKS:
        return None
    chunk = sglang_default_chunk(hbm_bytes_per_device)
    return chunk, f"token budget {chunk:,} ({SGLANG_CHUNK_SOURCE})"
