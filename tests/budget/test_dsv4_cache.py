"""DeepSeek-V4's cache: classical (growable), state (fixed), the engines' layouts, and the comparison with V3.

Hand-derived figures (from config.json and the engines' code, cited in k3plan/step/dsv4_cache.py):
- an entry is 448 fp8 + 64 bf16 + 448/64 scale bytes + 1 pad = 584 B; an indexer key 128 + 4 = 132 B;
- Flash: 21 CSA layers x (584 + 132) / 4 + 20 HCA x 584 / 128 = 3,759 + 91.25 = 3,850.25 B a token;
- Pro: 30 CSA x 179 + 31 HCA x 4.5625 = 5,370 + 141.4375 = 5,511.4375 B a token.
Published (the DeepSeek-V4 model cards, quoted in issue #37's public facts): the KV cache at 1M tokens is
about 10% of DeepSeek-V3.2's.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from k3plan.engines.dsv4_layout import EntrySizes
from k3plan.engines.registry import engines
from k3plan.engines.sglang.dsv4 import LAYOUT as SGLANG
from k3plan.engines.torchtpu_vllm.dsv4 import LAYOUT as TORCHTPU_VLLM
from k3plan.engines.vllm.dsv4 import LAYOUT as VLLM
from k3plan.models import load_model
from k3plan.step import dsv4_cache as c

M = 1 << 20


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash").spec


@pytest.fixture(scope="module")
def pro():
    return load_model("deepseek-v4-pro").spec


def test_entry_and_indexer_bytes(flash, pro):
    for spec in (flash, pro):
        for layout in (VLLM, SGLANG):
            assert layout.sizes(spec.dsv4) == EntrySizes(csa=584, hca=584, window=584, index=132)
        # the torch_tpu plugin's own records (engines/torchtpu_vllm/dsv4.py): its CSA record packed to 128 B
        # (get_packed_mla_head_size: align_to(448 + 128 + 7, 128)), HCA's and the window's raw bf16 (512 x 2), its
        # indexer key align_to(128 + 1, 128)
        assert TORCHTPU_VLLM.sizes(spec.dsv4) == EntrySizes(csa=640, hca=1024, window=1024, index=256)
        assert TORCHTPU_VLLM.entry_bytes(spec.dsv4) == 584  # the fp8 record it pads


def test_kv_bytes_per_token_exact(flash, pro):
    assert c.kv_bytes_per_token(flash) == Fraction(385025, 100)
    assert c.kv_bytes_per_token(pro) == Fraction(55114375, 10000)
    # SGLang stores vLLM's records; the registry serves the three engines' layouts
    assert c.kv_bytes_per_token(pro, SGLANG) == c.kv_bytes_per_token(pro)
    assert {e.dsv4.engine for e in engines()} >= {"vllm", "sglang", "torchtpu-vllm"}
    # the torch_tpu plugin: 21 x (640 + 256) / 4 + 20 x 1,024 / 128 = 4,704 + 160; Pro 30 x 224 + 31 x 8
    assert c.kv_bytes_per_token(flash, TORCHTPU_VLLM) == 4864
    assert c.kv_bytes_per_token(pro, TORCHTPU_VLLM) == 6968
    # values a token from the config alone: 21 x (512 + 128) / 4 + 20 x 512 / 128 = 3,360 + 80
    assert c.compressed_values_per_token(flash) == 3440


def test_classical_is_complete_blocks(flash):
    assert c.classical_bytes(flash, 3) == 0
    assert c.classical_bytes(flash, 4) == 21 * (584 + 132)
    assert c.classical_bytes(flash, 128) == 21 * 32 * 716 + 20 * 584
    assert c.classical_bytes(flash, M) == M * c.kv_bytes_per_token(flash)  # 1M divides by 128


def test_state_is_fixed(flash, pro):
    s = c.state_terms(flash)
    assert s.window_bytes == 43 * 128 * 584
    # CSA: 8 tokens x 2 (kv, score) x 2 x 512 x f32; HCA: 128 x 2 x 512 x f32; CSA indexer: 8 x 2 x 2 x 128 x 4
    assert s.compressor_bytes == 21 * 8 * 2 * 1024 * 4 + 20 * 128 * 2 * 512 * 4
    assert s.indexer_compressor_bytes == 21 * 8 * 2 * 256 * 4
    assert c.sequence_bytes(flash, M) - c.classical_bytes(flash, M) == s.total
    # SGLang keeps a longer ring under speculative decoding (16 / 256)
    assert c.state_bytes(pro, SGLANG, speculative=True) > c.state_bytes(pro, SGLANG)
    assert c.state_bytes(pro, VLLM, speculative=True) == c.state_bytes(pro, VLLM)


def test_the_plugin_s_records_in_memory_and_in_the_step(flash):
    """The torch_tpu plugin's records reach the fixed state (its raw bf16 window) and what a decode step reads: one
    layout for memory and speed (issue 47 item 1)."""
    assert c.state_terms(flash, TORCHTPU_VLLM).window_bytes == 43 * 128 * 1024
    r = c.decode_read(flash, M, TORCHTPU_VLLM)
    assert r.indexer_bytes == 21 * (M // 4) * 256
    assert r.csa_bytes == 21 * (512 * 640 + 128 * 1024)
    assert r.hca_bytes == 20 * (M // 128 + 128) * 1024
    assert r.window_bytes == 2 * 128 * 1024
    from k3plan.step import dsv4_ops

    for z, lay in ((None, VLLM), (TORCHTPU_VLLM.sizes(flash.dsv4), TORCHTPU_VLLM)):
        ops = [o for o in dsv4_ops.decode_ops(flash, seqs=3, context=M, tp=1, sizes=z) if o.category == "kv"]
        assert sum(o.count * o.bytes_read for o in ops) == 3 * c.decode_read(flash, M, lay).total


def test_decode_reads_less_than_it_holds(flash):
    r = c.decode_read(flash, M)
    assert r.indexer_bytes == 21 * (M // 4) * 132
    assert r.csa_bytes == 21 * (512 + 128) * 584
    assert r.hca_bytes == 20 * (M // 128 + 128) * 584
    assert r.window_bytes == 2 * 128 * 584
    assert r.total < c.classical_bytes(flash, M) / 4


def test_per_layer_ceil_overstates_by_under_a_byte_a_layer(flash, pro):
    for spec in (flash, pro):
        n = spec.num_layers
        ceil = c.per_layer_kv_bytes_ceil(spec)
        assert 0 <= ceil * n - c.kv_bytes_per_token(spec) < n


def test_about_a_tenth_of_v32_at_1m(flash, pro):
    """V3.2 = V3's 61 MLA layers in vLLM's fp8_ds_mla (656 B) plus its indexer's 132 B key a layer a token."""
    v3 = load_model("deepseek-v3").spec
    v32 = v3.n_mla * (656 + 132)
    assert v32 == 48_068
    for spec in (flash, pro):
        ratio = c.sequence_bytes(spec, M) / (v32 * M)
        assert 0.07 < ratio < 0.13, ratio


