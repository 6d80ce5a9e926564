"""KV cache and KDA state (k3-facts.md §3): per token / per sequence, crossover, hybrid paging.

Expected values are derived from the config numbers and the formulas in k3-facts.md §3, with the
published figures asserted next to them.
"""

from __future__ import annotations

import math

import pytest
from fit_helpers import cached_setup, run_fit, transposed_torchtpu_stack

from k3plan.engines.stack import load_stack
from k3plan.models import load_model
from k3plan.sharding import make_mesh
from k3plan.step.cache import (
    cache_layout,
    kv_bytes_per_token,
    kv_bytes_per_token_layer,
    kv_state_crossover_tokens,
    state_bytes_per_layer,
    state_bytes_per_slot,
)

K3 = load_model("kimi-k3").spec


def fp8_stack():
    """tpu-inference with fp8 KV (1 B a value); recurrent state fp32, conv state bf16 (the seed table's dtypes); the
    576 values a token a MLA layer as k3-facts.md §3 counts them (MLA_TRANSPOSE_KV_CACHE=1: tpu-inference's
    default pads the rope part to 640, tests/budget/test_tpu_mla_cache_layout.py)."""
    st = load_stack("tpu-inference:mla_transpose_kv_cache=1").with_kv_dtype("fp8")
    assert (st.state.recurrent_dtype, st.state.conv_dtype) == ("f32", "bf16")
    return st


def test_deepseek_v3_kv_bf16_is_70272_bytes_a_token():
    ds = load_model("deepseek-v3").spec
    assert kv_bytes_per_token(ds, "bf16") == 61 * (512 + 64) * 2 == 70_272
    # vLLM on the GPU stores the 576 values as they are
    r = run_fit(cached_setup(model="deepseek-v3", hardware="nvidia-h200", topology="8", stack="vllm", kv_dtype="bf16"))
    assert r.model_state.kv_bytes_per_token == 70_272
    assert r.model_state.state_bytes_per_sequence == 0
    # tpu-inference pads the rope part to 128 lanes (its kv_cache.layout): 61 x (512 + 128) x 2
    r = run_fit(cached_setup(model="deepseek-v3", hardware="nvidia-h200", topology="8", kv_dtype="bf16"))
    assert r.model_state.kv_bytes_per_token == 61 * (512 + 128) * 2 == 78_080


def test_k3_state_and_kv_from_the_config():
    assert (K3.n_mla, K3.n_kda) == (24, 69)
    assert K3.mla.cache_values_per_token == 512 + 64
    st = fp8_stack()
    recurrent = 96 * 128 * 128 * 4  # [heads, head_dim, head_dim] fp32
    conv = 3 * (4 - 1) * 12288 * 2  # (kernel-1) past tokens of q, k, v, bf16
    assert state_bytes_per_layer(K3, st) == recurrent + conv
    assert state_bytes_per_slot(K3, st) == 69 * (recurrent + conv) == 449_372_160
    assert kv_bytes_per_token(K3, "fp8") == 24 * 576 == 13_824
    assert kv_bytes_per_token_layer(K3, "fp8_ds_mla") == 512 + 4 * 4 + 64 * 2 == 656


@pytest.mark.parametrize(
    "context, mla_gb, total_gb",
    [
        (4_096, 0.057, 0.51),
        (131_072, 1.812, 2.26),
        (1_048_576, 14.496, 14.94),
    ],
)
def test_k3_seed_table_per_sequence(context, mla_gb, total_gb):
    """k3-facts.md §3 seed table, GB = 1e9 B, exact to the published decimals."""
    st = fp8_stack()
    kv = context * kv_bytes_per_token(K3, st.kv_cache.dtype)
    state = state_bytes_per_slot(K3, st)
    assert round(kv / 1e9, 3) == mla_gb
    assert round(state / 1e9, 3) == 0.449
    assert round((kv + state) / 1e9, 2) == total_gb


def test_k3_crossover_fp8_is_32507_tokens():
    x = kv_state_crossover_tokens(K3, fp8_stack())
    assert abs(x - 32_507) <= 1
    # where KV really overtakes: the first whole token count whose KV exceeds the state
    n = math.ceil(x)
    assert n * 13_824 >= 449_372_160 > (n - 1) * 13_824
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack=transposed_torchtpu_stack(), kv_dtype="fp8"))
    assert abs(r.capacity.kv_state_crossover_tokens - 32_507) <= 1
    # the padded MLA v2 entry (torchtpu-vllm's default), 640 values: 449,372,160 / (24 x 640 x 1 B)
    r = run_fit(cached_setup(topology="2x2x4", tp=32, kv_dtype="fp8"))
    assert r.capacity.kv_state_crossover_tokens == 449_372_160 / (24 * 640) == 29_256


