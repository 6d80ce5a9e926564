"""Under --pp vLLM groups the whole model's layers (merged over every stage), then each stage keeps its own
layers of every global group: a block costs the stage's largest group's layer count in pages, for KV and state
alike (vllm-project/vllm@001cabc1 vllm/v1/core/kv_cache_utils.py get_kv_cache_configs,
_get_kv_cache_groups_uniform_page_size, _project_kv_cache_groups_to_worker, get_kv_cache_config_from_groups).
k3plan grouped each stage's layers on their own: stage 1 of K3 at pp 2 (11 MLA, 36 KDA) held 44 state pages."""

from __future__ import annotations

from k3plan.budget.fit import Workload, fit
from k3plan.setup import make_setup
from k3plan.step.memory import held_layers

# K3 on 16 H200 at pp 2: 8 a stage, tp 8. A KDA layer a GPU: 96 / 8 = 12 heads: 12 x 128 x 128 f32 + (4 - 1) x
# (q, k, v: 3 x 12 x 128) bf16 = 786,432 + 27,648 = 814,080 B; block 64 x ceil(814,080 / (64 x 1,152)) = 768
# tokens, page 768 x 1,152 B (576 bf16 values an MLA layer a token) = 884,736 B
PAGE = 768 * 1152
# whole model: 24 MLA, 69 KDA -> group size 24: MLA 1 group, KDA 3 groups of 23 (layers [i::3]);
# stage 1 (layers 0-46): 11 MLA, KDA 0-35 = 12 of each KDA group -> 12 pages a block
# stage 2 (layers 47-92): 13 MLA, KDA 36-68 = 11 of each -> 13 pages a block


def test_held_layers_group_the_whole_model():
    assert held_layers(24, 69, True) == (24, 72)  # pp 1: unchanged
    assert held_layers(11, 36, True, 24, 69) == (12, 36)  # pp 2 stage 1 (was 11 KV, 4 x 11 = 44 state pages)
    assert held_layers(13, 33, True, 24, 69) == (13, 39)  # pp 2 stage 2
    assert held_layers(5, 18, True, 24, 69) == (6, 18)  # pp 4 stage 1: KDA 0-17, 6 of each group
    assert held_layers(11, 36, False, 24, 69) == (11, 36)  # no layer groups (SGLang)


def test_vllm_pp2_binding_stage_holds_whole_model_groups():
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, dp=1, pp=2, stack="vllm")
    r = fit(setup, Workload(context_tokens=8192, batch=4))
    assert r.cache_layout.page_bytes == PAGE == 884_736
    assert (r.cache_layout.n_mla, r.cache_layout.n_kda) == (11, 36)  # stage 1 binds
    assert r.per_device.state_bytes_per_sequence == 36 * PAGE == 31_850_496  # was 44 pages: 38,928,384
    assert r.per_device.kv_bytes_per_token == 12 * 1152 == 13_824  # was 11 x 1,152 = 12,672
    blocks = -(-8192 // 768)  # 11 blocks of 768 tokens
    assert r.per_device.kv_bytes == 4 * 12 * blocks * 768 * 1152 == 467_140_608
    assert "a block holds 12 MLA layer pages" in r.provenance.kv
