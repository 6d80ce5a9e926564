"""The scratch vLLM's Marlin MoE allocates in the profile run's dummy forward for INT4 W4A16 (compressed-tensors,
pack-quantized) experts on Hopper and the SM100 family: the Kimi-K2-Thinking / K2.5 / K2.6 checkpoints.

The method and its call, read in the 0.11.0, 0.11.1, 0.11.2, 0.13.0, 0.14.1, 0.16.0, 0.18.0, 0.20.0, 0.20.2, 0.21.0
and 0.22.0 wheels (PyPI): vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py
(compressed_tensors_moe/compressed_tensors_moe_wna16_marlin.py from 0.20.0) ``CompressedTensorsWNA16MarlinMoEMethod``
('Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)'; the FlashInfer MxInt4 kernel only on the SM100
family under VLLM_USE_FLASHINFER_MOE_INT4, quantization/utils/flashinfer_mxint4_moe.py
is_flashinfer_mxint4_moe_available, 0.16.0-0.22.0) calls ``fused_marlin_moe`` itself in ``apply`` (the modular
``MarlinExperts`` only behind an all2all backend's prepare/finalize, ``select_gemm_impl``), and
model_executor/layers/fused_moe/fused_marlin_moe.py ``fused_marlin_moe`` / ``_fused_marlin_moe`` allocate, a call,
in the activations' dtype (bf16):

- ``intermediate_cache13``: M x top_k x max(2N, K) (w13's gate/up output, then w2's output in the same storage);
- ``intermediate_cache2``: M x top_k x N (the activation's output, w2's input);

M the rows the layer's experts see, N the w13 shard's intermediate (marlin_moe_intermediate_size: moe_intermediate_size
/ the MoE TP, whole under expert parallelism), K the hidden size. They are freed when the call returns (torch.empty a
call; no workspace manager), so they raise the forward's peak at a MoE layer and are gone before the sampler warm-up:
the profile's peak is the larger of the two (engines/vllm/memory.py engine_sizing), and this is the forward's MoE term
in vLLM's own size, in place of k3plan's analytic ``expert inputs, gate/up and outputs`` (step/temporaries.py).

The device: CompressedTensorsMoEMethod.get_moe_method gives the Marlin method wherever
quantization/utils/marlin_utils.py check_moe_marlin_supports_layer holds (not ROCm; the hidden size a multiple of 128,
the shard's intermediate of max(64, group)), the same on Hopper and the SM100 family (B200 / B300 / GB200 / GB300) in
the 0.11.0, 0.13.0, 0.14.1 and 0.15.1 wheels, whose method has no other kernel. From 0.16.0 (the 0.16.0, 0.18.0,
0.20.0 and 0.22.0 wheels) its __init__ takes FlashInfer's TRT-LLM MxInt4 kernel instead (use_flashinfer_mxint4_moe,
'Using Flashinfer backend for WNA16 MoE') where is_flashinfer_mxint4_moe_available holds: VLLM_USE_FLASHINFER_MOE_INT4
(envs.py, default '0'), FlashInfer's TRT-LLM fused MoE and a CUDA device of the SM100 family, with group 32 and 4
bits. So on the SM100 family the Marlin caches are priced where the command leaves VLLM_USE_FLASHINFER_MOE_INT4 unset
or 0 (FlashInfer's kernel, its workspaces its own, not read: None where it is set).

M: max_num_batched_tokens, the profile run's dummy batch; with --data-parallel-size > 1 the layer gathers every DP
rank's tokens and router logits before the experts (naive dispatch: ``do_naive_dispatch_combine`` = DP > 1 and a
method that is not a modular kernel, fused_moe/layer.py FusedMoE.forward_impl 0.11.0-0.16.0, runner/
default_moe_runner.py 0.18.0, runner/moe_runner.py 0.20.0-0.22.0 ``_maybe_dispatch`` -> get_ep_group().
dispatch_router_logits, the default allgather_reducescatter backend: AgRsAll2AllManager.dispatch), so M = DP x
max_num_batched_tokens (each rank's dummy batch, eager: engines/vllm/moe_workspace.py) and the gathered hidden states
(M x K bf16) and router logits (M x experts, float32) are live beside the caches.

From 0.23.0 (the 0.23.0, 0.26.0 and 0.33.0 wheels) the method builds a modular kernel (quantization/compressed_tensors/
compressed_tensors_moe/compressed_tensors_moe_wna16*.py make_wna16_moe_kernel, fused_moe/oracle/int_wna16.py
select_wna16_moe_backend) whose ``MarlinExperts`` (``HummingIndexedExperts`` / ``HummingGroupedExperts`` on SM90 from
0.32.0) takes its scratch from the worker's workspace manager, kept under the sampler: engines/vllm/moe_workspace.py
profile_moe_workspace prices that buffer (INT4_MODULAR_FROM); this module returns None there.

Not priced (None): other expert formats (MXFP4 experts through ``MarlinExperts`` are modular kernels, the workspace
manager's: engines/vllm/moe_workspace.py MARLIN_MXFP4 prices them), GPUs other than H100 / H200 / H20 and the SM100
family, VLLM_USE_FLASHINFER_MOE_INT4 set on the SM100 family from 0.16.0, a command that names --moe-backend or an
all2all backend other than the
default under DP, EP with TP and DP both > 1 (sequence-parallel MoE), releases before 0.11.0 or from 0.23.0. Left out:
moe_align_block_size's sorted ids (M x top_k + experts x (block - 1) int32, a few MiB) and the output, written in place
into the hidden states (inplace = not disable_inplace) or one M x K tensor.
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
from k3plan.engines.vllm.attention_config import SM90, SM100_FAMILY
from k3plan.engines.vllm.moe_workspace import ALL2ALL_ENV_GONE_FROM, DEFAULT_ALL2ALL
from k3plan.units import GiB

DIRECT_READ: tuple[Release, Release] = ((0, 11, 0), (0, 23, 0))  # apply() calls fused_marlin_moe, [from, to)
ACT_BYTES = 2  # the activations' dtype, bfloat16 (hidden_states.dtype)
LOGIT_BYTES = 4  # the router logits gathered under DP, float32
INT4_W4A16 = ("int4_g32",)  # the Kimi checkpoints' compressed-tensors pack-quantized INT4 experts, group 32
SOURCE = (
    "vllm 0.11.0-0.22.0 wheels (PyPI): quantization/compressed_tensors CompressedTensorsWNA16MarlinMoEMethod.apply -> "
    "model_executor/layers/fused_moe/fused_marlin_moe.py fused_marlin_moe / _fused_marlin_moe (intermediate_cache13 "
    "M x top_k x max(2N, K), intermediate_cache2 M x top_k x N, torch.empty a call in hidden_states.dtype)"
)
# is_flashinfer_mxint4_moe_available (quantization/utils/flashinfer_mxint4_moe.py): first in the 0.16.0 wheel, the 0.11.0,
# 0.13.0, 0.14.1 and 0.15.1 wheels' Marlin method has no other kernel
FLASHINFER_INT4_FROM: Release = (0, 16, 0)
FLASHINFER_INT4_ENV = "VLLM_USE_FLASHINFER_MOE_INT4"
DP_SOURCE = (
    "naive dispatch under DP: fused_moe/layer.py FusedMoE.forward_impl (0.11.0-0.16.0), runner/default_moe_runner.py "
    "(0.18.0), runner/moe_runner.py _maybe_dispatch (0.20.0-0.22.0): do_naive_dispatch_combine, "
    "get_ep_group().dispatch_router_logits"
)


def marlin_forward_caches(
    *,
    release: Release | None,
    vendor: str,
    hardware: str,
    expert_formats: tuple[str, ...],
    expert_parallel: bool,
    tp: int,
    top_k: int,
    hidden: int,
    intermediate: int,
    experts: int,
    tokens: int,
    dp: int = 1,
    all2all_backend: str = "",
    moe_backend: str = "",
    env: dict[str, str] | None = None,
) -> tuple[int, str] | None:
    """(bytes, how): what a MoE layer's Marlin call holds at once in vLLM's profile-run forward (module docstring):
    its two caches and, under DP, the gathered hidden states and router logits; None where this path is not the
    one vLLM runs or was not read. ``tokens`` is max_num_batched_tokens (a DP rank's), ``intermediate`` the
    expert's whole moe_intermediate_size, ``experts`` the router's."""
    if release is None or not DIRECT_READ[0] <= release < DIRECT_READ[1]:
        return None
    if vendor != "nvidia" or hardware not in SM90 | SM100_FAMILY or expert_formats != INT4_W4A16:
        return None
    if min(tp, dp, top_k, hidden, intermediate, experts, tokens) < 1 or moe_backend not in ("", "auto"):
        return None
    fi_int4 = (env or {}).get(FLASHINFER_INT4_ENV, "0").strip()
    if hardware in SM100_FAMILY and release >= FLASHINFER_INT4_FROM and fi_int4 not in ("", "0"):
        return None  # FlashInfer's MxInt4 kernel (bool(int(...)) of the variable): not read
    # VLLM_ALL2ALL_BACKEND stands in for the flag to 0.15.x, as in engines/vllm/moe_workspace.py
    a2a = all2all_backend or ((env or {}).get("VLLM_ALL2ALL_BACKEND", "") if release < ALL2ALL_ENV_GONE_FROM else "")
    if dp > 1 and a2a not in ("", DEFAULT_ALL2ALL):
        return None
    ep = expert_parallel and tp * dp > 1  # FusedMoEParallelConfig.make: use_ep needs more than one rank
    if ep and tp > 1 and dp > 1:
        return None  # sequence-parallel MoE: not read
    m = tokens * dp
    n = intermediate if ep else intermediate // (tp * dp)  # flatten_tp_across_dp without EP
    k = hidden
    c13 = m * top_k * max(2 * n, k) * ACT_BYTES
    c2 = m * top_k * n * ACT_BYTES
    gathered = m * k * ACT_BYTES + m * experts * LOGIT_BYTES if dp > 1 else 0
    total = c13 + c2 + gathered
    rows = f"{m:,} = DP {dp} x {tokens:,} gathered" if dp > 1 else f"{m:,}"
    how_n = f"{intermediate:,} (EP)" if ep else f"{intermediate:,} / {tp * dp}"
    how = (
        f"{total / GiB:.2f} GiB a MoE layer holds in vLLM {release_text(release)}'s profile-run forward through "
        f"fused_marlin_moe: M {rows}, intermediate_cache13 {m:,} x {top_k} x max(2 x {n:,}, {k:,}) + "
        f"intermediate_cache2 {m:,} x {top_k} x {n:,}, x {ACT_BYTES} B (N {n:,} = {how_n})"
        + (
            f", + the gathered hidden states {m:,} x {k:,} x {ACT_BYTES} B and router logits {m:,} x {experts} x "
            f"{LOGIT_BYTES} B ({DP_SOURCE})"
            if dp > 1
            else ""
        )
        + f"; freed when the call returns, before the sampler warm-up ({SOURCE})"
    )
    return total, how
