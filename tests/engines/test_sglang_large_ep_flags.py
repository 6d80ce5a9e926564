"""SGLang's large-scale expert-parallel flags, as its recipes pass them (InferenceX's multi-node SGLang recipes, SGLang's
DeepSeek PD-disaggregation / large-scale EP commands), each priced from SGLang's code (engines/sglang/serve.py):

- --moe-dense-tp-size 1: DeepseekV2DecoderLayer builds each dense layer's MLP whole on every GPU (DeepseekV2MLP
  tp_size 1 where enable_moe_dense_fully_dp(): sglang 0.4.7-0.5.23 wheels, models/deepseek_v2.py), the budget's
  ``dense_mlp`` role whole (Stack.with_dense_mlp_whole); tp_size names the TP group (from 0.5.13; 1 or None before);
- --disable-shared-experts-fusion: the fused shared expert (num_fused_shared_experts = 1) is one more expert of
  FusedMoE, held on every EP rank beside its routed share (num_local_experts = routed // ep + 1) and split over
  moe_tp_size = tp // ep: without EP 1/tp, as the unfused MLP (no memory effect); on an AMD GPU under EP (fused from
  0.5.6) one whole a GPU at ep = tp, which the flag returns to 1/tp;
- --deepep-mode: which buffers DeepEP's Buffer holds (normal: NVLink; low_latency: the low-latency RDMA; auto: both),
  built at the first dispatch, after the pool is sized, and normal mode's CUDA-graph switch-off comes after
  mem_fraction_static is derived: the pool as without it, the buffer priced after it (engines/sglang/deepep.py);
- --deepep-config: the normal-mode buffer's sizes, built like every DeepEP buffer at the first dispatch, after the pool
  is sized (ModelRunner.initialize runs no forward between load_model and init_memory_pool): given as JSON, read into
  the buffer, the pool unchanged; a config file (contents unreadable) still refused where a DeepEP all-to-all builds
  that buffer; without one (SGLang's default --moe-a2a-backend none) it sizes nothing and is listed as ignored (sglang
  0.5.15 wheel, token_dispatcher/deepep.py DeepEPConfig: read by the DeepEP buffer alone).
  SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (the low-latency buffer's token cap) likewise;
- the buffer comes out of what --mem-fraction-static leaves after the pool: where it does not fit, SGLang dies at its
  first forward (engines/sglang/memory.py SGLANG_DEEPEP_OOM_AT).
"""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError
from tests.k3_testing import dsv3_dense_mlp_bytes, dsv3_shared_expert_bytes

V3 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code"


