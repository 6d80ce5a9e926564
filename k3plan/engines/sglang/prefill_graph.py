"""SGLang's prefill CUDA graph, by release: whether the engine captures one at its defaults for a model, and so
whether its derived mem_fraction_static reserves for it (the sglang stack's options.mem_fraction_static.auto:
AutoFraction.prefill_graph_mla_mib, prefill_graph_deepep_cuda_mib).

What SGLang resolves before it derives the fraction (the piecewise / prefill graph handler runs before the memory
settings in every release read: sglang 0.5.10-0.5.18 wheels server_args.py ServerArgs.__post_init__,
_handle_piecewise_cuda_graph (to 0.5.13) or _handle_cuda_graph_config (from 0.5.14) before
_handle_gpu_memory_settings; 0.5.19-0.5.23 arg_groups/pipeline.py run_resolution_pipeline, handle_cuda_graph_config
before handle_gpu_memory_settings). What a later handler turns off (0.5.10's flashinfer_trtllm MoE rule in
_handle_moe_kernel_config, 0.5.18-0.5.23's disable_prefill_cuda_graph_for_deepseek_trtllm_mla) is turned off after
the fraction is derived: the reserve stays.

  before 0.5.10   opt-in only (--enable-piecewise-cuda-graph; its reserve not priced: releases.py NOT_PRICED)
  0.5.10-0.5.14   tc_piecewise on unless disabled: off under DP attention, pp > 1, a non-CUDA GPU, an all-to-all
                  MoE backend, a multimodal model, speculative decoding (0.5.10 only), --enable-symm-mem,
                  --enable-torch-compile, HiCache, the arch blacklist (DeepSeek-V4 from 0.5.12), ...
                  (0.5.10-0.5.13 server_args.py ServerArgs._handle_piecewise_cuda_graph; 0.5.14
                  _disable_tc_piecewise_cudagraph_if_incompatible, the default model_executor/cuda_graph_config.py
                  CudaGraphConfig.prefill TC_PIECEWISE)
  0.5.15-0.5.23   breakable on CUDA (cuda_graph_config.py default_prefill_backend; tc_piecewise elsewhere to 0.5.21,
                  then off), off where _disable_breakable_cudagraph_if_incompatible says: an MLA model (0.5.15-0.5.17),
                  DP attention and any all-to-all backend (0.5.15-0.5.16; from 0.5.17 one outside none / deepep /
                  megamoe / flashinfer), DeepSeek-V4, a multimodal model not on the breakable allowlist, KDA hybrid
                  linear attention (0.5.20-0.5.23, arg_groups/cuda_graph_hook.py), two-batch overlap (from 0.5.17),
                  --dcp-size > 1 (from 0.5.18), pp > 1 (from 0.5.19, apply_cuda_graph_compatibility); 0.5.16-0.5.21
                  send a multimodal model on the tc_piecewise allowlist but not the breakable one to tc_piecewise
                  (Kimi-K2.5 / K2.6 in 0.5.16-0.5.17), whose rules above apply

An explicit prefill backend (--cuda-graph-backend-prefill, --disable-prefill-cuda-graph, --disable-cuda-graph, from
0.5.14 --enforce-piecewise-cuda-graph as tc_piecewise; to 0.5.13 --disable-piecewise-cuda-graph and
--enforce-piecewise-cuda-graph) skips every rule (_apply_cuda_graph_compatibility returns on a locked prefill
backend; 0.5.10-0.5.13 _handle_piecewise_cuda_graph returns under enforce).

The reserve, where the graph is on (0.5.10 _handle_gpu_memory_settings, 0.5.16-0.5.18 ServerArgs.reserve_for_graph_mb,
0.5.19-0.5.23 arg_groups/memory_hook.py reserve_for_graph_mb; before the 10 GiB floor): 1.5 x 1024 MiB for an MLA
model ('For MLA backend the memory overhead is much higher than expected with fa3'), and from 0.5.17 1 x 1024 more
for a breakable graph with --moe-a2a-backend deepep ('Prefill-BCG DeepEP delta'). Every model k3plan serves through
SGLang whose graph can be on is an MLA model to SGLang (configs/model_config.py ModelConfig._derive_model_shapes:
DeepseekV3ForCausalLM, KimiK25ForConditionalGeneration, KimiLinearForCausalLM, KimiK3ForConditionalGeneration set
AttentionArch.MLA); DeepSeek-V4's is off in every release that serves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3plan.engines.release import Release, release_text

FIRST: Release = (0, 5, 10)  # the first release whose prefill graph is on by default
TC_UNTIL: Release = (0, 5, 14)  # the last release whose CUDA default is tc_piecewise
CONFIG_FROM: Release = (0, 5, 14)  # the per-phase cuda_graph_config and its flags (_parse_cuda_graph_config)
MLA_OFF_UNTIL: Release = (0, 5, 17)  # breakable off for an MLA model (0.5.15-0.5.17)
DP_A2A_OFF_UNTIL: Release = (0, 5, 16)  # breakable off under DP attention, any a2a backend (0.5.15-0.5.16)
DEEPEP_DELTA_FROM: Release = (0, 5, 17)  # the breakable graph's DeepEP delta in reserve_for_graph_mb
KDA_OFF_FROM: Release = (0, 5, 20)  # breakable off for KDA hybrid linear attention
PP_OFF_FROM: Release = (0, 5, 19)  # breakable off by default at pp > 1
TBO_OFF_FROM: Release = (0, 5, 17)
DCP_OFF_FROM: Release = (0, 5, 18)
MM_SWITCH: tuple[Release, Release] = ((0, 5, 16), (0, 5, 21))  # a multimodal model sent to tc_piecewise
SPEC_OFF: Release = (0, 5, 10)  # speculative decoding turns tc_piecewise off in 0.5.10 only
BREAKABLE_A2A = frozenset({"none", "deepep", "megamoe", "flashinfer"})  # 0.5.17-0.5.23's validated backends

SOURCE = (
    "sglang 0.5.10-0.5.23 wheels (PyPI): 0.5.10-0.5.13 sglang/srt/server_args.py ServerArgs._handle_piecewise_cuda_graph "
    "and _handle_gpu_memory_settings ('For piecewise cuda graphs': + 1.5 * 1024 under use_mla_backend); 0.5.14-0.5.18 "
    "server_args.py _apply_cuda_graph_compatibility, _disable_tc_piecewise_cudagraph_if_incompatible, "
    "_disable_breakable_cudagraph_if_incompatible, reserve_for_graph_mb (0.5.16-0.5.18), model_executor/"
    "cuda_graph_config.py default_prefill_backend (0.5.15-0.5.23: breakable on CUDA); 0.5.19-0.5.23 sglang/srt/"
    "arg_groups/cuda_graph_hook.py apply_cuda_graph_compatibility, disable_breakable_cudagraph_if_incompatible, "
    "arg_groups/memory_hook.py reserve_for_graph_mb; configs/model_config.py multimodal_model_archs, "
    "multimodal_piecewise_cuda_graph_supported_model_archs, multimodal_breakable_cuda_graph_supported_model_archs, "
    "piecewise_cuda_graph_disabled_model_archs, uses_kda_attention (0.5.20)"
)


@dataclass(frozen=True)
class SglModel:
    """A model as SGLang's prefill-graph rules see it (configs/model_config.py), by k3plan's model_type."""

    arch: str  # hf_config.architectures[0] as SGLang reads it
    mla: bool  # ModelConfig.attention_arch == AttentionArch.MLA
    kda: bool = False  # uses_kda_attention: a linear_attn_config with kda_layers
    multimodal: bool = False  # in multimodal_model_archs
    dsv4: bool = (
        False  # is_deepseek_v4 (DeepSeek-V4.1's config is read as DeepseekV4ForCausalLM: configs/deepseek_v41.py)
    )
    tc_allowed_from: Release | None = None  # on multimodal_piecewise_cuda_graph_supported_model_archs from
    bcg_allowed_from: Release | None = None  # on multimodal_breakable_cuda_graph_supported_model_archs from


MODELS: dict[str, SglModel] = {
    "deepseek_v3": SglModel("DeepseekV3ForCausalLM", mla=True),
    "kimi_k2": SglModel("DeepseekV3ForCausalLM", mla=True),
    "kimi_k25": SglModel(
        "KimiK25ForConditionalGeneration",
        mla=True,
        multimodal=True,
        tc_allowed_from=(0, 5, 16),
        bcg_allowed_from=(0, 5, 18),
    ),
    "kimi_k3": SglModel("KimiK3ForConditionalGeneration", mla=True, kda=True, bcg_allowed_from=(0, 5, 18)),
    "kimi_linear": SglModel("KimiLinearForCausalLM", mla=True, kda=True),
    "deepseek_v4": SglModel("DeepseekV4ForCausalLM", mla=False, dsv4=True),
    "deepseek_v41": SglModel("DeepseekV4ForCausalLM", mla=False, dsv4=True),
}

# what a command runs that one of the rules reads (engines/sglang/serve.py prefill_graph_flags)
CONDITIONS = frozenset(
    {"speculative", "symm_mem", "torch_compile", "hicache", "two_batch_overlap", "dcp", "pd_prefill", "pd_decode"}
)
# the explicit prefill backends a command can lock (cuda_graph_config.py Backend)
BACKENDS = frozenset({"disabled", "breakable", "tc_piecewise", "full"})


@dataclass(frozen=True)
class PrefillGraph:
    """SGLang's prefill graph at its derived fraction: captured or not, breakable or not, and why."""

    on: bool
    breakable: bool
    why: str
    # the breakable graph's DeepEP delta counts (from 0.5.17, --moe-a2a-backend deepep: reserve_for_graph_mb)
    deepep_delta: bool = False


