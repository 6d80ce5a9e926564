"""The RoPE tables SGLang's DeepSeek-V4 / V4.1 attention layers build with the model, inside the load's "mem usage"
(engines/sglang/dsv4_buffers.py), read in the sglang 0.5.15 wheel (PyPI; models/deepseek_v4.py MQALayer.__init__,
layers/deepseek_v4_rope.py precompute_freqs_cis @lru_cache(2), layers/rotary_embedding factory.py get_rope /
rope_variant.py DeepseekScalingRotaryEmbedding / base.py RotaryEmbedding, models/deepseek_v4_nextn.py
COMPRESS_RATIO_NEXTN_LAYER = 0), the 0.5.21 wheel (MqaAttentionBase / MQALayer: the window-only layers without
YaRN; models/deepseek_v4_dspark.py DSparkAttention) and the 0.5.23 wheel (kernels/ops/attention/dsv4/rope.py
precompute_cos_sin_table under flashmla_mega). A table at 1,048,576 positions and 64 RoPE dims: freqs_cis complex64
[1,048,576, 32] = 256 MiB, cos_sin_cache float32 [1,048,576, 64] = 256 MiB."""

from __future__ import annotations

import msgspec
import pytest

from k3plan.engines.sglang.dsv4_buffers import sglang_dsv4_model_buffers, sglang_wo_a_bf16
from k3plan.engines.sglang.memory import sglang_kv_pool
from k3plan.models.loader import load_model

MIB = 2**20
GIB = 2**30


@pytest.fixture(scope="module")
def dims():
    return {m: load_model(m).spec.dsv4 for m in ("deepseek-v4-pro", "deepseek-v4-flash", "deepseek-v4.1-flash")}


def test_one_pair_of_tables_a_class_of_layers(dims):
    """V4-Pro's decoder has compressed layers only (its config's last ratio, 0, is the MTP layer's): one pair, 512
    MiB; V4-Flash has window-only layers too: two pairs, 1 GiB; V4.1-Flash (0.5.21) likewise, its window-only layers'
    cos_sin_cache the plain RoPE's over max_position_embeddings (also 1,048,576 positions)."""
    pro = sglang_dsv4_model_buffers(dims["deepseek-v4-pro"], release=(0, 5, 15), vendor="nvidia")
    assert pro[:2] == (512 * MIB, 0) and "compressed (compress_rope_theta)" in pro[2]
    assert sglang_dsv4_model_buffers(dims["deepseek-v4-flash"], release=None, vendor="nvidia")[0] == GIB
    assert sglang_dsv4_model_buffers(dims["deepseek-v4.1-flash"], release=(0, 5, 21), vendor="nvidia")[0] == GIB


def test_the_nextn_draft_builds_tables_only_where_the_target_has_no_window_only_layer(dims):
    """The NextN layer is window-only (rope_theta) and built in the target's process: V4-Pro's draft builds its own
    pair (512 MiB: the MTP case's draft, 2.52 GiB of parameters, logs 3.07), V4-Flash's takes the target's. DSpark's
    attention (MqaAttentionBase) builds a freqs_cis only, and V4.1's target has window-only layers: none of its own."""
    assert sglang_dsv4_model_buffers(dims["deepseek-v4-pro"], release=(0, 5, 15), vendor="nvidia", draft="EAGLE")[
        :2
    ] == (512 * MIB, 512 * MIB)
    assert (
        sglang_dsv4_model_buffers(dims["deepseek-v4-flash"], release=(0, 5, 15), vendor="nvidia", draft="EAGLE")[1] == 0
    )
    v41 = sglang_dsv4_model_buffers(dims["deepseek-v4.1-flash"], release=(0, 5, 21), vendor="nvidia", draft="DSPARK")
    assert v41[:2] == (GIB, 0)
    # were a DSpark draft beside compressed layers only, its freqs_cis alone (no get_rope in MqaAttentionBase)
    pro_only = sglang_dsv4_model_buffers(dims["deepseek-v4-pro"], release=(0, 5, 21), vendor="nvidia", draft="DSPARK")
    assert pro_only[1] == 256 * MIB


