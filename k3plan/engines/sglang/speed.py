"""SGLang's scheduling as the speed model prices it (issue 51 item 2: an engine's speed rules in its folder).

Data and pure functions over ints: which runs SGLang's scheduler serves (its prefill-first rule,
``k3plan.speed.scheduler.PREFILL_FIRST_RULE``), its token budget a step and its running requests where a run does
not publish them.
"""

from __future__ import annotations

from k3plan.engines.flags import SGLANG_CHUNK_SOURCE, sglang_default_chunk
from k3plan.engines.registry import engines
from k3plan.engines.sglang.dsv4_pool import DSV4_RUNNING, DSV4_RUNNING_SOURCE

STACKS = ("sglang",)  # the stacks (and benchmark engines) SGLang's own scheduler serves
# the stacks SGLang's code runs on a GPU: its own, and those whose engine launches SGLang there (Engine.launcher_on:
# dp-attention), so its kernel rules (engines/sglang/kernels.py) price them alike
GPU_STACKS = tuple(n for e in engines() if e.launcher_for("gpu") == "sglang" for n in e.names)


def default_token_budget(engine: str, *, hbm_bytes_per_device: int) -> tuple[int, str] | None:
    """(token budget a step, where it is read) for a run on ``engine`` that publishes no --chunked-prefill-size:
    SGLang's default for the GPU's memory (``engines.flags.sglang_default_chunk``); None for another engine."""
    if engine not in STACKS:
        return None
    chunk = sglang_default_chunk(hbm_bytes_per_device)
    return chunk, f"token budget {chunk:,} ({SGLANG_CHUNK_SOURCE})"


def default_max_running(engine: str, *, dsv4: bool, attn_dp: int) -> tuple[int, str] | None:
    """(running requests a DP group, where it is read) for a run on ``engine`` that publishes no
    --max-running-requests: SGLang's DeepSeek-V4 default (``dsv4``: the model is DeepSeek-V4 or V4.1) over its
    ``attn_dp`` attention-DP groups; None elsewhere (SGLang's own default otherwise follows the pool:
    ``engines/sglang/memory.py``, which the score's pool-cap stands for)."""
    if engine not in STACKS or not dsv4:
        return None
    running = max(DSV4_RUNNING // max(attn_dp, 1), 1)
    return running, f"{running:,} running requests a group ({DSV4_RUNNING_SOURCE})"