def _engine(cli, cmd: str, release: str, hardware: str = "nvidia-h200") -> dict:
    r = cli("fit", "-H", hardware, "-t", 8, "--serve", cmd, "--engine-version", release, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_moe_dense_tp_size_1_holds_the_dense_mlp_whole_on_every_gpu(cli):
    base = _engine(cli, V3, "0.5.15")
    whole = _engine(cli, V3 + " --moe-dense-tp-size 1", "0.5.15")
    # DeepSeek-V3's three dense layers whole where the TP split held 1/8 of them: + 7/8 (~0.97 GiB a GPU)
    assert whole["weights_bytes"] - base["weights_bytes"] == dsv3_dense_mlp_bytes() * 7 // 8
    assert whole["kv_pool_tokens"] < base["kv_pool_tokens"]
    # tp_size: the TP group, SGLang's split without the flag (accepted from 0.5.13)
    same = _engine(cli, V3 + " --moe-dense-tp-size 8", "0.5.15")
    assert same["weights_bytes"] == base["weights_bytes"] and "--moe-dense-tp-size" in same["serve"]["ignored"]
    # the same rule in the oldest release read with the option
    old = _engine(cli, V3 + " --moe-dense-tp-size 1", "0.4.7")
    assert old["weights_bytes"] - _engine(cli, V3, "0.4.7")["weights_bytes"] == dsv3_dense_mlp_bytes() * 7 // 8


def test_moe_dense_tp_size_under_dp_attention_and_where_the_class_does_not_read_it(cli):
    # DP attention at TP 8 / DP 8: without the flag SGLang splits the dense MLP over the whole TP group, 8 GPUs, not
    # the one-GPU attention-TP group (engines/sglang/serve.py mlp_whole_tp); with it, whole on every GPU
    dpa = V3 + " --dp 8 --enable-dp-attention --moe-a2a-backend deepep"
    assert (
        _engine(cli, dpa + " --moe-dense-tp-size 1", "0.5.15")["weights_bytes"]
        - _engine(cli, dpa, "0.5.15")["weights_bytes"]
        == dsv3_dense_mlp_bytes() * 7 // 8
    )
    # DeepSeek-V4 has no dense layer; Kimi-K3's KimiK3MLP takes its group from --enable-dense-mlp-attn-tp
    for model in ("deepseek-ai/DeepSeek-V4-Pro", "moonshotai/Kimi-K3"):
        q = parse_serve(
            f"python3 -m sglang.launch_server --model-path {model} --tp 8 --moe-dense-tp-size 1", platform="gpu"
        )
        assert "--moe-dense-tp-size" in q.ignored and q.dense_mlp_whole is None


@pytest.mark.parametrize(
    ("flags", "release", "what"),
    [
        ("--moe-dense-tp-size 2", "0.5.15", "only supports None, 1, or tp_size currently"),
        ("--moe-dense-tp-size 8", "0.5.12", "only support 1 and None currently"),
        ("--moe-dense-tp-size 1", "0.4.6", "read from 0.4.7 on"),
        # registered in 0.4.4.post4-0.4.5.post1 and from 0.4.7 (engines/sglang/server_flags.py): 0.4.6's argparse
        # stops at it
        ("--disable-shared-experts-fusion", "0.4.6", "sglang 0.4.6's parser has no such option"),
        ("--deepep-mode fast", "0.5.15", "invalid choice: 'fast' \\(choose from auto, normal, low_latency\\)"),
        ("--moe-a2a-backend deepep --deepep-config c.json", "0.5.15", "DeepEP's normal-mode buffer sizes from a tuned"),
    ],
)
def test_what_sglang_refuses_or_k3plan_cannot_size_is_refused(flags, release, what):
    from k3plan.engines.release import parse_release

    with pytest.raises(K3PlanError, match=what):
        parse_serve(f"{V3} {flags}", platform="gpu", release=parse_release(release))


def test_shared_expert_fusion_on_amd_under_ep_holds_a_whole_expert_a_rank(cli):
    ep = V3 + " --ep-size 8"
    fused = _engine(cli, ep, "0.5.15", "amd-mi300x")
    apart = _engine(cli, ep + " --disable-shared-experts-fusion", "0.5.15", "amd-mi300x")
    # one whole shared expert on every EP rank where the unfused MLP holds 1/8: + 7/8 of it (~2.08 GiB a GPU)
    assert fused["weights_bytes"] - apart["weights_bytes"] == dsv3_shared_expert_bytes() * 7 // 8
    assert "--disable-shared-experts-fusion" not in apart["serve"]["ignored"]
    # 0.5.5 turns fusion off under expert parallelism on every GPU; two-batch overlap turns it off from 0.5.11
    assert _engine(cli, ep, "0.5.5", "amd-mi300x")["weights_bytes"] == apart["weights_bytes"]
    tbo = _engine(cli, ep + " --enable-two-batch-overlap", "0.5.15", "amd-mi300x")
    assert tbo["weights_bytes"] == apart["weights_bytes"]
    # NVIDIA turns it off under expert parallelism; without EP the fused expert is TP-split as the unfused one
    assert _engine(cli, ep, "0.5.15")["weights_bytes"] == apart["weights_bytes"]
    # no release named: the newest read, which fuses so
    assert parse_serve(ep, platform="gpu", device_name="amd-mi355x").shared_expert_whole is not None
    for cmd, hw in ((ep, "nvidia-h200"), (V3, "nvidia-h200"), (V3, "amd-mi300x")):
        off = _engine(cli, cmd + " --disable-shared-experts-fusion", "0.5.15", hw)
        assert off["weights_bytes"] == _engine(cli, cmd, "0.5.15", hw)["weights_bytes"]
        assert "--disable-shared-experts-fusion" in off["serve"]["ignored"]


# DeepEP's sizes for DeepSeek-V3 (hidden 7168, 256 routed experts) over 8 ranks, by deepseek-ai/DeepEP@9af0e0d0
# csrc/config.hpp: a normal-buffer slot is the bf16 hidden (2 x 7168 B) + 8 B SourceMeta + 128 x (8 + 4 + 4) B of top-k
# and scales; channels x 8 peers x (2 x 1 + 3) ints ahead; the low-latency buffer 2 x send + 2 x receive + 2 x
# signalling, the combine message (7168 / 128 x 4 + 2 x 7168 B) the larger, x experts x tokens; csrc/deep_ep.cpp adds
# 8 x (4 + 8 + 8) B to the NVLink allocation and a 32 MiB workspace
SLOT = 2 * 7168 + 8 + 128 * 16
WORKSPACE = 32 * 2**20


def _nvl(channels: int, recv: int = 256) -> int:
    raw = channels * 8 * 5 * 4 + channels * 8 * recv * SLOT
    return -(-raw // 128) * 128 + 8 * 20


def _ll(tokens: int, experts: int = 256) -> int:
    msg = 7168 // 128 * 4 + 2 * 7168
    raw = 4 * experts * tokens * msg + 2 * -(-experts * 4 // 128) * 128
    return (raw + 128) // 128 * 128


def _heap(rdma: int) -> int:
    """What NVSHMEM maps for DeepEP's RDMA bytes (NVIDIA/nvshmem v3.4.5-0, the release sgl-project/sglang
    docker/Dockerfile @004740a9 installs; engines/sglang/deepep.py NVSHMEM_SOURCE): its start maps one 512 MiB chunk
    (NVSHMEM_CUMEM_GRANULARITY 2^29, set by DeepEP@9af0e0d0 deep_ep/buffer.py) and takes its 8 MiB + 2 MiB g buffers
    from it; the RDMA bytes + their 128 B alignment that do not fit what is left get a chunk of their own, rounded up
    to 512 MiB (mem_heap.cpp allocate_physical_memory_to_heap)."""
    chunk = 2**29
    own = rdma + 128 > chunk - 10 * 2**20
    return chunk + (-(-(rdma + 128) // chunk) * chunk if own else 0)


@pytest.mark.parametrize(
    ("mode", "buffer"),
    [
        ("auto", _nvl(10) + _heap(_ll(128)) + WORKSPACE),  # Buffer.num_sms 20: 10 channels x 256 at 8 ranks
        ("normal", _nvl(10) + WORKSPACE),
        ("low_latency", _heap(_ll(128)) + WORKSPACE),
    ],
)
def test_deepep_mode_prices_its_buffer_after_the_pool(cli, mode, buffer):
    deepep = V3 + " --moe-a2a-backend deepep"
    base = _engine(cli, deepep, "0.5.15")
    got = _engine(cli, f"{deepep} --deepep-mode {mode}", "0.5.15")
    assert got["kv_pool_tokens"] == base["kv_pool_tokens"] and got["weights_bytes"] == base["weights_bytes"]
    assert got["non_torch_bytes"] == buffer and got["starts"]
    assert "--deepep-mode" not in got["serve"]["ignored"]
    # without a DeepEP all-to-all no buffer is built: the flag sizes nothing
    plain = _engine(cli, f"{V3} --deepep-mode {mode}", "0.5.15")
    assert "--deepep-mode" in plain["serve"]["ignored"] and plain["non_torch_bytes"] == 0


def test_deepep_buffer_beyond_what_the_fraction_leaves_wont_start(cli):
    """At 1,024 dispatch tokens a rank DeepSeek-V3's low-latency buffer is 4 x 256 x 1,024 combine messages (~13.8
    GiB), more than --mem-fraction-static 0.95 leaves an H200 beside its pool (~7 GiB): SGLang sizes the pool, then
    dies allocating the buffer at the decode graphs' first dispatch (memory.py SGLANG_DEEPEP_OOM_AT)."""
    cmd = (
        f"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=1024 {V3} --moe-a2a-backend deepep --mem-fraction-static 0.95"
    )
    got = _engine(cli, cmd, "0.5.15")
    assert not got["starts"] and "DeepEP's buffer" in got["message"]
    assert got["non_torch_bytes"] == _nvl(10) + _heap(_ll(1024)) + WORKSPACE
    # at the default 128 tokens it fits
    assert _engine(cli, cmd.replace("=1024", "=128"), "0.5.15")["starts"]


def test_deepep_config_without_a_deepep_all_to_all_sizes_nothing():
    """SGLang reads --deepep-config into DeepEPConfig, whose only byte-sizing reader is the DeepEP dispatcher's buffer
    (sglang 0.5.15 wheel, layers/moe/token_dispatcher/deepep.py DeepEPBuffer.get_deepep_buffer); under the default
    --moe-a2a-backend none no such buffer is built: listed as ignored, the reading otherwise the same. The draft's
    DeepEP that SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE turns on (arg_groups/overrides.py _deepseek_spec_moe_resolution)
    keeps the refusal."""
    from k3plan.engines.release import parse_release

    release = parse_release("0.5.15")
    plain = parse_serve(V3, platform="gpu", release=release)
    given = parse_serve(f"{V3} --deepep-config c.json", platform="gpu", release=release)
    assert "--deepep-config" in given.ignored and "--deepep-config" not in plain.ignored
    assert given.stack_options == plain.stack_options and given.tp == plain.tp and given.ep == plain.ep
    with pytest.raises(K3PlanError, match="DeepEP's normal-mode buffer sizes from a tuned config"):
        parse_serve(f"SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE=1 {V3} --deepep-config c.json", platform="gpu", release=release)


TUNED = """'{"normal_dispatch":{"num_sms":96},"normal_combine":{"num_sms":96}}'"""


def test_deepep_config_json_sizes_the_buffer_and_leaves_the_pool(cli):
    """A --deepep-config given as JSON under --moe-a2a-backend deepep: DeepEP's NVLink buffer at 96 SMs holds 48
    channels x 256 tokens (DeepEP's Config defaults, csrc/deep_ep.cpp) against the default 10 x 256 (Buffer.num_sms 20,
    get_dispatch_config), and 256 dispatch tokens a rank double the low-latency buffer; built after the pool: the pool
    and weights as without them, the buffer priced after it."""
    deepep = V3 + " --moe-a2a-backend deepep"
    base = _engine(cli, deepep, "0.5.15")
    got = _engine(cli, f"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=256 {deepep} --deepep-config {TUNED}", "0.5.15")
    assert got["kv_pool_tokens"] == base["kv_pool_tokens"] and got["weights_bytes"] == base["weights_bytes"]
    assert got["non_torch_bytes"] == _nvl(48) + _heap(_ll(256)) + WORKSPACE
    assert base["non_torch_bytes"] == _nvl(10) + _heap(_ll(128)) + WORKSPACE


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        (""" --deepep-config '{"normal_dispatch":{"num_sms":96}}'""", "normal_combine"),
        (""" --deepep-config '{"normal_dispatch":{"num_sms":96},"normal_combine":{"num_sms":64}}'""", "asserts"),
        (""" --deepep-config '{"normal_dispatch":{"sms":96},"normal_combine":{"num_sms":96}}'""", "takes no 'sms'"),
    ],
)
def test_deepep_config_json_refused_where_sglang_refuses_it(tail: str, said: str):
    from k3plan.engines.release import parse_release

    with pytest.raises(K3PlanError, match=said):
        parse_serve(f"{V3} --moe-a2a-backend deepep{tail}", platform="gpu", release=parse_release("0.5.15"))


def test_deepep_tokens_above_the_dispatcher_s_assert_refused():
    from k3plan.engines.release import parse_release

    with pytest.raises(K3PlanError, match="at most 1024"):
        parse_serve(
            f"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=2048 {V3} --moe-a2a-backend deepep",
            platform="gpu",
            release=parse_release("0.5.15"),
        )


def test_deepep_buffer_off_nvidia_said_not_priced(cli):
    """engines/sglang/deepep.py sizes DeepEP's CUDA build: on an AMD GPU the buffer is named, not priced."""
    got = _engine(cli, V3 + " --moe-a2a-backend deepep", "0.5.15", "amd-mi300x")
    assert got["non_torch_bytes"] == 0
    assert any("DeepEP's all-to-all buffer on amd-mi300x" in c for c in got["serve"]["caveats"])


def test_deepep_buffer_groups_beyond_one_nvlink_domain_take_the_larger_rdma():
    """Over 16 ranks DeepEP's normal RDMA hint (channels x 2 RDMA ranks x 140 tokens: the dispatch Config rounds 128 up
    to a multiple of its 20 send tokens, the combine's to 132 of 12; slots twice, + 1 MiB) and the low-latency one share one NVSHMEM buffer, the larger (get_deepep_buffer's
    max); the NVLink buffer is DeepEP's 16-rank default, 10 channels x 8 peers x 288 tokens with (2 x 2 + 3) ints."""
    from k3plan.engines.sglang.deepep import sglang_deepep_buffer

    got = sglang_deepep_buffer(mode="normal", ranks=16, hidden=7168, experts=256, tokens=128, configs=None)
    assert got is not None
    nvl = -(-(10 * 8 * 7 * 4 + 10 * 8 * 288 * SLOT) // 128) * 128
    rdma = -(-(10 * 2 * 18 * 2 * 4 + 10 * 2 * 140 * (SLOT + 16) * 2 + 1048576) // 128) * 128
    # the normal RDMA bytes (~89 MiB) fit the 512 MiB chunk NVSHMEM's start maps
    assert got[0] == nvl + 8 * 20 + WORKSPACE + _heap(rdma) == nvl + 8 * 20 + WORKSPACE + 2**29
    auto = sglang_deepep_buffer(mode="auto", ranks=16, hidden=7168, experts=256, tokens=128, configs=None)
    assert auto is not None and auto[0] == nvl + 8 * 20 + WORKSPACE + _heap(max(rdma, _ll(128)))
