"""What vLLM's Marlin MoE call holds in the profile run's forward for INT4 W4A16 experts on Hopper
(k3plan.engines.vllm.marlin_moe): fused_marlin_moe's two caches, over the DP ranks' gathered tokens, read in the vLLM
0.11.0-0.22.0 wheels (PyPI), and where they enter the activation vLLM's worker subtracts."""

from __future__ import annotations

import json

from k3plan.engines.vllm.marlin_moe import marlin_forward_caches

# moonshotai/Kimi-K2.6's config.json (text_config): hidden_size, moe_intermediate_size, num_experts_per_tok,
# n_routed_experts
HIDDEN, INTERMEDIATE, TOP_K, EXPERTS = 7168, 2048, 8, 384


def _caches(
    release=(0, 20, 0),
    *,
    hardware="nvidia-h200",
    vendor="nvidia",
    formats=("int4_g32",),
    ep=False,
    tp=8,
    dp=1,
    tokens=8192,
    a2a="",
    moe_backend="",
    env=None,
):
    got = marlin_forward_caches(
        release=release,
        vendor=vendor,
        hardware=hardware,
        expert_formats=formats,
        expert_parallel=ep,
        tp=tp,
        top_k=TOP_K,
        hidden=HIDDEN,
        intermediate=INTERMEDIATE,
        experts=EXPERTS,
        tokens=tokens,
        dp=dp,
        all2all_backend=a2a,
        moe_backend=moe_backend,
        env=env,
    )
    return None if got is None else got[0]


def test_the_two_caches_at_tp8_with_and_without_expert_parallelism():
    """_fused_marlin_moe: intermediate_cache13 M x top_k x max(2N, K) and intermediate_cache2 M x top_k x N in bf16,
    N the shard's intermediate: 2,048 / 8 = 256 under TP, the whole 2,048 under EP (max(2N, K) = K = 7,168 both)."""
    tp = 8192 * TOP_K * HIDDEN * 2 + 8192 * TOP_K * 256 * 2
    ep = 8192 * TOP_K * HIDDEN * 2 + 8192 * TOP_K * 2048 * 2
    assert _caches() == tp
    assert _caches(ep=True) == ep
    assert _caches(tokens=4096) == tp // 2  # M is max_num_batched_tokens, the profile run's dummy batch


def test_dp_gathers_every_rank_tokens_before_the_experts():
    """DP 8 with EP (vllm-nanoserve-kimi-k2.6-h200-dp8-ep-oom's command): the naive dispatch gathers 8 x 8,192 rows
    and their router logits; the caches are 7.0 + 2.0 GiB, the gathered rows 0.875 GiB and the logits 0.09 GiB."""
    m = 8 * 8192
    want = m * TOP_K * HIDDEN * 2 + m * TOP_K * 2048 * 2 + m * HIDDEN * 2 + m * EXPERTS * 4
    assert _caches(tp=1, dp=8, ep=True) == want
    # without EP the MoE TP is flattened over TP x DP: N = 2,048 / 8
    assert _caches(tp=1, dp=8) == m * TOP_K * HIDDEN * 2 + m * TOP_K * 256 * 2 + m * HIDDEN * 2 + m * EXPERTS * 4


def test_where_the_direct_call_is_not_the_path():
    assert _caches((0, 10, 2)) is None  # not read
    assert _caches((0, 23, 0)) is None  # a modular kernel from 0.23.0, the workspace manager's: not priced here
    assert _caches((0, 22, 0)) == _caches((0, 11, 0)) == _caches()  # same caches 0.11.0-0.22.0
    assert _caches(hardware="amd-mi300x", vendor="amd") is None
    assert _caches(formats=("fp8_block",)) is None  # Fp8MoEMethod: engines/vllm/moe_workspace.py
    assert _caches(formats=("ds_fp4",)) is None  # MXFP4 through MarlinExperts, a modular kernel
    assert _caches(moe_backend="marlin") is None
    assert _caches(tp=1, dp=8, a2a="deepep_high_throughput") is None
    assert _caches(tp=2, dp=4, ep=True) is None  # sequence-parallel MoE: not read
    assert _caches(tp=8, dp=1, a2a="deepep_low_latency") == _caches()  # the backend matters under DP only
    # VLLM_ALL2ALL_BACKEND names the backend to 0.15.x (config/parallel.py), as moe_workspace reads it; gone at 0.16.0
    deepep = {"VLLM_ALL2ALL_BACKEND": "deepep_high_throughput"}
    assert _caches((0, 15, 0), tp=1, dp=8) is not None
    assert _caches((0, 15, 0), tp=1, dp=8, env=deepep) is None
    assert _caches((0, 16, 0), tp=1, dp=8, env=deepep) == _caches((0, 16, 0), tp=1, dp=8)