def test_hybrid_paging_at_tp32():
    """vLLM hybrid allocator at tp=32 (the GPU vllm stack, as 0.26.0 runs it): block = 64 * ceil(state_page / (64 *
    mla_bytes_per_token)), per layer per device; the state page is padded up to the attention page. From 0.27.0
    (the default release) the alignment is 128 for a hybrid MLA model (engines/vllm/releases.py hybrid_mla_align)."""
    newest = cache_layout(spec=K3, stack=load_stack("vllm"), parallel=make_mesh(devices=32, tp=32)[1])
    assert newest.block_tokens == 128 * math.ceil(newest.state_bytes_per_layer_unpadded / (128 * 1_152)) == 256
    st = load_stack("vllm").with_engine_release((0, 26, 0))
    _, par = make_mesh(devices=32, tp=32)
    lay = cache_layout(spec=K3, stack=st, parallel=par)
    mla_tok = (512 + 64) * 2  # bf16, whole latent on every TP rank
    state_page = (K3.kda.recurrent_values * 4 + K3.kda.conv_values * 2) // 32  # split by heads
    block = 64 * math.ceil(state_page / (64 * mla_tok))
    assert (mla_tok, state_page, block, block * mla_tok) == (1_152, 203_520, 192, 221_184)
    assert lay.kv_bytes_per_token_layer == mla_tok
    assert lay.state_bytes_per_layer_unpadded == state_page
    assert lay.block_tokens == block
    assert lay.page_bytes == block * mla_tok
    assert lay.state_bytes_per_layer == block * mla_tok  # padded up from 203,520
    # KV allocated in whole blocks: 131,072 tokens -> 683 blocks of 192
    assert lay.kv_bytes(131_072) == 24 * math.ceil(131_072 / block) * block * mla_tok


def test_torchtpu_vllm_pages_its_own_16_tokens_and_keeps_the_state_apart():
    """The torch_tpu plugin's per-layer layout (engines/torchtpu_vllm/stack.yaml paging): a 16-token page
    (cache_config.block_size; upstream's hybrid block growth is not run), the KDA state in unpadded slots apart
    (kv_cache_manager.py _maybe_set_compact_mamba_num_blocks_override @15e5264a), 72 layer pages a slot."""
    st = load_stack("vllm-tpu")
    _, par = make_mesh(devices=32, tp=32)
    lay = cache_layout(spec=K3, stack=st, parallel=par)
    state_page = (K3.kda.recurrent_values * 4 + K3.kda.conv_values * 2) // 32
    assert (lay.block_tokens, lay.page_bytes, lay.paging) == (16, None, "separate")
    assert lay.state_bytes_per_layer == lay.state_bytes_per_layer_unpadded == state_page == 203_520
    r = run_fit(cached_setup(topology="2x2x4", tp=32))
    assert r.cache_layout.block_tokens == 16
    assert r.per_device.state_bytes == 72 * 203_520  # 3 KDA groups of 23 over 24 layer regions
    assert r.per_device.kv_bytes == lay.kv_bytes(131_072) == 24 * 131_072 * 1_280
    assert r.capacity.memory_context_tokens % 16 == 0


def test_separate_pools_do_not_pad_state():
    """sglang sizes the KV pool and the state pool separately: no padding, token-granular KV."""
    st = load_stack("sglang")
    _, par = make_mesh(devices=8, tp=8)
    lay = cache_layout(spec=K3, stack=st, parallel=par)
    assert lay.page_bytes is None and lay.block_tokens == 1
    assert lay.state_bytes_per_layer == lay.state_bytes_per_layer_unpadded == state_bytes_per_layer(K3, st) // 8


def test_state_not_split_when_heads_do_not_divide():
    st = load_stack("vllm-tpu")
    _, par = make_mesh(devices=64, tp=64)
    lay = cache_layout(spec=K3, stack=st, parallel=par)
    assert lay.state_bytes_per_layer_unpadded == state_bytes_per_layer(K3, st)
