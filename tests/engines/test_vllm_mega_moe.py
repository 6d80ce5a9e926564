"""DeepGEMM Mega MoE's symmetric buffer (k3plan.engines.vllm.mega_moe), held to the sizes its layout code gives."""

from k3plan.engines.vllm.mega_moe import mega_moe_non_torch, mega_moe_symm_bytes

V4_FLASH = dict(experts=256, top_k=6, hidden=4096, intermediate=2048)  # DeepSeek-V4-Flash's config.json


def test_v4_flash_at_ep8_and_8192_tokens():
    # 8,448 tokens a rank; pool 8 x 8,448 x 6 + 32 x 191 = 411,616 -> 411,648; padded scale tokens 51,456 x 128
    got = mega_moe_symm_bytes(ranks=8, max_num_batched_tokens=8192, **V4_FLASH)
    assert got == 4_321_690_912
    l1 = 411_648 * 4096 + 6_586_368 * 128 + 411_648 * 4
    l2 = 411_648 * 2048 + 6_586_368 * 64
    combine = 6 * 8448 * 4096 * 2
    assert got - l1 - l2 - combine == 111_060_256  # the workspace (74,767,648 B) and the inputs (36,292,608 B)


def test_priced_only_where_the_layout_was_read():
    args = dict(vendor="nvidia", ep=8, max_num_batched_tokens=8192, **V4_FLASH)
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 25, 0), **args) is not None
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 26, 0), **args) is not None
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 29, 0), **args) is None  # a later layout
    # 0.20.0-0.22.0 ship the same layout header and sizing call (session 52: the wheels' vendored deep_gemm compared)
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 20, 0), **args) is not None
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 22, 0), **args) is not None
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 19, 1), **args) is None  # not read
    assert mega_moe_non_torch(moe_backend=None, release=(0, 25, 0), **args) is None
    one = dict(args, ep=1)  # torch's allocator for a group of one: in the torch peak, not this term
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 25, 0), **one) is None


def test_fp4_moe_token_bound_listed_on_deepseek_v4_where_no_cutlass_fp4_experts_run():
    """VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE sizes the CUTLASS FP4 experts' scale buffer (vllm/_custom_ops.py
    scaled_fp4_experts_quant / mxfp4_experts_quant, 0.20.0-0.22.0 wheels), built only for NVFP4 and compressed-tensors
    W4A4 MXFP4 experts; DeepSeek-V4's MXFP4 experts run DeepseekV4MegaMoEExperts under deep_gemm_mega_moe and
    Mxfp4MoEMethod's oracle (no cutlass_moe.py experts) otherwise, so the variable is listed on either (the InferenceX
    GB200 DEP8 prefill workers' environment) and refused where k3plan has not read it."""
    import json

    from typer.testing import CliRunner

    from k3plan.cli.app import app

    v4 = (
        "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE=2048 vllm serve deepseek-ai/DeepSeek-V4-Pro --data-parallel-size 8 "
        "--enable-expert-parallel --kv-cache-dtype fp8 --block-size 256 --max-model-len 65536 "
        "--max-num-batched-tokens 8192"
    )

    def fit(cmd: str, version: str):
        args = ["fit", "-H", "nvidia-gb200-nvl72", "-t", "8", "--serve", cmd, "--engine-version", version, "--json"]
        return CliRunner().invoke(app, args)

    for cmd in (v4 + " --moe-backend deep_gemm_mega_moe", v4):
        res = fit(cmd, "0.20.0")
        assert res.exit_code in (0, 1)
        assert "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE=2048" in json.loads(res.stdout)["engine"]["serve"]["ignored"]
    k2 = v4.replace("deepseek-ai/DeepSeek-V4-Pro", "moonshotai/Kimi-K2-Thinking")
    for cmd, version in ((v4, "0.23.0"), (k2, "0.20.0")):
        res = fit(cmd, version)
        assert res.exit_code == 2 and "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE" in res.output