def _from(release: Release, first: Release | None) -> bool:
    return first is not None and release >= first


def prefill_graph(
    release: Release,
    *,
    model_type: str,
    cuda: bool,
    dp_attention: bool,
    a2a: str,
    pp: int,
    backend: str | None = None,
    conditions: frozenset[str] = frozenset(),
) -> PrefillGraph | None:
    """The prefill graph SGLang ``release`` resolves for ``model_type`` (k3plan's) before it derives its fraction, on
    an NVIDIA (``cuda``) or AMD GPU, under DP attention or not, with --moe-a2a-backend ``a2a``, at ``pp`` stages,
    ``backend`` the prefill backend a command locks (BACKENDS; None: the engine's resolution) and ``conditions`` what
    else the command runs that a rule reads (CONDITIONS). None: a model whose reading k3plan has not made (MODELS)."""
    model = MODELS.get(model_type)
    if model is None:
        return None
    rel = release_text(release)
    if "pd_decode" in conditions and release >= FIRST:
        # a disaggregated decode worker: tc_piecewise off under PD disaggregation (0.5.10-0.5.14), and from 0.5.15
        # reserve_for_graph_mb counts no prefill graph where disaggregation_mode is decode
        return PrefillGraph(False, False, f"no prefill graph reserved on a disaggregated decode worker in {rel}")
    if release < FIRST:
        return PrefillGraph(
            False, False, f"SGLang {rel} captures no prefill graph unless asked (from 0.5.10 by default)"
        )
    if backend is not None and not model.mla and backend != "disabled":
        # a non-MLA model's graph reserves len(bs) x 8 MiB (reserve_for_graph_mb), not priced: DeepSeek-V4 alone
        return PrefillGraph(False, False, f"the command's prefill backend {backend}: its len(bs) x 8 MiB not priced")
    if backend is not None:
        on = backend != "disabled"
        delta = on and backend == "breakable" and a2a == "deepep" and release >= DEEPEP_DELTA_FROM
        return PrefillGraph(
            on, backend == "breakable", f"the command's prefill backend {backend} (no rule applies)", deepep_delta=delta
        )
    if release <= TC_UNTIL or not cuda:
        return _tc(release, model, cuda=cuda, dp_attention=dp_attention, a2a=a2a, pp=pp, conditions=conditions)
    if pp > 1 and release >= PP_OFF_FROM:
        return PrefillGraph(False, False, f"breakable off by default at pp {pp} in {rel}")
    if (
        MM_SWITCH[0] <= release <= MM_SWITCH[1]
        and model.multimodal
        and _from(release, model.tc_allowed_from)
        and not _from(release, model.bcg_allowed_from)
    ):
        return _tc(release, model, cuda=cuda, dp_attention=dp_attention, a2a=a2a, pp=pp, conditions=conditions)
    off = [
        ("KDA hybrid linear attention", model.kda and release >= KDA_OFF_FROM),
        ("DeepSeek-V4", model.dsv4),
        ("an MLA model", model.mla and release <= MLA_OFF_UNTIL),
        ("DP attention", dp_attention and release <= DP_A2A_OFF_UNTIL),
        (
            f"--moe-a2a-backend {a2a}",
            a2a != "none" if release <= DP_A2A_OFF_UNTIL else a2a not in BREAKABLE_A2A,
        ),
        ("a multimodal model", model.multimodal and not _from(release, model.bcg_allowed_from)),
        ("two-batch overlap", "two_batch_overlap" in conditions and release >= TBO_OFF_FROM),
        ("--dcp-size > 1", "dcp" in conditions and release >= DCP_OFF_FROM),
    ]
    why = next((name for name, hit in off if hit), None)
    if why is not None:
        return PrefillGraph(False, False, f"breakable prefill graph off in {rel} for {why}")
    delta = a2a == "deepep" and release >= DEEPEP_DELTA_FROM
    return PrefillGraph(
        True,
        True,
        f"breakable prefill graph on in {rel} ({model.arch} on CUDA)"
        + (", with DeepEP's 1 GiB prefill delta" if delta else ""),
        deepep_delta=delta,
    )


