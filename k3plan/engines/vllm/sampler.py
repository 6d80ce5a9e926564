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

Not priced: FlashInfer's internal buffers in the first call, and the Triton top-k / top-p kernel's buffer, cached per
device and live at the peak: ``[min(next_power_of_2(min(SMs, rows)), SMs), vocab]`` in the logits' float32 (vllm 0.18.0
wheel, vllm/v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton, _TRITON_BUFFER_CACHE), 132 x 129,280 x 4 B =
65 MiB for DeepSeek's vocabulary on an H100 / H200 and 82 MiB for Kimi's 163,840, 73 MiB for DeepSeek on a B200's 148
SMs. Read in session 53 (vnvpool) and left out: priced, it moves the logged pools by 0.06-0.08 GiB and no case across
3% or its verdict (vllm-kamra-r1-0528-h200-tp8-8k-v0180 +2.69 -> +2.63 GiB, -b200-tp8-8k +3.42 -> +3.35,
vllm-kamra-kimi-k2.5-h200-tp8-8k +2.77 -> +2.69), which a term needs to enter.

Releases 0.11.1 to 0.16.x mask by sorting (``fit --engine-version``; read in the PyPI wheels of 0.11.1, 0.16.0 and
0.17.0): vllm-project/vllm#26859 (2025-10-15, first released in 0.11.1) turned FlashInfer's sampler off unless
VLLM_USE_FLASHINFER_SAMPLER=1, so ``TopKTopPSampler`` takes ``forward_native`` and ``apply_top_k_top_p`` sorts the
whole float32 logits (``logits.sort(dim=-1)``) at every batch size, until vllm-project/vllm#33538's Triton kernel
(0.17.0: ``apply_top_k_top_p_triton`` for 8 rows or more). ``_dummy_sampler_run`` calls the sampler once, with no
generator. The live set peaks inside torch's sort (pytorch/pytorch aten/src/ATen/native/cuda/SortStable.cu
``do_launch_stable_sort_kernel`` @061531e8, the index's copy; aten/src/ATen/cuda/cub.cuh ``segmented_sort_pairs``,
which calls cub's DeviceSegmentedRadixSort::SortPairs without a DoubleBuffer, so cub's temporary storage holds an
alternate copy of the keys and of the values): the 16-bit logits, their float32 copy, the sorted values (4 B) and
int64 indices (8 B), and the sort's own buffers, by its branch on the rows (segments):

- 128 rows or more, ``segmented_sort_pairs``: int64 reverse indices (8 B) + cub's alternates (4 + 8 B): 38 B an entry;
- 2 to 127 rows, ``segmented_sort_pairs_by_full_sort``: two int2 index-and-segment buffers (8 + 8 B), the radix
  sort's own keys output (4 B) and cub's alternates (4 + 8 B): 50 B an entry. vllm-project/vllm#33538's benchmark
  prints the PyTorch path at 78.50 MB for 48 x 32,768 float32 logits: 49.9 B an entry (MB as 10^6 B; 52.3 as
  2^20), against this reading's 48 B without the 16-bit logits the benchmark does not hold;
- one row, ``segmented_sort_large_segments``: int64 reverse indices of the row (8 B) + cub's alternates: 38 B.

