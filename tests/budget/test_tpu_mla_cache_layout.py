"""The padded MLA cache entry (torchtpu-vllm and tpu-inference, kv_cache.layout): KVCacheManager.get_kv_cache_spec pads
the latent (kv_lora_rank 512) and the rope part (qk_rope_head_dim 64) each to a multiple of 128 unless
MLA_TRANSPOSE_KV_CACHE is set, and the MLA kernel's get_kv_cache_shape keeps that width: 640 values a token a
MLA layer, not 576 (tpu-inference @811f8e20 and @b8692ff0 alike). The figures below are hand arithmetic from
K3's config (24 MLA layers, 69 KDA layers of 96 heads x 128 x 128 f32 recurrent state and 3 past tokens of
q, k, v (3 x 12288) bf16 for the short conv) at 2x2x4, TP 32, 131,072 tokens."""

from __future__ import annotations

import pytest
from fit_helpers import cached_setup, run_fit, transposed_torchtpu_stack

from k3plan.engines.stack import load_stack
from k3plan.errors import K3PlanError

# one MLA layer, one token, bf16, whole latent on every TP rank: (512 + 128) x 2 B
KV_LAYER = (512 + 128) * 2  # 1,280 B
KV_TOKEN = 24 * KV_LAYER  # 30,720 B a token a device (576 values: 27,648 B)
# one KDA layer's state, a device: (96 x 128 x 128 x 4 B + 3 x 3 x 12288 x 2 B) / 32 heads-split
STATE_LAYER = (96 * 128 * 128 * 4 + 3 * 3 * 12288 * 2) // 32  # 203,520 B
# the torch_tpu plugin's own page (the torchtpu-vllm stack's paging): 16 tokens, the state kept apart, unpadded, in
# 72 layer pages a slot (3 KDA groups of 23 over 24 layer regions: kv_cache_manager.py @15e5264a)
BLOCK = 16
KV_131K = -(-131072 // BLOCK) * BLOCK * KV_TOKEN  # 8,192 blocks = 131,072 tokens x 30,720 B
STATE_SEQ = 72 * STATE_LAYER  # one slot, 72 KDA layer pages


def test_vllm_tpu_2x2x4_tp32_kv_and_state_at_131072_tokens_by_hand():
    assert (KV_TOKEN, BLOCK, STATE_LAYER) == (30_720, 16, 203_520)
    assert (KV_131K, STATE_SEQ) == (4_026_531_840, 14_653_440)
    r = run_fit(cached_setup(topology="2x2x4", tp=32))
    lay = r.cache_layout
    assert (lay.kv_bytes_per_token_layer, lay.block_tokens, lay.page_bytes) == (KV_LAYER, BLOCK, None)
    assert r.per_device.kv_bytes_per_token == r.model_state.kv_bytes_per_token == KV_TOKEN
    assert r.per_device.kv_bytes == KV_131K
    assert r.per_device.state_bytes == r.per_device.state_bytes_per_sequence == STATE_SEQ
    assert "24 MLA layers x 640 values" in r.provenance.kv


def test_mla_transpose_kv_cache_stores_576_values():
    st = load_stack("tpu-inference:mla_transpose_kv_cache=1")
    # tpu-inference runs attention TP only under DP attention: the 576-value entry on a head-parallel TP
    # deployment is torchtpu-vllm's stack with that entry (fit_helpers.transposed_torchtpu_stack)
    s = cached_setup(topology="2x2x4", tp=32, stack=transposed_torchtpu_stack())
    r = run_fit(s)
    assert st.kv_cache.layout is not None and st.kv_cache.layout.rope_align == 1
    assert r.model_state.kv_bytes_per_token == 24 * (512 + 64) * 2 == 27_648
    # 16-token pages and the unpadded state slots, whatever the entry's width
    assert r.per_device.kv_bytes == 131_072 * 27_648
    assert r.per_device.state_bytes == 72 * STATE_LAYER
    # the engine's default is the padded one, and the option says so
    opt = load_stack("tpu-inference").options["mla_transpose_kv_cache"]
    assert (opt.flag, opt.default) == ("MLA_TRANSPOSE_KV_CACHE", "0")
    assert load_stack("tpu-inference:mla_transpose_kv_cache=0").kv_cache == load_stack("tpu-inference").kv_cache
    # a choice replaces the other's layout
    assert st.with_options(mla_transpose_kv_cache="0").kv_cache == load_stack("tpu-inference").kv_cache
    with pytest.raises(K3PlanError, match=r"\(MLA_TRANSPOSE_KV_CACHE\) 'yes': expected one of 0, 1"):
        load_stack("tpu-inference:mla_transpose_kv_cache=yes")


def test_only_vllm_tpu_pads_the_mla_entry():
    for name in ("vllm", "sglang", "jax-native", "dp-attention"):
        assert load_stack(name).kv_cache.layout is None, name
