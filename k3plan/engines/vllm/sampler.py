"""What vLLM's profile run holds when it warms the sampler up (issue 47): after the dummy forward at
max_num_batched_tokens, ``profile_run`` samples from the last hidden state of every dummy request, so the sampler's
full-vocabulary temporaries are in the torch peak the worker subtracts before the KV pool. Read at upstream commit
vllm-project/vllm@c621af16 (2026-06-14, carried in yhfgyyf/vllm-deepseek-v4-sm89's history; the functions below are
unchanged at that fork's head b12eeaa2):

- rows: ``GPUModelRunner._dummy_run(max_num_tokens)`` spreads the tokens over ``num_reqs = min(num_tokens,
  max_num_seqs)`` requests and returns ``hidden_states[logit_indices]``, one row a request
  (vllm/v1/worker/gpu_model_runner.py);
- ``GPUModelRunner._dummy_sampler_run``: ``logits = self.model.compute_logits(...)`` ([rows, vocab] in the model's
  dtype, gathered over TP), then the sampler twice, the second time with a generator, which takes
  ``TopKTopPSampler.forward_native`` whatever the first path was (forward_cuda falls back to it when generators are
  given, vllm/v1/sample/ops/topk_topp_sampler.py @82a42234);
- in that call ``Sampler.forward`` holds a float32 copy of the logits (``logits.to(torch.float32)``,
  vllm/v1/sample/sampler.py @7fe7800f), top-k / top-p masks it in place (the Triton kernel for 8 rows or more),
  ``forward_native`` takes ``probs = logits.softmax(dim=-1, dtype=torch.float32)`` and ``random_sample`` an
  exponential-noise tensor ``q`` of probs' shape: four [rows, vocab] tensors live at once, 2 + 4 + 4 + 4 bytes an
  entry. With speculative decoding the rejection sampler's dummy call follows on (k + 1) x rows logits; its live set
  (the random logits, the target rows' copy, their float32 copy and probabilities: 2(k+1) + 2k + 4k + 4k bytes an
  entry of rows x vocab) is 14 at k = 1, no more than the sampler's, and is not priced on its own.

Not priced: the Triton top-k / top-p kernel's persistent [min(SMs, rows), vocab] float32 buffer (under 50 MiB on
the GPUs in tests/engines) and FlashInfer's internal buffers in the first call.
"""

from __future__ import annotations

from k3plan.units import GiB

SAMPLER_SOURCE = (
    "vllm-project/vllm@c621af16 vllm/v1/worker/gpu_model_runner.py GPUModelRunner._dummy_run (num_reqs = "
    "min(num_tokens, max_num_seqs), one logits row a request) and _dummy_sampler_run (the second sampler call, with a "
    "generator, takes TopKTopPSampler.forward_native), vllm/v1/sample/sampler.py @7fe7800f Sampler.forward "
    "(logits.to(torch.float32)), vllm/v1/sample/ops/topk_topp_sampler.py @82a42234 forward_native / random_sample "
    "(float32 probs and exponential noise q): read in yhfgyyf/vllm-deepseek-v4-sm89's history"
)
# bytes an entry of the [rows, vocab] tensors live at the second sampler call's random_sample: compute_logits' output
# in the model's 16-bit dtype, Sampler.forward's float32 copy, forward_native's float32 probs and noise q
LOGITS_16BIT = 2
LOGITS_F32 = 4
PROBS_F32 = 4
NOISE_F32 = 4
LIVE_BYTES_PER_ENTRY = LOGITS_16BIT + LOGITS_F32 + PROBS_F32 + NOISE_F32


def sampler_profile_peak(*, max_num_seqs: int, max_num_batched_tokens: int, vocab_size: int) -> tuple[int, int, str]:
    """(bytes, rows, how): the sampler warm-up's live [rows, vocab] tensors in vLLM's profile run (module
    docstring); 0 where a figure is missing."""
    rows = min(max_num_seqs, max_num_batched_tokens) if max_num_batched_tokens > 0 else max_num_seqs
    if rows <= 0 or vocab_size <= 0:
        return 0, 0, "no sampler warm-up priced (no max_num_seqs, max_num_batched_tokens or vocabulary)"
    peak = LIVE_BYTES_PER_ENTRY * rows * vocab_size
    how = (
        f"the sampler warm-up's {peak / GiB:.2f} GiB: {rows:,} rows (min(max_num_seqs {max_num_seqs:,}, "
        f"max_num_batched_tokens {max_num_batched_tokens:,})) x vocabulary {vocab_size:,} x {LIVE_BYTES_PER_ENTRY} B "
        f"(16-bit logits, their float32 copy, float32 probs and noise live at once; {SAMPLER_SOURCE})"
    )
    return peak, rows, how