def _tc(
    release: Release, model: SglModel, *, cuda: bool, dp_attention: bool, a2a: str, pp: int, conditions: frozenset[str]
) -> PrefillGraph:
    rel = release_text(release)
    off = [
        ("a non-CUDA GPU", not cuda),
        ("DeepSeek-V4 (the arch blacklist)", model.dsv4 and release >= (0, 5, 12)),
        ("DP attention", dp_attention),
        (f"pp {pp}", pp > 1),
        (f"--moe-a2a-backend {a2a}", a2a != "none"),
        ("a multimodal model", model.multimodal and not _from(release, model.tc_allowed_from)),
        ("speculative decoding", "speculative" in conditions and release <= SPEC_OFF),
        ("--enable-symm-mem", "symm_mem" in conditions),
        ("--enable-torch-compile", "torch_compile" in conditions),
        ("HiCache", "hicache" in conditions),
        ("PD disaggregation", "pd_prefill" in conditions),
        ("--dcp-size > 1", "dcp" in conditions and release >= PP_OFF_FROM),
    ]
    why = next((name for name, hit in off if hit), None)
    if why is not None:
        return PrefillGraph(False, False, f"tc_piecewise prefill graph off in {rel} for {why}")
    return PrefillGraph(True, False, f"tc_piecewise prefill graph on in {rel} ({model.arch} on CUDA)")