def test_fit_puts_the_caches_in_place_of_the_analytic_expert_term():
    """fit --serve on vLLM 0.20.0: the forward's expert term is the Marlin caches, the rest of the temporaries kept."""
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    serve = (
        "vllm serve moonshotai/Kimi-K2.6 --enable-expert-parallel --tensor-parallel-size 8 "
        "--gpu-memory-utilization 0.6 --language-model-only --max-num-seqs 1 --max-model-len 131072"
    )
    res = CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve, "--engine-version", "0.20.0", "--json"]
    )
    assert res.exit_code in (0, 1), res.output
    d = json.loads(res.stdout)
    terms = d["temp"]["prefill_terms"]
    expert = terms["expert inputs, gate/up and outputs"]
    act = d["engine"]["activation_bytes"]
    src = d["engine"]["sources"]["activation"]
    assert "fused_marlin_moe" in src
    # the prefill temporaries less the analytic expert term plus the caches, the MLA term swapped as before
    assert _caches(ep=True) < act <= d["temp"]["prefill_bytes"] - expert + _caches(ep=True)
    res_old = CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve, "--engine-version", "0.23.0", "--json"]
    )
    assert "fused_marlin_moe" not in json.loads(res_old.stdout)["engine"]["sources"]["activation"]


def test_the_sm100_family_runs_marlin_unless_flashinfer_int4_is_asked():
    """CompressedTensorsMoEMethod.get_moe_method gives CompressedTensorsWNA16MarlinMoEMethod on any CUDA device where
    check_moe_marlin_supports_layer holds (vllm 0.11.0, 0.13.0, 0.14.1, 0.15.1 wheels (PyPI): no other kernel); from
    0.16.0 (0.16.0, 0.18.0, 0.20.0, 0.22.0 wheels) its __init__ takes FlashInfer's TRT-LLM MxInt4 kernel where
    quantization/utils/flashinfer_mxint4_moe.py is_flashinfer_mxint4_moe_available holds: VLLM_USE_FLASHINFER_MOE_INT4
    (envs.py default '0') on the SM100 family. fused_marlin_moe's caches do not depend on the device (0.11.0
    use_atomic_add: capability >= 9 on both)."""
    on = {"VLLM_USE_FLASHINFER_MOE_INT4": "1"}
    for hw in ("nvidia-b200", "nvidia-b300", "nvidia-gb200-nvl72", "nvidia-gb300-nvl72"):
        for release in ((0, 11, 0), (0, 15, 1), (0, 16, 0), (0, 22, 0)):
            assert _caches(release, hardware=hw) == _caches(release)
        assert _caches((0, 15, 1), hardware=hw, env=on) == _caches()  # no FlashInfer kernel in the method before 0.16
        assert _caches((0, 16, 0), hardware=hw, env=on) is None  # FlashInfer MxInt4: not read
        assert _caches((0, 22, 0), hardware=hw, env={"VLLM_USE_FLASHINFER_MOE_INT4": "0"}) == _caches()
        assert _caches((0, 23, 0), hardware=hw) is None  # the modular kernel's workspace: moe_workspace.py
    assert _caches((0, 20, 0), env=on) == _caches()  # on Hopper the variable changes nothing (capability family 100)
