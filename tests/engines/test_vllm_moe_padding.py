"""vLLM pads the intermediate of a TP-split expert shard by its model's rule (engines/vllm/moe_padding.py MOE_SHARD_RULES):
Kimi-K3's model raises a shard to 256 (vllm-project/vllm#51124), DeepSeek-V4.1's MXFP4 experts are rounded up to the
MoE backend's 128 (oracle/mxfp4.py). With expert parallelism each rank holds whole experts: no padding. The
public V4.1 logs it meets: InferenceX#3310 (H200 TP 8, 49.6 GiB a rank) and #3321 (GB300 TP 4, 81.57 GiB), both
cases in tests/engines/cases."""

from __future__ import annotations

import pytest

from k3plan.engines.vllm.moe_padding import MOE_SHARD_RULES, expert_shard_pad


def _factor(arch: str, intermediate: int, tp: int, ep: bool = False) -> float:
    """The factor a device's experts grow by: none with expert parallelism (fit asks for the rule only without it)."""
    got = (
        None
        if ep
        else expert_shard_pad(
            architecture=arch, hardware="nvidia-h200", vendor="nvidia", intermediate=intermediate, shards=tp
        )
    )
    return 1.0 if got is None else got[0] / got[1]


@pytest.mark.parametrize(("tp", "padded"), [(8, 384), (4, 640), (2, 1152), (16, 256)])
def test_v41_shards_round_up_to_128(tp, padded):
    assert _factor("deepseek_v41", 2304, tp) == pytest.approx(padded / (2304 / tp))


@pytest.mark.parametrize(("tp", "padded"), [(8, 384), (16, 256), (32, 256)])
def test_k3_s_floor_stays_its_model_s(tp, padded):
    assert _factor("kimi_k3", 3072, tp) == pytest.approx(padded / (3072 / tp))


@pytest.mark.parametrize(
    ("release", "tp", "factor"),
    [
        ((0, 27, 0), 8, 2.0),  # 1,024 / 8 = 128 -> 256 a shard (vllm/models/kimi_k3/nvidia/model.py KimiMoE)
        ((0, 34, 0), 8, 2.0),
        (None, 16, 4.0),  # the newest code: 64 -> 256
        ((0, 30, 0), 4, 1.0),  # 256: at the floor
        ((0, 26, 0), 8, 1.0),  # model_executor/models/kimi_linear.py pads nothing
        ((0, 20, 0), 8, 1.0),
    ],
)
def test_kimi_linear_takes_k3_s_floor_from_0270(release, tp, factor):
    got = expert_shard_pad(
        architecture="kimi_linear",
        hardware="nvidia-h200",
        vendor="nvidia",
        intermediate=1024,
        shards=tp,
        release=release,
    )
    assert (1.0 if got is None else got[0] / got[1]) == factor


def test_expert_parallelism_and_an_even_shard_pad_nothing():
    assert _factor("deepseek_v41", 2304, 8, ep=True) == 1.0
    assert _factor("deepseek_v41", 2304, 2) == 1.0  # 1,152 a shard, a multiple of 128
    assert "deepseek_v4" not in MOE_SHARD_RULES  # V4's own quantization path not read


def test_the_rule_as_ints_the_budget_applies():
    from k3plan.engines.vllm.moe_padding import expert_shard_pad

    def pad(arch, inter, shards, hw="nvidia-b200", vendor="nvidia"):
        got = expert_shard_pad(architecture=arch, hardware=hw, vendor=vendor, intermediate=inter, shards=shards)
        return got[:2] if got else None

    assert pad("kimi_k3", 3072, 16) == (4096, 3072)  # 192 -> 256 a shard (vllm#51124)
    assert pad("kimi_k3", 3072, 32) == (8192, 3072)  # 96 -> 256
    assert pad("kimi_k3", 3072, 8) is None  # 384: above the floor
    assert pad("deepseek_v41", 2304, 8) == (3072, 2304)  # 288 -> 384
    assert pad("deepseek_v41", 2304, 8, hw="amd-mi355x", vendor="amd") is None  # read for NVIDIA only
    assert pad("deepseek_v4", 3072, 8, hw="amd-mi300x", vendor="amd") == (4096, 3072)  # gfx942: 384 -> 512
    assert pad("deepseek_v4", 3072, 8) is None


