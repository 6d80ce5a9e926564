"""SGLang's DeepseekV2DecoderLayer MLPs under DP attention (engines/sglang/serve.py mlp_whole_tp): the attention over
the attention-TP group (tp_size // dp_size), the dense layers' DeepseekV2MLP over the whole TP group (tp_rank / tp_size
None: get_tensor_model_parallel_world_size(); 0.5.23 parallel_group 'tp'), and the shared experts' likewise without an
all-to-all backend (tp_size 1 under DeepEP): sglang 0.4.3-0.5.23 wheels, models/deepseek_v2.py. The serve command sets
the split on the stack (Stack.with_mlp_whole_tp), so the budget's weights and the engine's start check read one
figure; the dp-attention stack's own rule (the attention-TP group), which TPU serving reads, stays."""

from __future__ import annotations

import json

from tests.k3_testing import dsv3_dense_mlp_bytes, dsv3_shared_expert_bytes

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
