"""Stack tpu-inference: K3 as tpu-inference serves it at 811f8e20 (its JAX model kimi_k3.py under DP attention,
the only way its code runs an MLA model). Per-device figures from hand arithmetic on K3's config; the splits its
code refuses are refused in one line (exit 2); the launch writes the sharding_strategy that gives the mesh priced."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.launch import LaunchConfig, launch_text, tpu_sharding_strategy
from k3plan.engines.stack import load_stack
from k3plan.errors import K3PlanError

# K3 (config.json): hidden 7168, vocabulary 163,840; 896 routed experts in a latent MoE of width 3,584, FFN 3,072,
# 92 MoE layers; 24 MLA layers (kv_lora 512, rope 64), 69 KDA layers (96 heads of 128, conv kernel 4)
HIDDEN, VOCAB = 7168, 163_840
EXPERT_PARAMS = 92 * 896 * 3 * 3584 * 3072  # gate, up (3,584 -> 3,072) and down
# MXFP4 as kimi_k3.py holds it: the fp4 codes (4 bits a value) with each 32-block's E8M0 scale widened to an fp32
# (CompressedTensorsMxfp4MoEMethod.process_weights_after_loading: u8_unpack_e2m1, e8m0_to_fp32; vllm-project/
# tpu-inference@811f8e20 and e65bd14c tpu_inference/layers/jax/quantization/mxfp4.py)
EXPERT_BYTES = EXPERT_PARAMS // 2 + EXPERT_PARAMS // 32 * 4
KV_TOKEN = 24 * (512 + 128) * 2  # the rope part padded to 128 lanes, bf16: 30,720 B
STATE_LAYER = 96 * 128 * 128 * 4 + 3 * (4 - 1) * 96 * 128 * 2  # recurrent f32 + q/k/v conv windows bf16


def _fit(cli, *args) -> dict:
    return json.loads(cli("fit", "-t", "2x2x4", "--context", "131072", "--batch", "1", "--json", *args).stdout)


def test_weights_kv_and_state_a_device_at_tp1_on_2x2x4(cli):
    d = _fit(cli, "--stack", "tpu-inference")  # the stack's default split: tp 1, dp 32, experts over all
    assert d["parallel"] == {"tp": 1, "ep": 32, "dp": 32}
    roles, per = d["weights_by_role"], d["per_device"]
    # experts over every device (attn_dp_expert = 32): 1,701,713,018,880 B / 32
    assert EXPERT_BYTES == 1_701_713_018_880 and roles["expert"] == EXPERT_BYTES // 32 == 53_178_531_840
    # the vocabulary over MLP_TENSOR, every device: 163,840 x 7,168 x 2 B / 32, embedding and LM head alike
    assert roles["embed"] == roles["lm_head"] == VOCAB * HIDDEN * 2 // 32 == 73_400_320
    # attention whole on every device (ATTN_HEAD is the 'model' axis, 1; KDA replicated at any tp)
    assert roles["attn"] == _fit(cli, "--stack", "dp-attention", "--tp", "1")["weights_by_role"]["attn"]
    assert per["weights_bytes"] == sum(roles.values())
    # KV: 1,024-token blocks of 30,720 B a token; a sequence of 131,072 tokens is 128 blocks
    assert per["kv_bytes_per_token"] == KV_TOKEN == 30_720
    assert per["kv_bytes"] == 128 * 1024 * KV_TOKEN == 4_026_531_840
    assert d["cache_layout"]["block_tokens"] == 1024 and d["cache_layout"]["page_bytes"] is None  # no state padding
    # state: 72 layer pages a slot (69 KDA layers in 3 groups of 24), whole heads
    assert STATE_LAYER == 6_512_640 and per["state_bytes"] == 72 * STATE_LAYER == 468_910_080
    assert not d["fits"] and not d["weights_fit"]


def test_state_and_kv_stay_whole_at_attention_tp_8(cli):
    """KDA's shard_map holds the state P(ATTN_DATA, ...): split by sequences, not heads; the MLA cache
    P(BATCH, KV_CONTEXT): whole on every device of the 'model' axis."""
    d = _fit(cli, "--stack", "tpu-inference", "--tp", "8")
    assert d["parallel"] == {"tp": 8, "ep": 8, "dp": 4}  # the expert axis 1: experts over tp only
    assert d["per_device"]["state_bytes"] == 72 * STATE_LAYER
    assert d["per_device"]["kv_bytes_per_token"] == KV_TOKEN
    assert d["weights_by_role"]["expert"] == EXPERT_BYTES // 8


@pytest.mark.parametrize(
    "args, says",
    [
        (["--tp", "32"], "tp 32 x dp 1: the engine runs attention TP > 1 only with more than one DP group"),
        (["--tp", "16"], "expected --tp one of 1, 2, 3, 4, 6, 8, 12, 24"),
        (["--tp", "8", "--ep", "32"], "expected --ep 8"),
        (["--tp", "1", "--ep", "1"], "expected --ep 32"),
    ],
)
def test_splits_the_engine_refuses_are_refused_in_one_line(cli, args, says):
    r = cli("fit", "-t", "2x2x4", "--stack", "tpu-inference", *args)
    assert r.exit_code == 2 and says in r.output and len(r.output.strip().splitlines()) == 1


def test_dp_experts_at_tp1_and_above():
    de = load_stack("tpu-inference").dp_experts
    assert de.ep(tp=1, dp=32) == 32 and de.ep(tp=8, dp=4) == 8
    assert load_stack("vllm-tpu").dp_experts.ep(tp=1, dp=32) is None  # the other stacks unchanged


def test_plan_searches_only_the_splits_the_engine_runs(cli):
    d = json.loads(cli("plan", "-H", "tpu-v7x", "--stacks", "tpu-inference", "--json").stdout)
    assert d["recommended"] is None  # K3 fits no v7x topology: the replicated weights alone exceed a device
    (fam,) = d["rejected_families"]
    assert set(fam["reasons"]) == {"weights", "fallback"}
    from k3plan.hardware import load_hardware
    from k3plan.plan.space import build_space

    sp = build_space(
        hardware=[load_hardware("tpu-v7x")],
        stacks=[load_stack("tpu-inference")],
        kv_dtypes=[None],
        chunks=[8192],
        max_chips=64,
        stacks_given=True,
        expert_width=3072,
    )
    c = sp.cols
    assert c.tp.size and all(24 % t == 0 for t in c.tp)  # a multiple of 128 of the 3,072-wide FFN a device
    assert ((c.tp == 1) == (c.ep == c.tp * c.dp)).all()  # experts over every device at tp 1, over tp above
    assert (c.dp[c.tp > 1] > 1).all()


def _cfg(**kw) -> LaunchConfig:
    base = dict(
        hardware="tpu-v7x", platform="tpu", stack="tpu-inference", engine="vllm", model_path="moonshotai/Kimi-K3",
        tp=1, ep=32, dp=32, hosts=4, max_model_len=131072, max_num_batched_tokens=8192, max_num_seqs=64,
        kv_dtype="bf16", memory_fraction=0.9, tpu_dp_attention=True,
        engine_options=tuple((f, v, ("r", "f", "s")) for f, v in (("NEW_MODEL_DESIGN", "1"), ("MODEL_IMPL_TYPE", "flax_nnx"))),
    )  # fmt: skip
    return LaunchConfig(**{**base, **kw})


def test_launch_writes_the_sharding_strategy_of_the_mesh_priced():
    text = launch_text(_cfg())
    cmd = next(line for line in text.splitlines() if "vllm serve" in line)
    # 4 hosts: tpu-inference takes its executor from TPU_MULTIHOST_BACKEND alone (TpuPlatform.check_and_update_config
    # @811f8e20 / @b8692ff0: unset forces "uni" over --distributed-executor-backend), so the launch sets it
    assert cmd.startswith(
        "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=flax_nnx TPU_MULTIHOST_BACKEND=ray vllm serve moonshotai/Kimi-K3 "
    )
    assert "--tensor-parallel-size 32 " in cmd and "--data-parallel-size" not in cmd
    want = {
        "sharding": {
            "sharding_strategy": {"enable_dp_attention": True, "tensor_parallelism": 1, "expert_parallelism": 32}
        }
    }
    assert f"--additional-config '{json.dumps(want)}'" in cmd
    assert "--max-num-seqs 2 " in cmd  # a DP rank's: 64 sequences over 32 ranks
    assert "--distributed-executor-backend" not in cmd
    one = next(line for line in launch_text(_cfg(hosts=1, tp=1, ep=8, dp=8)).splitlines() if "vllm serve" in line)
    assert "TPU_MULTIHOST_BACKEND" not in one
    assert tpu_sharding_strategy(_cfg(tp=8, ep=8, dp=4)) == {"enable_dp_attention": True, "attn_dp_size": 4}
    with pytest.raises(K3PlanError, match="expected tp 1 with ep 32"):
        tpu_sharding_strategy(_cfg(tp=8, ep=32, dp=4))