def test_the_budget_and_the_engine_hold_one_weights_figure():
    """Without expert parallelism vLLM pads Kimi-K3's TP-split shards (192 -> 256 at TP 16): the budget's weights hold
    them, so its table, its sequences and the engine's sizing read one figure (the budget said 100.84 GiB and 17
    sequences beside the engine's 128.91 GiB and 8.81 until the padding moved into it)."""
    import json

    from typer.testing import CliRunner

    from k3plan.cli.app import app

    base = "vllm serve moonshotai/Kimi-K3 -tp 16 --max-model-len 131072 --language-model-only"
    got = {}
    for ep in (False, True):
        command = base + (" --enable-expert-parallel" if ep else "")
        res = CliRunner().invoke(app, ["fit", "-H", "nvidia-b200", "-t", "16", "--serve", command, "--json"])
        out = got[ep] = json.loads(res.stdout)
        # the engine's load adds CUTLASS MLA's 128 MiB decode workspace, which vLLM's backend selection imports on
        # the SM100 family (engines/vllm/mla_block.py mla_decode_workspace): not a weight the budget holds
        workspace = 128 * 1024 * 1024
        assert out["per_device"]["weights_bytes"] + workspace == out["engine"]["weights_bytes"]
        assert "g_sm100_workspace" in out["engine"]["sources"]["weights"]
        assert ("padded to 256 a shard" in out["provenance"]["weights"]) is not ep
        # one weights figure, so the budget's sequences sit by the engine's concurrency (17 against 8.81 before)
        assert abs(out["capacity"]["max_sequences"] - out["engine"]["max_concurrency"]) < 1.5
    padded, whole = (got[ep]["weights_by_role"]["expert"] for ep in (False, True))
    assert padded == pytest.approx(whole * 256 / 192, abs=1_000)


@pytest.mark.parametrize(
    ("release", "want"),
    [((0, 26, 0), (4096, 3072)), ((0, 27, 0), (4096, 3072)), ((0, 28, 0), None), ((0, 33, 0), None), (None, None)],
)
def test_v4_on_gfx950_is_padded_before_0_28(release, want):
    """The 0.26.0 and 0.27.0 wheels round a ROCm shard's intermediate up to 256 for AITER_MXFP4_BF16 (V4's MI355X
    backend), so V4-Pro's 384 a shard at TP 8 is held as 512; 0.28.0 keeps 128 for AITER with SiLU
    (engines/vllm/moe_padding.py MOE_SHARD_RULES_UNTIL). No release named: the newest code, no padding. Expert
    parallelism holds whole experts either way (fit asks for the rule only without it)."""
    got = expert_shard_pad(
        architecture="deepseek_v4", hardware="amd-mi355x", vendor="amd", intermediate=3072, shards=8, release=release
    )
    assert (got[:2] if got else None) == want
    if got:
        assert "0.26.0 and 0.27.0 wheels" in got[2]


@pytest.mark.parametrize(
    ("hw", "backend", "release", "tp", "want"),
    [
        ("amd-mi300x", "aiter", (0, 31, 0), 4, (3072, 2304)),  # 576 -> 768 a shard
        ("amd-mi325x", "aiter", (0, 31, 0), 2, (2560, 2304)),  # 1,152 -> 1,280
        ("amd-mi300x", "aiter", None, 8, (4096, 2304)),  # 288 -> 512 (no release: the code read)
        ("amd-mi300x", "aiter", (0, 30, 0), 4, None),  # before the wheel read: as before, no rule for V4.1 on AMD
        ("amd-mi300x", None, (0, 31, 0), 4, (2560, 2304)),  # vLLM's own selection: TRITON_UNFUSED, 576 -> 640
        ("amd-mi325x", "triton_unfused", (0, 31, 0), 2, None),  # 1,152: a multiple of 128
        ("amd-mi300x", "marlin", (0, 31, 0), 4, None),  # a backend not read on ROCm: no rule
        ("amd-mi355x", "aiter", (0, 31, 0), 4, None),  # gfx950: AiterExperts takes MXFP4 there (128 with SiLU)
        ("nvidia-b200", "aiter", (0, 31, 0), 4, (2560, 2304)),  # NVIDIA: the oracle's 128, as before
    ],
)
def test_v41_on_gfx942_rounds_by_its_moe_backend(hw, backend, release, tp, want):
    """vllm 0.31.0 wheel (PyPI), model_executor/layers/fused_moe/oracle/mxfp4.py: --moe-backend aiter tries
    AITER_MXFP4_BF16 then AITER_TRITON_MXFP4_BF16 (map_mxfp4_backend); AiterExperts takes MXFP4 on gfx950 only
    (experts/rocm_aiter_moe.py), so gfx942 gets AiterW4A16ExpertsMonolithic (experts/aiter_mxfp4_w4a16_moe.py), which
    mxfp4_round_up_hidden_size_and_intermediate_size rounds to 256 on ROCm; unset, the DeepSeek-V4 ROCm list falls to
    TRITON_UNFUSED, rounded to 128 before CDNA4 with SiLU (engines/vllm/moe_padding.py ROCM_V41_AITER_SOURCE).
    InferenceX's MI300X DeepSeek-V4.1 arm passes --moe-backend aiter
    (SemiAnalysisAI/InferenceX@0e01a6eb dsv41flash_fp4_mi300x_mtp.sh)."""
    vendor = hw.split("-")[0]
    got = expert_shard_pad(
        architecture="deepseek_v41",
        hardware=hw,
        vendor=vendor,
        intermediate=2304,
        shards=tp,
        release=release,
        moe_backend=backend,
    )
    assert (got[:2] if got else None) == want
    if got and vendor == "amd":
        assert "AiterW4A16ExpertsMonolithic" in got[2]