Releases 0.8.4 to 0.11.0 sort too, as their wheels install (``fit --engine-version``; read in the PyPI wheels of 0.8.4,
0.8.5, 0.9.0, 0.9.2, 0.10.2 and 0.11.0): ``TopKTopPSampler.__init__`` takes ``forward_cuda`` (FlashInfer's sampling) only
where FlashInfer is importable, at 0.2.3 or later, and VLLM_USE_FLASHINFER_SAMPLER is not 0 (0.8.4 and 0.8.5 fall
back to ``forward_native`` at FlashInfer >= 0.2.3 whatever the variable); none of these wheels requires FlashInfer (no
Requires-Dist in 0.8.4, 0.8.5, 0.9.0 and 0.9.2; only under the extra ``flashinfer`` in 0.10.2 and 0.11.0), so a ``pip install
vllm`` samples by ``forward_native``: ``apply_top_k_top_p``'s ``logits.sort(dim=-1)`` on the float32 copy
(``Sampler.forward``), one ``_dummy_sampler_run`` call with no generator, after ``_dummy_run(max_num_tokens)``'s
``hidden_states[logit_indices]``, one row a dummy request (``num_reqs = min(num_tokens, max_num_seqs)``): the live set
above. An image that bundles FlashInfer (vllm/vllm-openai from 0.9.0) samples through it there, which is not priced.
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
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

# the releases whose masking sorts the logits at every batch size (module docstring): [first, last + 1); 0.8.4-0.11.0
# as their wheels install (no FlashInfer: OLD_WHEELS_SOURCE), 0.11.1-0.16.x whatever is installed (SORT_SOURCE)
SORT_RELEASES: tuple[Release, Release] = ((0, 8, 4), (0, 17, 0))
FLASHINFER_OFF_FROM: Release = (0, 11, 1)  # vllm-project/vllm#26859: FlashInfer's sampler off unless asked for
OLD_WHEELS_SOURCE = (
    "vllm 0.8.4 / 0.8.5 / 0.9.0 / 0.9.2 / 0.10.2 / 0.11.0 wheels (PyPI): vllm/v1/sample/ops/topk_topp_sampler.py "
    "TopKTopPSampler.__init__ (forward_cuda only where FlashInfer >= 0.2.3 is importable and "
    "VLLM_USE_FLASHINFER_SAMPLER is not 0; 0.8.4 / 0.8.5 fall back at >= 0.2.3), apply_top_k_top_p (logits.sort(dim=-1)); "
    "vllm/v1/worker/gpu_model_runner.py profile_run / _dummy_sampler_run (one call, no generator); the wheels' "
    "METADATA (no FlashInfer requirement; 0.10.2 / 0.11.0 only under the extra 'flashinfer'): the PyPI wheel's "
    "forward_native; an image bundling FlashInfer samples through it, not priced"
)
SORT_SOURCE = (
    "vllm 0.11.1 / 0.16.0 wheels (PyPI): vllm/v1/sample/ops/topk_topp_sampler.py TopKTopPSampler (forward_native "
    "unless VLLM_USE_FLASHINFER_SAMPLER=1, vllm-project/vllm#26859) and apply_top_k_top_p (logits.sort(dim=-1)), "
    "vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run (one sampler call, no generator); vllm 0.17.0's wheel: "
    "apply_top_k_top_p_triton from 8 rows (vllm-project/vllm#33538); pytorch/pytorch@061531e8 "
    "aten/src/ATen/native/cuda/SortStable.cu do_launch_stable_sort_kernel and aten/src/ATen/cuda/cub.cuh "
    "segmented_sort_pairs (cub DeviceSegmentedRadixSort::SortPairs, no DoubleBuffer: alternate keys and values)"
)
SORTED_F32 = 4  # the sorted values
SORTED_IDX = 8  # their int64 indices
CUB_ALTERNATES = 4 + 8  # cub's alternate keys (float32) and values (int64)


def sort_live_bytes_per_entry(rows: int) -> int:
    """Bytes an entry of [rows, vocab] live at the peak of a 0.11.1-0.16.x sampler warm-up (module docstring): the
    16-bit logits, their float32 copy, the sort's outputs and its own buffers by torch's branch on the rows."""
    if 1 < rows < 128:
        own = 8 + 8 + 4 + CUB_ALTERNATES  # by_full_sort: two int2 buffers, radix_sort_pairs' keys output
    else:
        own = 8 + CUB_ALTERNATES  # segmented_sort_pairs / _large_segments: int64 reverse indices
    return LOGITS_16BIT + LOGITS_F32 + SORTED_F32 + SORTED_IDX + own


def sampler_profile_peak(
    *, max_num_seqs: int, max_num_batched_tokens: int, vocab_size: int, release: Release | None = None
) -> tuple[int, int, str]:
    """(bytes, rows, how): the sampler warm-up's live [rows, vocab] tensors in vLLM's profile run (module
    docstring); 0 where a figure is missing. ``release``: the vLLM release the command runs (fit --engine-version;
    None: the code read at c621af16)."""
    rows = min(max_num_seqs, max_num_batched_tokens) if max_num_batched_tokens > 0 else max_num_seqs
    if rows <= 0 or vocab_size <= 0:
        return 0, 0, "no sampler warm-up priced (no max_num_seqs, max_num_batched_tokens or vocabulary)"
    sizing = f"{rows:,} rows (min(max_num_seqs {max_num_seqs:,}, max_num_batched_tokens {max_num_batched_tokens:,}))"
    if release is not None and SORT_RELEASES[0] <= release < SORT_RELEASES[1]:
        per = sort_live_bytes_per_entry(rows)
        peak = per * rows * vocab_size
        where = SORT_SOURCE if release >= FLASHINFER_OFF_FROM else f"{OLD_WHEELS_SOURCE}; {SORT_SOURCE}"
        return (
            peak,
            rows,
            (
                f"the sampler warm-up's {peak / GiB:.2f} GiB in vLLM {release_text(release)}: {sizing} x vocabulary "
                f"{vocab_size:,} x {per} B (16-bit logits, their float32 copy, and torch's sort of the top-k / top-p "
                f"mask: sorted values, int64 indices and its buffers; {where})"
            ),
        )
    peak = LIVE_BYTES_PER_ENTRY * rows * vocab_size
    unread = (
        f"; vLLM {release_text(release)} not read, priced as that code"
        if release is not None and release < SORT_RELEASES[0]
        else ""
    )
    how = (
        f"the sampler warm-up's {peak / GiB:.2f} GiB: {sizing} x vocabulary {vocab_size:,} x {LIVE_BYTES_PER_ENTRY} B "
        f"(16-bit logits, their float32 copy, float32 probs and noise live at once; {SAMPLER_SOURCE}{unread})"
    )
    return peak, rows, how
