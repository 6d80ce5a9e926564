"""vLLM's sampler warm-up in the profile run (k3plan.engines.vllm.sampler): the rule read in the engine's code,
its rows, and where it enters the activation the worker subtracts."""

from __future__ import annotations

import json

from k3plan.engines.vllm.sampler import sampler_profile_peak

V4_VOCAB = 129_280  # DeepSeek-V4's config.json vocab_size


def test_four_full_vocabulary_tensors_a_dummy_request():
    """_dummy_run gives min(max_num_batched_tokens, max_num_seqs) logits rows; at the second sampler call the
    16-bit logits, their float32 copy, float32 probs and the noise q are live: 14 B an entry."""
    peak, rows, how = sampler_profile_peak(max_num_seqs=1024, max_num_batched_tokens=8192, vocab_size=V4_VOCAB)
    assert rows == 1024 and peak == (2 + 4 + 4 + 4) * 1024 * V4_VOCAB
    assert "c621af16" in how and "forward_native" in how
    # the chunk caps the rows (recipes#381's hopper override: 512 tokens, 512 sequences)
    assert sampler_profile_peak(max_num_seqs=4096, max_num_batched_tokens=512, vocab_size=V4_VOCAB)[1] == 512
    assert sampler_profile_peak(max_num_seqs=32, max_num_batched_tokens=8192, vocab_size=0)[0] == 0


def _engine(cli, serve: str) -> dict:
    return json.loads(cli("fit", "-H", "nvidia-h20", "-t", "2", "--serve", serve, "--json").stdout)["engine"]


def test_the_peak_is_the_larger_of_forward_and_sampler_not_their_sum(cli):
    """At vLLM's default 1,024 sequences on an H20 the sampler's 1.73 GiB outweighs the dummy forward's live set at
    2,048-token chunks (0.50 GiB: engines/vllm/dsv4_workspace.py dsv4_forward_live) and replaces it in the activation;
    at 32 sequences (58 MB) the forward stands."""
    base = (
        "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 2 --kv-cache-dtype fp8 --block-size 256 "
        "--max-model-len 121344 --max-num-batched-tokens 2048"
    )
    wide, narrow = _engine(cli, base), _engine(cli, base + " --max-num-seqs 32")
    assert "sampler warm-up" in wide["sources"]["activation"]
    gap = wide["activation_bytes"] - narrow["activation_bytes"]
    sampler = sampler_profile_peak(max_num_seqs=1024, max_num_batched_tokens=2048, vocab_size=V4_VOCAB)[0]
    assert 0 < gap < sampler  # the larger one, not a sum
    # the pools differ by the activation and by the CUDA-graph estimate (1,024 sequences capture more graphs)
    graphs = wide["non_torch_bytes"] - narrow["non_torch_bytes"]
    assert graphs > 0
    assert narrow["kv_pool_bytes"] - wide["kv_pool_bytes"] == gap + graphs
