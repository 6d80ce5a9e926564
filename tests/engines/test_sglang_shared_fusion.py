"""SGLang 0.4.6's shared-expert fusion (engines/sglang/releases.py SHARED_CLONES_FROM): DeepSeek-V3's shared expert
cloned tp_size times into the routed MoE (n_share_experts_fusion = tp_size: sglang 0.4.6-0.4.6.post5 wheels,
models/deepseek_v2.py DeepseekV2ForCausalLM.determine_n_share_experts_fusion, on a CUDA GPU of SM 90 and up), so a
GPU holds one whole shared expert a MoE layer; 0.4.5 (ServerArgs.n_share_experts_fusion 0, which its model leaves
unfused) and 0.4.7 (one fused copy, num_fused_shared_experts = 1) hold 1/tp of it."""

from __future__ import annotations

import json

from tests.k3_testing import dsv3_shared_expert_bytes

CMD = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code"


def _engine(cli, cmd: str, release: str, hardware: str = "nvidia-h200") -> dict:
    r = cli("fit", "-H", hardware, "-t", 8, "--serve", cmd, "--engine-version", release, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_0_4_6_holds_the_shared_expert_whole_on_every_gpu(cli):
    w = {v: _engine(cli, CMD, v)["weights_bytes"] for v in ("0.4.5", "0.4.6", "0.4.7")}
    # 8 clones, each split 8 ways: one whole expert a GPU where the split held 1/8: + 7/8 of it (~2.08 GiB)
    assert w["0.4.6"] - w["0.4.7"] == dsv3_shared_expert_bytes() * 7 // 8
    assert w["0.4.5"] == w["0.4.7"]


def test_no_clones_where_0_4_6_fuses_none_or_k3plan_holds_them_whole_already(cli):
    # DP attention without an all-to-all backend: 0.4.6's clones are one whole shared expert a GPU, 0.4.7 splits the
    # shared expert over the whole TP group, 8 GPUs (engines/sglang/serve.py mlp_whole_tp), as without DP attention
    dpa = CMD + " --dp 8 --enable-dp-attention"
    assert (
        _engine(cli, dpa, "0.4.6")["weights_bytes"] - _engine(cli, dpa, "0.4.7")["weights_bytes"]
        == dsv3_shared_expert_bytes() * 7 // 8
    )
    # Kimi-K2 (DeepseekV3ForCausalLM, 384 routed experts): determine_n_share_experts_fusion asks for 256
    k2 = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2-Instruct --tp 8 --trust-remote-code"
    assert _engine(cli, k2, "0.4.6")["weights_bytes"] == _engine(cli, k2, "0.4.7")["weights_bytes"]
    # an AMD GPU: the 0.4.6 post-releases disagree (post4-post5 require _is_cuda): said, not priced
    amd = _engine(cli, CMD, "0.4.6", "amd-mi300x")
    assert amd["weights_bytes"] == _engine(cli, CMD, "0.4.7", "amd-mi300x")["weights_bytes"]
