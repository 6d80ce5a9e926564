"""SGLang's MegaMoE buffer (engines/sglang/mega_moe.py): sgl-deep-gemm 0.1.4's sizing as SGLang 0.5.15 calls it, and
how a command's variables are read (engines/sglang/serve.py mega_moe)."""

from __future__ import annotations

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.engines.sglang.mega_moe import (
    CAP_DEFAULT,
    mega_moe_symm_bytes,
    ring_tokens,
    sglang_mega_moe,
)
from k3plan.errors import K3PlanError
from k3plan.models.loader import load_model

MEGA = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention --moe-a2a-backend megamoe"


@pytest.fixture(scope="module")
def pro():
    spec = load_model("deepseek-v4-pro").spec
    assert spec.moe is not None
    return dict(
        experts=spec.moe.num_experts,
        top_k=spec.moe.top_k,
        hidden=spec.hidden_size,
        intermediate=spec.moe.expert_intermediate,
    )


def test_the_ring_is_the_full_pool_from_6144_tokens_a_rank_and_the_decode_budget_below(pro):
    # deep_gemm/mega/__init__.py (sgl-deep-gemm 0.1.4): >= 6144 tokens, the full pool align(8 x 8,448 x min(6, 48) +
    # 48 x 191, 384); below, get_ring_limit_for_mega_moe(4224, 6, 6, 72)[1] clamped into this group's limits, whose
    # most is align(8 x 1,152 x 6 + 48 x 383, 384)
    assert (
        ring_tokens(ranks=8, experts=pro["experts"], top_k=pro["top_k"], tokens=8448)
        == -(-(8 * 8448 * 6 + 48 * 191) // 384) * 384
    )
    assert (
        ring_tokens(ranks=8, experts=pro["experts"], top_k=pro["top_k"], tokens=1152)
        == -(-(8 * 1152 * 6 + 48 * 383) // 384) * 384
    )


def test_the_buffer_grows_with_the_cap_and_halves_its_dispatch_tokens_under_fp4(pro):
    big = mega_moe_symm_bytes(ranks=8, cap=8320, **pro)
    small = mega_moe_symm_bytes(ranks=8, cap=CAP_DEFAULT, **pro)
    fp4 = mega_moe_symm_bytes(ranks=8, cap=8320, fp4_acts=True, **pro)
    ring = ring_tokens(ranks=8, experts=pro["experts"], top_k=pro["top_k"], tokens=8448)
    # DG_USE_FP4_ACTS: x and the L1 ring hold hidden / 2 bytes a token (csrc/apis/mega.hpp input_token_bytes)
    assert big - fp4 == (8448 + ring) * pro["hidden"] // 2
    assert small < big
    # the combine slot alone: top-k x tokens x hidden bf16
    assert big > pro["top_k"] * 8448 * pro["hidden"] * 2
    assert sglang_mega_moe(cap=8320, fp4_acts=False, ranks=1, **pro) is None  # no EP group: not priced


def test_the_cap_is_read_for_0_5_15_on_sm100_only():
    q = parse_serve(
        f"SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=8320 {MEGA}",
        platform="gpu",
        device_name="nvidia-b200",
        release=(0, 5, 15),
    )
    assert q.mega_moe_cap == 8320
    default = parse_serve(MEGA, platform="gpu", device_name="nvidia-b200", release=(0, 5, 15))
    assert default.mega_moe_cap == CAP_DEFAULT  # srt/environ.py EnvInt(1024)
    with pytest.raises(K3PlanError, match="not priced by k3plan at SGLang 0.5.15 on nvidia-h200"):
        parse_serve(
            f"SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=8320 {MEGA}",
            platform="gpu",
            device_name="nvidia-h200",
            release=(0, 5, 15),
        )
    other = parse_serve(MEGA, platform="gpu", device_name="nvidia-b200", release=(0, 5, 16))
    assert other.mega_moe_cap == 0 and any("is not priced at SGLang 0.5.16" in c for c in other.caveats)


def test_off_the_megamoe_path_the_variables_are_ignored_and_the_memory_fix_off_is_refused():
    q = parse_serve(
        "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=8320 sglang serve --model-path "
        "deepseek-ai/DeepSeek-V4-Pro --tp 8",
        platform="gpu",
        device_name="nvidia-b200",
        release=(0, 5, 15),
    )
    assert q.mega_moe_cap == 0 and "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=8320" in q.ignored
    with pytest.raises(K3PlanError, match="interleaved copy of each MoE layer's L1"):
        parse_serve(
            f"SGLANG_OPT_FIX_MEGA_MOE_MEMORY=0 {MEGA}", platform="gpu", device_name="nvidia-b200", release=(0, 5, 15)
        )


def test_use_deepgemm_mega_moe_makes_the_all_to_all_megamoe_where_the_release_reads_it():
    # 0.5.15 wheel arg_groups/overrides.py _a2a_backend_overrides: set true, --moe-a2a-backend becomes megamoe; the
    # 0.5.18 wheel names the variable nowhere (engines/sglang/serve.py USE_MEGA_MOE_ENV)
    plain = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention"
    on = parse_serve(
        f"SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1 SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=8320 {plain}",
        platform="gpu",
        device_name="nvidia-b200",
        release=(0, 5, 15),
    )
    assert on.mega_moe_cap == 8320  # read as under the flag
    assert any("runs --moe-a2a-backend megamoe" in c for c in on.caveats)
    same = parse_serve(
        f"SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1 {MEGA}", platform="gpu", device_name="nvidia-b200", release=(0, 5, 15)
    )
    assert same.mega_moe_cap == CAP_DEFAULT and not any("runs --moe-a2a-backend" in c for c in same.caveats)
    for env, release in (
        ("SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=0", (0, 5, 15)),
        ("SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1", (0, 5, 18)),
    ):
        off = parse_serve(f"{env} {plain}", platform="gpu", device_name="nvidia-b200", release=release)
        assert off.mega_moe_cap == 0 and env in off.ignored


def test_fix_hash_mega_moe_is_listed_a_variable_no_release_names():
    q = parse_serve(
        f"SGLANG_OPT_FIX_HASH_MEGA_MOE=1 {MEGA}", platform="gpu", device_name="nvidia-b200", release=(0, 5, 15)
    )
    assert "SGLANG_OPT_FIX_HASH_MEGA_MOE=1" in q.ignored
