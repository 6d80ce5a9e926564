"""Pipeline parallelism (issue 18 B.2): which layers a stage holds, its per-device bytes, the stage
that binds, and the stage-to-stage sends -- every figure written out by hand here from K3's config
(docs/k3-facts.md: hidden 7168, 93 layers kkkM x 23 + M, 96 heads x 128, MLA q_lora 1536 / kv_lora
512 + rope 64, 896 experts of 3072 x 3584 in MXFP4, shared expert 6144, vocab 163,840)."""

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.errors import K3PlanError
from k3plan.setup import make_setup
from k3plan.step.stages import stage_bounds

GiB = 2**30
BF16 = 2


def test_stage_bounds_follow_each_engine():
    # vLLM get_pp_indices: the remainder one each counting back from the second-to-last stage;
    # vLLM's own documented examples: 22 layers / 4 -> [5, 6, 6, 5], 5 / 3 -> [2, 2, 1], 3 / 2 -> [2, 1]
    sizes = lambda b: [e - s for s, e in b]  # noqa: E731
    assert sizes(stage_bounds(22, 4, "before_last")) == [5, 6, 6, 5]
    assert sizes(stage_bounds(5, 3, "before_last")) == [2, 2, 1]
    assert sizes(stage_bounds(3, 2, "before_last")) == [2, 1]
    # SGLang get_pp_indices: the last (L mod pp) stages one more
    assert sizes(stage_bounds(22, 4, "last")) == [5, 5, 6, 6]
    # K3's 93 layers at pp 2: vLLM [0, 47) + [47, 93); SGLang [0, 46) + [46, 93)
    assert stage_bounds(93, 2, "before_last") == ((0, 47), (47, 93))
    assert stage_bounds(93, 2, "last") == ((0, 46), (46, 93))
    with pytest.raises(K3PlanError, match="--pp 94"):
        stage_bounds(93, 94)


# One layer's bytes a device at TP 8 under the vllm stack (heads, MLPs, vocab over TP; router, MLA
# down-projections, KDA f_a_proj and the latent projections replicated; experts over EP 8).
H, QKV, TP = 7168, 96 * 128, 8
NORMS = 3 * H * BF16  # input/post-attention norm + the attention-residual norm and projection (1 x 7168)
KDA_LAYER = (
    5 * QKV * H * BF16 // TP  # q, k, v, g and o projections
    + 96 * H * BF16 // TP  # b_proj (column-parallel)
    + 128 * H * BF16  # f_a_proj, replicated
    + QKV * 128 * BF16 // TP  # f_b_proj
    + 3 * QKV * 4 * 4 // TP  # q/k/v short convolutions, kernel 4, f32
    + 128 * 4  # o_norm, f32
    + 128 * 4  # A_log, f32 (per-head-dim vector, not split)
    + QKV * 4 // TP  # dt_bias, f32
    + NORMS
)
MLA_LAYER = (
    2 * QKV * H * BF16 // TP  # g_proj and o_proj
    + 1536 * H * BF16  # q_a_proj, replicated
    + 1536 * BF16  # q_a_layernorm
    + 96 * 192 * 1536 * BF16 // TP  # q_b_proj: 96 heads x (128 nope + 64 rope)
    + 576 * H * BF16  # kv_a_proj_with_mqa (512 latent + 64 rope), replicated
    + 512 * BF16  # kv_a_layernorm
    + 96 * 256 * 512 * BF16 // TP  # kv_b_proj: 96 heads x (128 k + 128 v)
    + NORMS
)
EXPERT = 896 * 3072 * 3584  # values in one of w1 / w2 / w3 (all 896 experts)
MXFP4 = EXPERT // 2 + EXPERT // 32  # 4-bit values + one 8-bit scale a block of 32
MOE_LAYER = (
    3 * MXFP4 // TP  # w1, w2, w3 over EP 8 (112 experts a device)
    + 2 * 3584 * H * BF16  # latent down/up projections, replicated (ReplicatedLinear)
    + 3584 * BF16  # latent norm
    + 896 * H * BF16
    + 896 * 4  # router gate (bf16) and its f32 bias, replicated
    + 3 * 6144 * H * BF16 // TP  # shared expert gate/up/down
    + NORMS
)
DENSE_LAYER = 3 * 33792 * H * BF16 // TP + NORMS  # layer 0's dense MLP
VOCAB = 163840 * H * BF16 // TP  # embedding or LM head
FINAL_NORMS = 3 * H * BF16  # norm, output_attn_res_norm, output_attn_res_proj

# vLLM at pp 2: stage 1 = layers 0-46 (11 MLA at 3, 7, ..., 43; 36 KDA; layer 0 dense, 46 MoE) +
# embedding; stage 2 = layers 47-92 (12 MLA at 47, ..., 91 plus layer 92: 13; 33 KDA; 46 MoE) +
# final norms + LM head
STAGE1 = 36 * KDA_LAYER + 11 * MLA_LAYER + 46 * MOE_LAYER + DENSE_LAYER + VOCAB
STAGE2 = 33 * KDA_LAYER + 13 * MLA_LAYER + 46 * MOE_LAYER + VOCAB + FINAL_NORMS