def test_the_release_forms(dims):
    """0.5.12: no get_rope in MQALayer, freqs_cis alone; from 0.5.18 the window-only layers' cos_sin_cache spans
    max_position_embeddings (the plain RoPE), before it YaRN's original x factor; 0.5.23's flashmla_mega adds a float32
    mega_cos_sin_cache a class, and only from 0.5.23."""
    pro, flash = dims["deepseek-v4-pro"], dims["deepseek-v4-flash"]
    assert sglang_dsv4_model_buffers(pro, release=(0, 5, 12), vendor="nvidia")[0] == 256 * MIB
    short = msgspec.structs.replace(flash, max_position=65_536)  # positions the two forms tell apart
    freqs = 65_536 * 32 * 8
    yarn, plain = 1_048_576 * 64 * 4, 65_536 * 64 * 4
    assert sglang_dsv4_model_buffers(short, release=(0, 5, 17), vendor="nvidia")[0] == 2 * freqs + 2 * yarn
    assert sglang_dsv4_model_buffers(short, release=(0, 5, 18), vendor="nvidia")[0] == 2 * freqs + yarn + plain
    v41 = dims["deepseek-v4.1-flash"]
    assert sglang_dsv4_model_buffers(v41, release=(0, 5, 23), vendor="nvidia", mega=True)[0] == GIB + 512 * MIB
    assert sglang_dsv4_model_buffers(v41, release=(0, 5, 21), vendor="nvidia", mega=True)[0] == GIB


def test_not_priced_off_nvidia(dims):
    """ROCm's per-layer bf16 cos_cache / sin_cache were not checked against a log: nothing priced there, said so."""
    got = sglang_dsv4_model_buffers(dims["deepseek-v4-pro"], release=(0, 5, 15), vendor="amd", draft="EAGLE")
    assert got[:2] == (0, 0) and "not priced" in got[2]


def test_the_pool_takes_them_with_the_weights():
    """sglang_kv_pool counts the tables in the weights SGLang logs and sizes the pool after them."""
    kw = dict(
        mem_fraction_static=0.9,
        visible_bytes=100 * GIB,
        visible_source="test",
        weights_bytes=50 * GIB,
        state_pool_bytes=0,
        state_source="",
        kv_bytes_per_token=1024,
        max_model_len=4096,
        max_running_requests=None,
    )
    plain = sglang_kv_pool(**kw)
    more = sglang_kv_pool(**kw, buffers=(512 * MIB, "RoPE tables (test)"))
    assert more.weights_bytes.value == plain.weights_bytes.value + 512 * MIB
    assert plain.kv_pool_bytes.value - more.kv_pool_bytes.value == 512 * MIB
    assert "RoPE tables (test)" in more.weights_bytes.source


def test_v41_wo_a_is_held_in_bf16():
    """V4.1's checkpoint blocks are [32, 32], so SGLang dequantizes wo_a to bf16 at load (wo_a_fp8_gemm_enabled: 128 x
    128 only, sglang 0.5.21 wheel): 40 layers of [8,192, 4,096], 67,108,864 B in bf16 against 33,587,200 in fp8 with
    E8M0 a [32, 32] block, over attention TP 4: 335,216,640 B a GPU more. V4's own fp8 ([128, 128]) stays fp8."""
    v41 = load_model("deepseek-v4.1-flash").inventory.text
    got, how = sglang_wo_a_bf16(v41, attn_tp=4)
    assert got == 40 * (67_108_864 - 33_587_200) // 4 and "40 layers" in how
    assert sglang_wo_a_bf16(load_model("deepseek-v4-pro").inventory.text, attn_tp=8) == (0, "")