def test_engine_layouts_cited():
    for name, layout in {e.dsv4.engine: e.dsv4 for e in engines()}.items():
        assert layout.sources, name
        for s in layout.sources:
            assert s.repo and s.file and s.symbol
            assert (len(s.commit) == 40 and s.found) or (not s.found and s.note)
    assert {s.repo for s in VLLM.sources} == {"vllm-project/vllm"}
    assert {s.repo for s in SGLANG.sources} == {"sgl-project/sglang"}
    assert any(not s.found for s in TORCHTPU_VLLM.sources)  # its TPU backend's own layout: not found
    assert c.layout_for_stack("sglang") is SGLANG and c.layout_for_stack("vllm-tpu") is TORCHTPU_VLLM
    # jax-native: vLLM's layout without vLLM's CUDA planner for DeepSeek-V4.1 (its graph is not vLLM's)
    assert c.layout_for_stack("jax-native") == replace(VLLM, request_charge=None) and VLLM.request_charge is not None


def test_not_v4_raises():
    with pytest.raises(ValueError):
        c.kv_bytes_per_token(load_model("deepseek-v3").spec)


def test_stack_state_follows_the_engine_and_speculation(flash):
    from k3plan.engines.stack import load_stack
    from k3plan.step.cache import fixed_state_bytes

    sglang = load_stack("sglang")
    assert fixed_state_bytes(flash, sglang) == c.state_bytes(flash, SGLANG)
    spec_stack = sglang.for_spec_decode(2)
    assert spec_stack.state.verify_tokens == 2
    assert fixed_state_bytes(flash, spec_stack) == c.state_bytes(flash, SGLANG, speculative=True)
    assert fixed_state_bytes(load_model("deepseek-v3").spec, sglang) == 0