@pytest.mark.parametrize(
    ("architecture", "intermediate", "tp", "dp", "factor"),
    [
        # KimiMoE raises moe_intermediate_size // tp_size to 256 x tp_size (the attention TP), and the FusedMoE splits
        # that over TP x DP: at TP 8 DP 2 Kimi-Linear's 1,024 becomes 2,048 over 16 shards (128 each), twice the
        # even share; the floor on the 16 shards would be 4,096 (4x)
        ("kimi_linear", 1024, 8, 2, 2.0),
        ("kimi_linear", 1024, 8, 1, 2.0),
        ("kimi_linear", 1024, 4, 2, 1.0),  # 1,024 // 4 = 256: no padding, whatever the DP
        # Kimi-K3: 3,072 // 16 = 192 -> 4,096 over 32 shards at TP 16 DP 2; at TP 8 DP 4 (384 a TP rank) none
        ("kimi_k3", 3072, 16, 2, 4096 / 3072),
        ("kimi_k3", 3072, 8, 4, 1.0),
    ],
)
def test_kimi_s_floor_is_tested_on_the_attention_tp(architecture, intermediate, tp, dp, factor):
    """vllm 0.33.0 wheel, vllm/models/kimi_k3/nvidia/model.py KimiMoE.__init__: the floor is tested on
    moe_intermediate_size // get_tensor_model_parallel_world_size(), the attention TP, not the MoE's TP x DP shards."""
    got = expert_shard_pad(
        architecture=architecture,
        hardware="nvidia-h200",
        vendor="nvidia",
        intermediate=intermediate,
        shards=tp * dp,
        tp=tp,
    )
    assert (1.0 if got is None else got[0] / got[1]) == pytest.approx(factor)


@pytest.mark.parametrize(
    ("architecture", "vendor", "intermediate", "tp", "factor"),
    [
        ("kimi_linear", "amd", 1024, 8, 2.0),  # 128 -> 256 x 8 = 2,048: whole experts twice as wide
        ("kimi_k3", "amd", 3072, 16, 4096 / 3072),  # 192 -> 4,096
        ("kimi_k3", "amd", 3072, 8, 1.0),  # 384: at or above the floor
        ("kimi_linear", "nvidia", 1024, 8, 1.0),  # nvidia/model.py skips it under expert parallelism
        ("deepseek_v41", "amd", 2304, 8, 1.0),  # whole experts: no shard to round
    ],
)
def test_rocm_kimi_pads_whole_experts_under_expert_parallelism(architecture, vendor, intermediate, tp, factor):
    """vllm 0.28.0-0.34.0 wheels, vllm/models/kimi_k3/amd/linear.py KimiMoE.__init__ tests tp_size > 1 alone."""
    got = expert_shard_pad(
        architecture=architecture,
        hardware="amd-mi355x" if vendor == "amd" else "nvidia-h200",
        vendor=vendor,
        intermediate=intermediate,
        shards=tp,
        tp=tp,
        expert_parallel=True,
    )
    assert (1.0 if got is None else got[0] / got[1]) == pytest.approx(factor)
    before = expert_shard_pad(architecture=architecture, hardware="amd-mi355x", vendor=vendor,
                              intermediate=intermediate, shards=tp, tp=tp, expert_parallel=True, release=(0, 26, 0))  # fmt: skip
    assert before is None
