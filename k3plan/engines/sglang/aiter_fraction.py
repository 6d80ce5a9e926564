"""SGLang 0.4.7-0.5.4's cut of the static memory fraction under the aiter attention backend on AMD GPUs: the model
runner multiplies mem_fraction_static by 0.85 where the attention backend is aiter and the model's context is longer
than 8,192 tokens, after the fraction is set (given or derived), so the pool is sized from the cut fraction.

Read in the sglang 0.4.9.post2 and 0.4.10 wheels (PyPI), srt/model_executor/model_runner.py ModelRunner.
model_specific_adjustment: ``if server_args.attention_backend == "aiter": if self.model_config.context_len > 8192:
self.mem_fraction_static *= 0.85``; and the backend it picks where the command names none, on HIP: aiter for an
MHA model; for an MLA model aiter where ``get_num_kv_heads(tp_size)`` is 16 or 128 and no speculative decoding runs,
else triton. The cut is in every wheel from 0.4.7 to 0.5.4 and in none of 0.4.6.post5 and 0.5.5 (read by a session-47
helper across the wheels, tests/engines/cases/sglang-7691-r1-mi300x-tp8-dp8-ep-mfs095.yaml).
"""

from __future__ import annotations

AITER_CUT_FROM = (0, 4, 7)
AITER_CUT_UNTIL = (0, 5, 5)  # first release without it
AITER_CUT = 0.85
AITER_CONTEXT = 8192  # the cut applies above this model context
AITER_KV_HEADS = (16, 128)  # get_num_kv_heads(tp_size) values for which an MLA model gets aiter by default
AITER_SOURCE = (
    "sglang 0.4.9.post2 / 0.4.10 wheels (PyPI) srt/model_executor/model_runner.py ModelRunner.model_specific_adjustment "
    "(mem_fraction_static *= 0.85 under the aiter attention backend where context_len > 8192; aiter picked by default "
    "on HIP for an MLA model with 16 or 128 KV heads a TP rank and no speculative decoding); in the 0.4.7-0.5.4 wheels"
)


def aiter_fraction_scale(
    *,
    release: tuple[int, int, int] | None,
    vendor: str,
    backend: str | None,
    speculative: bool,
    context: int,
    kv_heads: int | None,
    tp: int,
    dp: int = 1,
    dp_attention: bool = False,
) -> tuple[float, str] | None:
    """(scale, why): the factor SGLang's model runner applies to mem_fraction_static at ``release`` on an AMD GPU
    (``vendor``) under the command's ``--attention-backend`` (``backend``; None: the engine's pick), for a model of
    ``context`` tokens with ``kv_heads`` KV heads (an MLA model's, whose num_key_value_heads are its attention heads;
    None: not an MLA model) over SGLang's tp_size (``tp``; under DP attention, ``dp_attention``, k3plan's ``tp`` is a
    group's attention TP and SGLang's tp_size is ``tp`` x ``dp``); None where no cut applies."""
    if release is None or not AITER_CUT_FROM <= release < AITER_CUT_UNTIL or vendor != "amd":
        return None
    if backend is None:
        per_tp = None if kv_heads is None else max(kv_heads // (tp * dp if dp_attention else tp), 1)
        aiter = per_tp is None or (per_tp in AITER_KV_HEADS and not speculative)
    else:
        aiter = backend.strip().lower() == "aiter"
    if not aiter or context <= AITER_CONTEXT:
        return None
    how = "the command's --attention-backend aiter" if backend is not None else "aiter, SGLang's pick for this model"
    return AITER_CUT, f"x {AITER_CUT} under {how} at a context of {context:,} > {AITER_CONTEXT:,} ({AITER_SOURCE})"