def test_k3_on_2x8_h200_tp8_pp2_per_device_bytes():
    assert (KDA_LAYER, MLA_LAYER, MOE_LAYER) == (112_624_640, 84_588_544, 2_113_982_976)
    assert (STAGE1, STAGE2) == (102_703_488_000, 102_353_125_376)  # 95.65 / 95.32 GiB a device
    s = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, pp=2, stack="vllm")
    assert (s.parallel.tp, s.parallel.ep, s.parallel.dp, s.parallel.pp) == (8, 8, 1, 2)
    assert [(st.start, st.end, st.n_mla, st.n_kda) for st in s.stages] == [(0, 47, 11, 36), (47, 93, 13, 33)]
    assert [w.weights_bytes for w in s.stage_weights] == [STAGE1, STAGE2]
    # the embedding is counted on stage 1 only, the LM head and final norms on stage 2 only
    roles = [[r.role for r in w.by_role] for w in s.stage_weights]
    assert s.stage_weights[0].role_bytes("embed") == VOCAB and "lm_head" not in roles[0]
    assert s.stage_weights[1].role_bytes("lm_head") == VOCAB and "embed" not in roles[1]
    # the two stages together hold what one pp=1 TP8 device of the same mesh would (each tensor once)
    whole = make_setup(hardware="nvidia-h200", topology="8", tp=8, stack="vllm").weights.weights_bytes
    assert STAGE1 + STAGE2 == whole


def test_the_tighter_stage_binds():
    s = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, pp=2, stack="vllm")
    kv_layer = 576 * BF16  # MLA latent + rope a token a layer, whole on every TP rank
    # batch 1 at 128K: stage 1 holds 350 MB more weights but 2 fewer MLA layers; vLLM groups the whole model's
    # layers (MLA 1 group of 24, KDA 3 of 23), and stage 1's largest group has 12 layers (12 of each KDA group),
    # so a block there holds 12 MLA pages (11 + 1 padded), stage 2's 13: 131,072 x 1,152 = 151 MB less KV
    # -> stage 1 has the least free bytes and binds (step.memory.held_layers)
    r1 = fit(s, Workload(context_tokens=131072, batch=1))
    assert r1.per_device.weights_bytes == STAGE1
    assert r1.per_device.kv_bytes_per_token == 12 * kv_layer
    assert any("stage 1/2: layers 0-46" in n and "(binds)" in n for n in r1.notes)
    # batch 8: the extra MLA page's KV (8 x 151 MB) outweighs the 350 MB -> stage 2 binds
    r8 = fit(s, Workload(context_tokens=131072, batch=8))
    assert r8.per_device.weights_bytes == STAGE2
    assert r8.per_device.kv_bytes_per_token == 13 * kv_layer
    # hybrid paging: a KDA layer's state a device (12 heads x 128 x 128 f32 + the q/k/v convolutions'
    # 3 x 1,536 x 3 bf16 = 814,080 B) sets the block: 64 x ceil(814,080 / (64 x 1,152)) = 768 tokens,
    # so 131,072 tokens take 171 blocks = 131,328 tokens
    assert 12 * 128 * 128 * 4 + 3 * 1536 * 3 * 2 == 814_080 and 64 * -(-814_080 // (64 * kv_layer)) == 768
    assert r8.per_device.kv_bytes == 8 * 13 * 171 * 768 * kv_layer
    assert r8.capacity.max_sequences <= r1.capacity.max_sequences


def test_stage_to_stage_send_in_the_step():
    from k3plan.roofline.bounds import Efficiency as Eff
    from k3plan.roofline.bounds import decode_bound

    s = make_setup(hardware="nvidia-h200", topology="2x8", tp=8, pp=2, stack="vllm")
    d = decode_bound(s, batch=8, context_tokens=131072, eff=Eff())
    c = d.comm
    # batch 8 as 2 microbatches of 4: one boundary, hidden_states + residual of 4 tokens x 7168 in bf16,
    # a TP rank sends 1/8 of it (the next stage's TP group all-gathers): 2 x 4 x 7168 x 2 / 8 = 14,336 B
    assert (c.pipeline_calls_per_step, c.pipeline_bytes_per_chip_per_step) == (1, 14_336)
    # 2x8 spans two HGX hosts: the send crosses InfiniBand, 20 us + 14,336 B / 50 GB/s (nvidia-h200.yaml)
    assert c.pipeline_link == "InfiniBand"
    assert c.pipeline_time_s == pytest.approx(20e-6 + 14_336 / 50e9)
    # the step is the sum over both stages at a microbatch: the pp=1 mesh's step at batch 4 + the send
    flat = make_setup(hardware="nvidia-h200", topology="8", tp=8, stack="vllm")
    d4 = decode_bound(flat, batch=4, context_tokens=131072, eff=Eff())
    assert d.memory_s == pytest.approx(d4.memory_s) and d.compute_s == pytest.approx(d4.compute_s)
    assert d.step_s == pytest.approx(d4.step_s - d4.comm.time_s + c.time_s)
    assert d.tokens_per_s == pytest.approx(8 / d.step_s)  # the whole batch advances a token a step


def test_pp_needs_a_stack_with_a_pipeline_rule():
    with pytest.raises(K3PlanError, match="jax-native has no pipeline parallelism"):
        make_setup(hardware="tpu-v7x", topology="2x2x4", tp=16, pp=2, stack="jax-native")
    with pytest.raises(K3PlanError, match="--pp 3 does not divide"):
        make_setup(hardware="nvidia-h200", topology="2x8", pp=3, stack="vllm")
