"""SGLang's DeepseekV2DecoderLayer MLPs under DP attention (engines/sglang/serve.py mlp_whole_tp): the attention over
the attention-TP group (tp_size // dp_size), the dense layers' DeepseekV2MLP over the whole TP group (tp_rank / tp_size
None: get_tensor_model_parallel_world_size(); 0.5.23 parallel_group 'tp'), and the shared experts' likewise without an
all-to-all backend (tp_size 1 under DeepEP): sglang 0.4.3-0.5.23 wheels, models/deepseek_v2.py. The serve command sets
the split on the stack (Stack.with_mlp_whole_tp), so the budget's weights and the engine's start check read one
figure; the dp-attention stack's own rule (the attention-TP group), which TPU serving reads, stays."""

from __future__ import annotations

import json

from tests.k3_testing import bundled_raw, dsv3_dense_mlp_bytes, dsv3_shared_expert_bytes

V3 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention"


def _fit(cli, cmd: str, release: str = "0.5.15", hardware: str = "nvidia-h200") -> dict:
    r = cli("fit", "-H", hardware, "-t", 8, "--serve", cmd, "--engine-version", release, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_the_dense_mlp_and_shared_experts_are_over_tp_x_dp_without_an_all_to_all_backend(cli):
    d = _fit(cli, V3)
    assert d["parallel"]["tp"] == 1 and d["parallel"]["dp"] == 8  # attention TP 1
    assert d["engine"]["serve"]["stack"] == "dp-attention:moe_a2a_backend=none"
    roles = d["weights_by_role"]
    assert (
        roles["dense_mlp"] == dsv3_dense_mlp_bytes() // 8 and roles["shared_expert"] == dsv3_shared_expert_bytes() // 8
    )


def test_deepep_holds_the_shared_experts_whole_and_moe_dense_tp_size_1_the_dense_mlp(cli):
    base = _fit(cli, V3)["engine"]
    deepep = _fit(cli, V3 + " --moe-a2a-backend deepep")
    assert (
        deepep["weights_by_role"]["shared_expert"] == dsv3_shared_expert_bytes()
    )  # tp_size 1 under an all-to-all backend
    assert deepep["weights_by_role"]["dense_mlp"] == dsv3_dense_mlp_bytes() // 8
    whole = _fit(cli, V3 + " --moe-dense-tp-size 1")
    assert whole["weights_by_role"]["dense_mlp"] == dsv3_dense_mlp_bytes()
    assert whole["engine"]["weights_bytes"] - base["weights_bytes"] == dsv3_dense_mlp_bytes() * 7 // 8
    # the engine's pool moves by exactly the weights' difference (one figure for the budget and the start check)
    assert base["kv_pool_bytes"] - whole["engine"]["kv_pool_bytes"] == dsv3_dense_mlp_bytes() * 7 // 8


def test_0_4_6_s_clones_stay_whole_and_amd_s_ep_fused_copy_too(cli):
    # 0.4.6 fuses tp_size clones into the routed MoE on an NVIDIA GPU: one whole shared expert a GPU
    old = _fit(cli, V3, "0.4.6")
    assert old["weights_by_role"]["shared_expert"] == dsv3_shared_expert_bytes()
    assert old["weights_by_role"]["dense_mlp"] == dsv3_dense_mlp_bytes() // 8
    # from 0.5.6 an AMD GPU under expert parallelism fuses it as a local expert of every EP rank: whole at ep = tp_size
    amd = _fit(cli, V3 + " --ep-size 8", "0.5.15", "amd-mi300x")
    assert amd["weights_by_role"]["shared_expert"] == dsv3_shared_expert_bytes()


def test_models_whose_class_was_not_read_and_dp_1_set_nothing():
    from k3plan.engines.serve import parse_serve

    def parse(cmd: str):
        return parse_serve(cmd, platform="gpu", device_gib=141.0, device_name="nvidia-h200")

    roles, _ = parse(V3).mlp_whole_tp
    assert roles == ("dense_mlp", "shared_expert")
    assert parse(V3.replace(" --dp 8", " --dp 1")).mlp_whole_tp is None
    k3 = V3.replace("deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K3")
    assert parse(k3).mlp_whole_tp is None


# DeepSeek-V4 (engines/sglang/serve.py MLP_WHOLE_TP_V4; sglang 0.5.12-0.5.23 wheels, models/deepseek_v4.py): every
# layer's DeepseekV2MoE builds the shared expert over the whole TP group (no dense layer), and DeepseekV4Model's
# embed_tokens is VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled()): whole under DP attention
V4 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-{m} --tp 16 --dp 2 --enable-dp-attention"


def _v4_bytes(model: str) -> tuple[int, int]:
    """(the shared experts, the embedding) of a bundled DeepSeek-V4, whole, from its config.json: the shared expert's
    three I x H e4m3 matrices a layer with one ue8m0 scale a 128 x 128 block (quantization_config), the bf16 embedding
    vocab_size x hidden_size."""
    c = bundled_raw(model)
    inter, hidden = c["moe_intermediate_size"] * c["n_shared_experts"], c["hidden_size"]
    block = c["quantization_config"]["weight_block_size"][0]
    per_matrix = inter * hidden + -(-inter // block) * -(-hidden // block)
    return c["num_hidden_layers"] * 3 * per_matrix, c["vocab_size"] * hidden * 2


def _fit16(cli, cmd: str, release: str = "0.5.15") -> dict:
    r = cli("fit", "-H", "nvidia-h200", "-t", "2x8", "--serve", cmd, "--engine-version", release, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_v4_shared_expert_over_the_whole_tp_group_and_its_embedding_whole(cli):
    shared, embed = _v4_bytes("deepseek-v4-flash")
    for release in ("0.5.12", "0.5.15", "0.5.23"):
        d = _fit16(cli, V4.format(m="Flash"), release)
        assert d["parallel"]["tp"] == 8 and d["parallel"]["dp"] == 2  # attention TP 8
        roles = d["weights_by_role"]
        assert roles["shared_expert"] == shared // 16 and roles["embed"] == embed, release
    # an all-to-all backend holds the shared expert whole (tp_size 1); the embedding stays whole
    deepep = _fit16(cli, V4.format(m="Flash") + " --moe-a2a-backend deepep")["weights_by_role"]
    assert deepep["shared_expert"] == shared and deepep["embed"] == embed


def test_v4_weights_and_pool_read_one_split(cli):
    # SGLANG_SHARED_EXPERT_TP1 (0.5.12-0.5.23) holds the shared expert whole: the engine's weights and pool move by
    # exactly the 15/16 of it the whole-TP split leaves off
    shared, _ = _v4_bytes("deepseek-v4-flash")
    base = _fit16(cli, V4.format(m="Flash"))
    tp1 = _fit16(cli, "SGLANG_SHARED_EXPERT_TP1=1 " + V4.format(m="Flash"))
    assert tp1["weights_by_role"]["shared_expert"] == shared
    moved = shared - shared // 16
    assert tp1["engine"]["weights_bytes"] - base["engine"]["weights_bytes"] == moved
    assert base["engine"]["kv_pool_bytes"] - tp1["engine"]["kv_pool_bytes"] == moved


def test_v4_pro_s_whole_tp_shared_expert_is_the_one_sglang_refuses_and_tp1_builds(cli):
    # V4-Pro at --tp 16 --dp 2: the shared expert is split 16 ways (192 rows, partial fp8 blocks: refused,
    # engines/sglang/fp8_block.py), the same split the weights price; SGLANG_SHARED_EXPERT_TP1 builds it whole
    shared, _ = _v4_bytes("deepseek-v4-pro")
    d = _fit16(cli, V4.format(m="Pro"))
    assert d["weights_by_role"]["shared_expert"] == shared // 16
    assert d["engine"]["message"].startswith("ValueError: Weight output_partition_size = 192 is not divisible")
    tp1 = _fit16(cli, "SGLANG_SHARED_EXPERT_TP1=1 " + V4.format(m="Pro"))
    assert tp1["weights_by_role"]["shared_expert"] == shared and "block_n" not in tp1["engine"]["message"]


def test_v4_reading_sets_the_shared_expert_and_the_embedding():
    from k3plan.engines.serve import parse_serve

    def parse(cmd: str):
        return parse_serve(cmd, platform="gpu", device_gib=141.0, device_name="nvidia-h200")

    roles, cite = parse(V4.format(m="Flash")).mlp_whole_tp
    assert roles == ("shared_expert", "embed") and "deepseek_v4.py" in cite.sources[0].file
    assert parse(V4.format(m="Pro") + " --moe-a2a-backend deepep").mlp_whole_tp[0] == ("embed",)
    assert parse(V4.format(m="Flash").replace(" --dp 2", " --dp 1")).mlp_whole_tp is None


def test_shared_expert_tp1_holds_v3_s_shared_experts_whole_at_attention_tp_above_1(cli):
    # SGLANG_SHARED_EXPERT_TP1 (0.5.12 on) builds DeepseekV2MoE's shared experts tp_size 1: whole on every GPU, not
    # the moe_a2a_backend none stack's attention-TP split (--tp 8 --dp 2: attention TP 4)
    cmd = V3.replace(" --dp 8", " --dp 2")
    assert _fit(cli, cmd)["weights_by_role"]["shared_expert"] == dsv3_shared_expert_bytes() // 8
    whole = _fit(cli, "SGLANG_SHARED_EXPERT_TP1=1 " + cmd)["weights_by_role"]["shared_expert"]
    assert whole == dsv3_shared_expert_bytes()


def test_v4_nextn_draft_s_shared_expert_follows_the_target_s():
    # deepseek_v4_nextn.py builds DeepseekV4DecoderLayer(is_nextn=True): its DeepseekV2MoE's shared expert over the
    # whole TP group as the target's (fit passes shared_tp = tp x dp where the reading moves the role)
    from k3plan.engines.serve import parse_serve
    from k3plan.engines.sglang.spec import draft_pricing
    from k3plan.models.loader import load_model

    eagle = " --speculative-algorithm EAGLE --speculative-eagle-topk 1 --speculative-num-steps 1"
    cmd = V4.format(m="Flash") + eagle + " --speculative-num-draft-tokens 2"
    spec = parse_serve(cmd, platform="gpu", device_gib=141.0, device_name="nvidia-h200").speculative
    model = load_model("deepseek-v4-flash")
    kw = dict(tp=8, ep=16, lm_head_tp=16, dp_attention=True, pp=1)
    attn_tp = draft_pricing(spec, model, **kw)
    whole_tp = draft_pricing(spec, model, shared_tp=16, **kw)
    shared, _ = _v4_bytes("deepseek-v4-flash")
    layer = shared // bundled_raw("deepseek-v4-flash")["num_hidden_layers"]  # one layer's: the NextN layer's
    assert attn_tp.bytes_per_device - whole_tp.bytes_per_device == -(-layer // 8) - -(-layer // 16)
    assert "shared experts" in whole_tp.source and "over 16" in whole_tp.source
