"""vLLM's own memory sizing, as its code does it (GPU vLLM and the torch_tpu plugin): pure functions over
numbers passed in, so fit, plan and the tests/engines referee share one formula.

    available  = int(utilization x engine-visible HBM) - weights - activation - non-torch
    num_blocks = available // (page_bytes x group_size)
    "GPU KV cache size" tokens = num_blocks // kv_groups x block_tokens (to 0.20.0; from 0.20.1
                                 int(max concurrency x max_model_len): TOKENS_BY_CONCURRENCY_FROM)
    "Maximum concurrency"      = num_blocks / (cdiv(max_model_len, block) x attention groups + state groups)

- GPU vLLM: ``activation`` is the peak its profile run measured at max_num_batched_tokens and ``non_torch``
  the CUDA context, NCCL and cuBLAS buffers outside torch's allocator (vllm/v1/worker/gpu_worker.py
  Worker.determine_available_memory, vllm/utils/mem_utils.py memory_profiling).
- torchtpu-vllm: the worker subtracts the bytes in use after its profile run (limit - free), so a compiled
  step's temporaries (freed when it returns) and non-torch memory count 0 here
  (kowalski-4831/vllm-torchtpu src/vllm_torchtpu/worker/tpu_worker.py TPUWorker.determine_available_memory
  @0095cdcb, utils.compute_hbm_budget).
- Hybrid models (KDA + MLA): vLLM groups the layers so every group holds as many layers (K3: 24 MLA, 69 KDA
  -> 1 attention group of 24 and 3 state groups of 24), one tensor a group slot shared by the groups, so a
  block id costs page_bytes x group_size; a request holds cdiv(max_model_len, block) blocks of the attention
  group and 1 of each state group (vllm/v1/core/kv_cache_utils.py _report_kv_cache_config,
  get_max_concurrency_for_kv_cache_config, _get_kv_cache_groups_uniform_page_size; read in stored copies,
  commit not pinned; from 0.20.1 the logged tokens are max_concurrency x max_model_len).
"""

from __future__ import annotations

from k3plan.engines.engine import WEIGHTS_SOURCE, HbmWorker
from k3plan.engines.release import Release
from k3plan.engines.vllm.attention_config import SM100_FAMILY
from k3plan.engines.vllm.cudagraph import CaptureNeed, CudagraphEstimate
from k3plan.engines.vllm.dsv4_pages import (
    REPORT_SOURCES,
    V4_BLOCK_SOURCE,
    V4_DEFAULT_BLOCK,
    V41_BLOCK_SOURCE,
    Dsv4Pages,
    dsv4_pages,
    dsv4_unified_pages,
    dsv41_pages,
    v4_groups_block,
    v41_default_block,
    with_mtp_layers,
)
from k3plan.engines.vllm.dsv4_workspace import (
    dspark_runner_buffers,
    dsv4_forward_live,
    dsv4_indexer_live,
    dsv4_model_buffers,
    dsv4_profile_workspace,
    dsv4_rocm_forward_live,
    dsv4_rocm_model_buffers,
    dsv4_rocm_profile_workspace,
    dsv4_rocm_wo_a_bf16,
    dsv41_dspark_profile,
    dsv41_model_buffers,
    dsv41_profile_workspace,
    dsv41_rocm_profile_workspace,
    rocm_forward_applies,
    rocm_forward_unpriced,
)
from k3plan.engines.vllm.extensible import BLOCK_SOURCE as EXT_BLOCK_SOURCE
from k3plan.engines.vllm.extensible import (
    CAPACITY_CHECK_AT,
    DEFAULT_UTILIZATION,
    DEFAULT_UTILIZATION_ESTIMATE,
    EXTENSIBLE_FROM,
    MEASURED_CHECK_AT,
    UTILIZATION_SOURCE,
    WHEEL,
    Measured,
    no_memory_message,
    platform_of,
    too_long_message,
)
from k3plan.engines.vllm.extensible import DEFAULT_BLOCK_SIZE as EXT_DEFAULT_BLOCK
from k3plan.engines.vllm.extensible import UNPRICED as EXTENSIBLE_UNPRICED
from k3plan.engines.vllm.releases import IN_FLIGHT_SOURCE, default_in_flight
from k3plan.engines.vllm.sampler import sampler_profile_peak
from k3plan.engines.vllm.spec import DraftPricing
from k3plan.models.spec import DSV4Dims
from k3plan.structs import Frozen
from k3plan.units import GiB, MiB

# vLLM's decode context parallelism in the KV manager: vllm-project/vllm@bc8282e6 vllm/v1/kv_cache_interface.py
# FullAttentionSpec.max_memory_usage_bytes ("each dcp rank only need save (max_model_len//dcp_world_size) tokens
# locally": cdiv(max_model_len, dcp x pcp)); MambaSpec's is not divided; the reported size is multiplied by the DCP
# size (the Kimi-K2-Thinking recipe's start log, vllm-project/recipes@0d218d1e: "Multiplying the GPU KV cache size by
# the dcp_world_size 8.")
DCP_SOURCE = (
    "vllm-project/vllm@bc8282e6 vllm/v1/kv_cache_interface.py FullAttentionSpec.max_memory_usage_bytes "
    "(cdiv(max_model_len, dcp)); the logged size multiplied by the DCP size (vllm-project/recipes@0d218d1e "
    "moonshotai/Kimi-K2-Think.md)"
)
VLLM_REPORT = (
    "vllm-project/vllm vllm/v1/core/kv_cache_utils.py _report_kv_cache_config (num_blocks // len(kv_cache_groups) "
    "x min block_size) / get_max_concurrency_for_kv_cache_config (read in stored copies, commit not pinned)"
)
# Before 0.9.1 the engine core reports the concurrency as the pool's tokens over max_model_len, unrounded to blocks
# (the 0.8.4, 0.8.5 and 0.9.0 wheels (PyPI) vllm/v1/core/kv_cache_utils.py _get_kv_cache_config_uniform_type:
# max_concurrency = num_tokens / max_model_len); from the 0.9.1 wheel num_blocks over a request's blocks
# (get_max_concurrency_for_kv_cache_config)
CONCURRENCY_BY_BLOCKS_FROM: Release = (0, 9, 1)
CONCURRENCY_BY_TOKENS_SOURCE = (
    "vllm 0.8.4 / 0.8.5 / 0.9.0 wheels (PyPI) vllm/v1/core/kv_cache_utils.py _get_kv_cache_config_uniform_type "
    "(max_concurrency = num_tokens / max_model_len); num_blocks over a request's blocks from the 0.9.1 wheel"
)
# The "GPU KV cache size" vLLM logs: to 0.20.0 num_blocks // len(kv_cache_groups) x the smallest group block (x the
# DCP x PCP size), which for a hybrid model counts every group's blocks as attention blocks (read in the 0.11.0-0.20.0
# wheels (PyPI), v1/core/kv_cache_utils.py _report_kv_cache_config); from 0.20.1 int(max_concurrency x max_model_len),
# 'the total tokens of context the pool can hold at peak utilization' ('a naive num_blocks // num_groups * block_size
# formula underestimates capacity for these models'; DCP / PCP already in the concurrency: the 0.20.1, 0.20.2 and
# 0.21.0 wheels' _report_kv_cache_config, get_kv_cache_capacity in the 0.26.0-0.34.0 wheels)
TOKENS_BY_CONCURRENCY_FROM: Release = (0, 20, 1)
TOKENS_BY_CONCURRENCY_SOURCE = (
    "vllm 0.20.1 wheel (PyPI) vllm/v1/core/kv_cache_utils.py _report_kv_cache_config (num_tokens = int(max_concurrency "
    "x max_model_len); the same in 0.20.2 / 0.21.0, get_kv_cache_capacity in the 0.26.0-0.34.0 wheels); "
    "num_blocks // len(kv_cache_groups) x min block_size in the 0.11.0-0.20.0 wheels"
)
# where each refusal is raised (the engine's own message text is quoted from there)
VLLM_CHECK_AT = (
    "vllm-project/vllm@001cabc1 vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory (ValueError), called by "
    "check_enough_kv_cache_memory when the engine core sizes its KV cache"
)
VLLM_OVERRIDE = (
    "vllm-project/vllm@001cabc1 vllm/v1/core/kv_cache_utils.py may_override_num_blocks: 'Overriding num_gpu_blocks=N "
    "with num_gpu_blocks_override=M', applied in get_num_blocks after the memory checks"
)
VLLM_AUTO_FIT = (
    "--max-model-len auto / -1 (vllm/engine/arg_utils.py human_readable_int_or_auto): vllm/v1/core/kv_cache_utils.py "
    "_auto_fit_max_model_len takes the longest length whose blocks fit; read in public excerpts, commit not pinned"
)
KV_MEMORY_SOURCE = (
    "vllm 0.31.0 wheel vllm/config/cache.py CacheConfig.kv_cache_memory_bytes ('Size of KV Cache per GPU in bytes ... "
    "ignores gpu_memory_utilization') and vllm/v1/worker/gpu_worker.py Worker.determine_available_memory (a profile "
    "run, then these bytes returned as the available KV memory: 'skipped memory profiling')"
)
KV_MEMORY_OOM_AT = (
    "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.initialize_kv_cache and the CUDA-graph capture after it: "
    "with --kv-cache-memory-bytes the worker checks the pool against no free memory "
    "(Worker.determine_available_memory, vllm 0.31.0 wheel)"
)
WEIGHTS_OOM_AT = (
    "vllm/model_executor/layers/quantization/mxfp4.py Mxfp4MoEMethod.create_weights, while the model is built "
    "(torch.OutOfMemoryError; the traceback of vllm-project/vllm#51124)"
)
# Where the weights' OOM is raised by the checkpoint's expert format: the routed experts are nearly all of a MoE
# model's bytes, so the allocation that crosses the device is an expert tensor, made by the MoE method the format
# selects, as the model is built (vllm 0.33.0 wheel (PyPI): each file and class below; llm-d's DeepSeek-R1 FP8 on
# one H100 failed allocating 3.50 GiB, one layer's FP8 w2_weight, 256 x 7,168 x 2,048 B:
# tests/engines/cases/vllm-llmd-r1-h100-tp1-16k.yaml)
_QUANT = "vllm/model_executor/layers/quantization/"
WEIGHTS_OOM_AT_BY_FORMAT = {
    "mxfp4": WEIGHTS_OOM_AT,
    "ds_fp4": WEIGHTS_OOM_AT,
    "fp8_block": f"{_QUANT}fp8.py Fp8MoEMethod.create_weights, while the model is built (torch.OutOfMemoryError)",
    "int4_g32": (
        f"{_QUANT}compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py "
        "CompressedTensorsWNA16MoEMethod.create_weights, while the model is built (torch.OutOfMemoryError)"
    ),
    "nvfp4": f"{_QUANT}modelopt.py ModelOptNvFp4FusedMoE.create_weights, while the model is built (torch.OutOfMemoryError)",
    "quark_mxfp4": (
        f"{_QUANT}quark/quark_moe.py QuarkOCP_MX_MoEMethod.create_weights, while the model is built "
        "(torch.OutOfMemoryError)"
    ),
    "bf16": (
        "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py UnquantizedFusedMoEMethod.create_weights, "
        "while the model is built (torch.OutOfMemoryError)"
    ),
}


def weights_oom_at(expert_formats: tuple[str, ...]) -> str:
    """Where vLLM raises the weights' OOM for a checkpoint whose routed experts are in ``expert_formats`` (one
    format: its MoE method's create_weights; none or several: the model's build, the layer unnamed)."""
    if len(expert_formats) == 1 and expert_formats[0] in WEIGHTS_OOM_AT_BY_FORMAT:
        return WEIGHTS_OOM_AT_BY_FORMAT[expert_formats[0]]
    return (
        "vllm/model_executor/model_loader/base_loader.py BaseModelLoader.load_model, a layer's create_weights while "
        "the model is built (torch.OutOfMemoryError)"
    )


VLLM_GPU_WORKER = (
    "vllm-project/vllm vllm/v1/worker/gpu_worker.py Worker.determine_available_memory (requested memory = "
    "utilization x total - non_kv_cache_memory: weights + torch peak increase + non-torch; read in stored copies)"
)

# what GPU vLLM's start check holds that k3plan does not price (the non-torch Figure's source says why): the KV pool
# is then an upper bound, and a STARTS says so with its margin over the check
VLLM_UNPRICED = (
    "vLLM's non-torch memory (cuBLAS and kernel modules; NCCL's buffers connected at their first use in the profile "
    "run: NVLS buffers on more than 2 GPUs, torch's TP-group communicator)"
)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Figure(Frozen, kw_only=False):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    """One engine figure and where it comes from."""

    __coerce__ = False

    value: int | float
    source: str


class EngineSizing(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    """vLLM's KV pool for one device, in the engine's own logged conventions."""

    __coerce__ = False

    engine: str
    weights_bytes: Figure
    kv_pool_bytes: Figure
    kv_pool_tokens: Figure
    block_tokens: Figure
    num_blocks: Figure
    max_concurrency: Figure
    activation_bytes: Figure
    non_torch_bytes: Figure
    starts: bool
    message: str
    raised_at: str = ""  # where the engine raises ``message`` (file and symbol); "" when it starts
    max_model_len: int = 0  # the length the engine runs at (--max-model-len auto: what it fitted)
    reason_code: str = ""  # the verdict's code where the message does not say it ("launch": a backend refuses)
    # how the pool holds a request besides its KV blocks: "layer-groups" (vLLM's hybrid groups, the KDA state in whole
    # layer groups), "compact-slots" (the state in max_num_seqs + 1 slots apart), "dsv4-groups" (DeepSeek-V4's page
    # groups in the engine's records), "full-token" (SGLang's DeepSeek-V4 bytes a full token); "": token pages only
    layout: str = ""
    # a verdict never rests silently on a lower bound: what the start check leaves out of the memory the engine holds
    # ("": nothing known left out), and by how much the start clears its check (bytes; 0 where it does not start)
    unpriced: str = ""
    check_margin_bytes: int = 0
    # the free memory once the KV pool and what the engine allocates with it are in place (SGLang's "Memory pool end.
    # avail mem"); None where not priced
    free_after_pool_bytes: Figure | None = None

    FIGURES = (
        ("weights_bytes", "weights"),
        ("kv_pool_bytes", "kv_pool"),
        ("kv_pool_tokens", "kv_pool_tokens"),
        ("block_tokens", "block_tokens"),
        ("num_blocks", "num_blocks"),
        ("max_concurrency", "max_concurrency"),
        ("activation_bytes", "activation"),
        ("non_torch_bytes", "non_torch"),
    )

    def as_json(self) -> dict[str, object]:
        """Each figure as a number under its own key, its source under ``sources`` (keyed without the unit, so a
        byte count's key holds an int, as every byte count in k3plan's JSON does)."""
        out: dict[str, object] = {"engine": self.engine}
        out.update({key: getattr(self, key).value for key, _ in self.FIGURES})
        out.update(starts=self.starts, message=self.message, raised_at=self.raised_at, max_model_len=self.max_model_len)
        if self.reason_code:
            out["reason_code"] = self.reason_code
        if self.layout:
            out["layout"] = self.layout
        if self.unpriced:
            out["unpriced"] = self.unpriced
        if self.starts:
            out["check_margin_bytes"] = self.check_margin_bytes
        sources = {name: getattr(self, key).source for key, name in self.FIGURES}
        if self.free_after_pool_bytes is not None:
            out["free_after_pool_bytes"] = self.free_after_pool_bytes.value
            sources["free_after_pool"] = self.free_after_pool_bytes.source
        out["sources"] = sources
        return out


def kv_groups(*, n_attention: int, n_state: int) -> tuple[int, int, int]:
    """(group_size, attention groups, state groups) of vLLM's uniform-page grouping: groups of the smallest
    layer count (vLLM _get_kv_cache_groups_uniform_page_size: group_size = min layers of a type, each type
    split into cdiv(layers, group_size) groups)."""
    counts = [n for n in (n_attention, n_state) if n > 0]
    size = min(counts) if counts else 1
    return size, cdiv(n_attention, size) if n_attention else 0, cdiv(n_state, size) if n_state else 0


def vllm_kv_pool(
    *,
    engine: str,
    utilization: float,
    visible_bytes: int,
    weights_bytes: int,
    weights_source: str = WEIGHTS_SOURCE,
    activation_bytes: Figure,
    non_torch_bytes: Figure,
    visible_source: str,
    page_bytes: int,
    block_tokens: int,
    block_source: str,
    n_attention: int,
    n_state: int,
    max_model_len: int,
    worker_source: str,
    hbm_worker: HbmWorker | None = None,
    auto_max_model_len: bool = False,
    num_gpu_blocks_override: int | None = None,
    compact_state_bytes: int | None = None,
    max_num_seqs: int = 1,
    dsv4: Dsv4Pages | None = None,
    max_num_batched_tokens: int = 0,
    backend_refusal: tuple[str, str] | None = None,
    dcp: int = 1,
    in_flight_batches: int = 1,
    unpriced: str = "",
    graph_profile_oom: tuple[int, str, str] | None = None,
    kv_cache_memory_bytes: int | None = None,
    extensible_platform: str | None = None,
    expert_formats: tuple[str, ...] = (),
    concurrency_by_tokens: bool = False,
    tokens_by_concurrency: bool = False,
    compiled_step: tuple[int, str] | None = None,
    pool_devices: int = 1,
    attention_dp: int = 1,
    attention_copies: str = "",
    capture_oom: tuple[int, int, str, str] | None = None,
    compiled_loop: tuple[int, str] | None = None,
) -> EngineSizing:
    """vLLM's pool as its worker and KV manager size it (module docstring); ``starts``: the engine's start
    checks pass (available > 0 and one max_model_len request fits: vLLM's _check_enough_kv_cache_memory).
    ``compact_state_bytes``: one KDA layer's unpadded state slot, where the engine keeps the state apart from the
    pages (a TPU engine's compact-mamba layout, ``hbm_worker.compact_at``): each of the ``group_size`` layer regions
    first holds ``max_num_seqs + 1`` slots of every state group, the rest is attention blocks of ``page_bytes``;
    where that leaves none, the torch_tpu plugin refuses and tpu-inference keeps vLLM's uniform pages
    (``hbm_worker.compact_short``). ``hbm_worker``: the TPU engine whose worker sizes the pool (its refusals' words
    and places); None: GPU vLLM's.
    ``dsv4``: DeepSeek-V4's groups on GPU vLLM (engines/vllm/dsv4_pages.py): a block costs their packed slot, a
    request holds each group's pages at ``max_model_len`` and ``max_num_batched_tokens``. ``backend_refusal``:
    (message, where) of an attention backend's metadata builder that refuses the configuration when the KV cache is
    initialized, after the pool is sized and checked (engines/vllm/attention_config.py start_error).
    ``in_flight_batches``: the batches of max_num_batched_tokens a windowed V4 group holds pages for
    (``in_flight_batches`` below; 1: the cited v0.25.0 code). ``unpriced``: what the engine holds that
    ``non_torch_bytes`` leaves out (the pool then an upper bound, the verdict said to rest on it).
    ``kv_cache_memory_bytes``: vLLM's --kv-cache-memory-bytes, the pool as given (utilization ignored: the worker
    returns it after a profile run, KV_MEMORY_SOURCE); the start then fails where the weights, the profiled peak, the
    graphs' estimate and that pool do not fit the device together.
    ``extensible_platform``: 'cuda' or 'rocm' where vLLM's extensible KV cache sizes the pool (from 0.34.0:
    engines/vllm/extensible.py): the pool is what it measures after warmup and capture, ``non_torch_bytes`` then the
    graphs' memory held and ``activation_bytes`` the transient peak kept free, and the start is checked twice, on the
    capacity reserved before warmup (no graph estimate) and on the measured blocks; None: the estimate-based sizing.
    ``tokens_by_concurrency``: the "GPU KV cache size" logged as int(max concurrency x max_model_len) (from 0.20.1,
    ``TOKENS_BY_CONCURRENCY_FROM``); False: num_blocks // the groups x the smallest block (x DCP), as to 0.20.0.
    ``compiled_step``: (bytes a device, source) of the temporaries a TPU engine's step compiled after the pool holds
    (``hbm_worker.step_temporaries``): the start fails where they exceed the 1 - utilization share left.
    ``pool_devices``: the devices whose pools the engine's worker sums before vLLM counts the blocks
    (``hbm_worker.sums_devices``: tpu-inference's mesh, every block split across it): the uniform pages' blocks, the
    tokens and the one-request check are over that many devices' ``available``; the pool stays a device's. 1: one
    device's (GPU vLLM, the torch_tpu plugin); DeepSeek-V4's groups and models with KDA state groups are counted a
    device either way (their cache creation not read for it).
    ``attention_dp``: the ranks the pinned arrays' blocks are split over (the BATCH axis; 1 without attention DP):
    where --num-gpu-blocks-override pins a pool with state groups and the engine gives every layer its own array
    (``hbm_worker.pinned_layers``), a device holds num_gpu_blocks_override // attention_dp blocks of every attention
    layer's page and every state layer's slot (``compact_state_bytes``), whatever the budget left; the start then
    fails where the weights and those arrays overflow the device, and the compiled step's temporaries are checked
    against what they leave rather than against the 1 - utilization share.
    ``attention_copies``: where the compiled step holds a copy of every attention layer's cache, its source
    (``hbm_worker.attention_cache_copies``): a device's attention pages (the pinned share, or the blocks the pool holds)
    x the attention layers are added to ``compiled_step``; "": none.
    ``capture_oom``: (bytes the CUDA-graph capture takes after the pool at least, bytes the pool leaves it, the
    engine's error, where raised): the start fails there where the first exceeds the second (engines/vllm/
    cudagraph.py capture_need); None: not checked.
    ``compiled_loop``: (bytes a device, source) of the temporaries of a second executable the engine compiles after
    the pool (``hbm_worker.loop_temporaries``: tpu-inference's fused decode loop), checked after the step's against the
    same room; None: none compiled or not priced."""
    cap = int(visible_bytes * utilization)
    available = cap - weights_bytes - int(activation_bytes.value) - int(non_torch_bytes.value)
    resident = weights_bytes + int(activation_bytes.value) + int(non_torch_bytes.value)
    given = kv_cache_memory_bytes is not None and kv_cache_memory_bytes > 0 and hbm_worker is None
    if given:
        assert kv_cache_memory_bytes is not None
        available = kv_cache_memory_bytes
    ext = capacity = None
    if extensible_platform is not None and not given and hbm_worker is None:
        # the measured pool (extensible.Measured); the capacity the engine core reserves and checks before warmup:
        # requested - weights - the profile's peak, no graph estimate (profile_cudagraph_memory returns 0)
        ext = Measured(
            visible_bytes=visible_bytes,
            utilization=utilization,
            resident=weights_bytes + int(non_torch_bytes.value),
            transient_peak=int(activation_bytes.value),
            platform=extensible_platform,
        )
        capacity = ext.requested - weights_bytes - int(activation_bytes.value)
        available = min(ext.bytes, max(capacity, 0))  # finalize_extensible_kv_cache: at most the capacity's blocks
    size, att, st = kv_groups(n_attention=n_attention, n_state=n_state)
    per_block = page_bytes * size
    mesh = pool_devices if pool_devices > 1 and dsv4 is None and not st and hbm_worker is not None else 1
    blocks = max(available, 0) * mesh // per_block if per_block > 0 else 0
    blocks_src = f"available // (page {page_bytes:,} B x group size {size}): {att} attention + {st} state groups"
    if mesh > 1:
        assert hbm_worker is not None
        blocks_src = (
            f"available x {mesh} devices // (page {page_bytes:,} B x group size {size}): {att} attention + {st} state "
            f"groups ({hbm_worker.sums_devices})"
        )
    compact_short = False
    if compact_state_bytes is not None and st and num_gpu_blocks_override is None:
        slots = max_num_seqs + 1  # + 1: slot 0, the null / sentinel slot
        per_region = max(available, 0) // size
        state_region = st * slots * compact_state_bytes
        room = per_region - state_region
        compact_blocks = max(room, 0) // (att * page_bytes) if att and page_bytes else 0
        compact_at = hbm_worker.compact_at if hbm_worker is not None else "the compact state slots"
        short = available > 0 and (room <= 0 or compact_blocks <= 0)
        if short and hbm_worker is not None and hbm_worker.compact_short == "uniform":
            blocks_src += f" (the compact sizing skipped: the slots leave no attention block, {compact_at})"
        else:
            compact_short, blocks = short, compact_blocks
            blocks_src = (
                f"(available // {size} layer regions - {st} state groups x {slots} slots (max_num_seqs + 1) x "
                f"{compact_state_bytes:,} B) // ({att} x page {page_bytes:,} B): {compact_at}"
            )
    if num_gpu_blocks_override is not None and available > 0:  # may_override_num_blocks, after the memory checks
        blocks_src = (
            f"--num-gpu-blocks-override {num_gpu_blocks_override:,} instead of the {blocks:,} the memory holds "
            f"({VLLM_OVERRIDE})"
        )
        blocks = num_gpu_blocks_override
    pinned = 0  # the arrays a device holds where the override pins every layer's own array (hbm_worker.pinned_layers)
    if (
        num_gpu_blocks_override is not None
        and hbm_worker is not None
        and hbm_worker.pinned_layers
        and st
        and compact_state_bytes is not None
        and dsv4 is None
    ):
        share = num_gpu_blocks_override // max(attention_dp, 1)
        pinned = share * (n_attention * page_bytes + n_state * compact_state_bytes)
        blocks_src += (
            f"; held a device: {share:,} blocks x ({n_attention} attention layers x {page_bytes:,} B + {n_state} state "
            f"layers x {compact_state_bytes:,} B) = {pinned:,} B, every layer its own array ({hbm_worker.pinned_layers})"
        )
    if attention_copies and compiled_step is not None and hbm_worker is not None and dsv4 is None:
        held_blocks = num_gpu_blocks_override // max(attention_dp, 1) if num_gpu_blocks_override and pinned else blocks
        copies = n_attention * held_blocks * page_bytes
        compiled_step = (
            compiled_step[0] + copies,
            f"{compiled_step[1]}; + the attention caches' copies, {n_attention} layers x {held_blocks:,} blocks x "
            f"{page_bytes:,} B = {copies:,} B ({attention_copies})",
        )
    groups = att + st
    tokens = blocks // groups * block_tokens * dcp if groups else 0
    # DCP (DCP_SOURCE): a request's attention pages hold cdiv(max_model_len, dcp) tokens a rank; state pages do not split
    per_request = cdiv(cdiv(max_model_len, dcp), block_tokens) * att + st
    conc = blocks / per_request if per_request else 0.0
    asked_len, fitted = max_model_len, False
    # the blocks a request may take: all of them; under the extensible cache, whose length is fitted again after
    # warmup on (blocks - 1) x a block (finalize_extensible_kv_cache), less the null block
    usable = blocks - 1 if ext is not None else blocks
    if auto_max_model_len and per_request > usable and att and usable > st:  # _auto_fit_max_model_len
        max_model_len = (usable - st) // att * block_tokens * dcp
        per_request = cdiv(cdiv(max_model_len, dcp), block_tokens) * att + st
        conc, fitted = blocks / per_request, True
    held = f"cdiv({max_model_len}, DCP {dcp})" if dcp > 1 else f"{max_model_len}"  # a rank's tokens (DCP_SOURCE)
    conc_src = f"num_blocks / (cdiv({held}, {block_tokens}) x {att} + {st}): {VLLM_REPORT}" + (
        f"; {DCP_SOURCE}" if dcp > 1 else ""
    )
    if concurrency_by_tokens and groups and max_model_len > 0:  # before 0.9.1: the tokens over max_model_len
        conc = tokens / max_model_len
        conc_src = (
            f"GPU KV cache size {tokens:,} tokens / max_model_len {max_model_len:,}: {CONCURRENCY_BY_TOKENS_SOURCE}"
        )
    need, checked = per_request * per_block, available  # the check's bytes and the memory it plans against
    if mesh > 1:
        checked = available * mesh  # the worker's sum the check reads (hbm_worker.sums_devices)
    if dsv4 is not None:  # DeepSeek-V4: one pool of packed blocks, every group's pages drawn from it
        per_block = dsv4.block_bytes
        blocks = max(available, 0) // per_block
        in_flight = max_num_batched_tokens * in_flight_batches  # the tokens a windowed group holds pages for
        blocks_src = f"available // {per_block:,} B a block: {dsv4.text(max_model_len=max_model_len, max_num_batched_tokens=in_flight)}"
        if in_flight_batches > 1:
            blocks_src += f" ({in_flight_batches} batches in flight: {IN_FLIGHT_SOURCE})"
        if num_gpu_blocks_override is not None and available > 0:
            blocks = num_gpu_blocks_override
        max_model_len, fitted = asked_len, False
        if auto_max_model_len and available > 0:  # _auto_fit_max_model_len over the V4 groups' own bytes
            fit = dsv4_longest_fit(
                dsv4, available=available - dsv4.check_reserve_bytes, max_model_len=asked_len, chunk=in_flight
            )
            fitted, max_model_len = 0 < fit < asked_len, fit or asked_len
        per_request = dsv4.blocks_per_request(max_model_len=max_model_len, max_num_batched_tokens=in_flight)
        reported = dsv4.reported_blocks_per_request(max_model_len=max_model_len, max_num_batched_tokens=in_flight)
        conc = blocks / reported
        need = per_request * dsv4.check_block_bytes
        checked = available - dsv4.check_reserve_bytes  # from 0.29.0 less the null block (dsv4_pages.V4_FORM_SOURCES)
        conc_src = (
            f"num_blocks / {per_request:,} blocks a request (each group's pages summed): {blocks_src}"
            if reported == per_request
            else f"num_blocks / {reported:,} blocks a request as vLLM {dsv4.form} reports it (the groups' bytes a "
            f"request over the first group's page; {per_request:,} pages drawn from the pool, {REPORT_SOURCES}): "
            f"{blocks_src}"
        )
    # the "GPU KV cache size" line, as the release logs it (TOKENS_BY_CONCURRENCY_SOURCE)
    tokens_src = (
        f"num_blocks // {groups} KV groups x block {block_tokens}"
        + (f" x DCP {dcp} ({DCP_SOURCE})" if dcp > 1 else "")
        + f": {VLLM_REPORT}"
    )
    if tokens_by_concurrency:
        tokens = int(conc * max_model_len)
        tokens_src = (
            f"int(max concurrency {conc:.4f} x max_model_len {max_model_len:,}"
            + (
                f", DCP {dcp} in the concurrency: cdiv(max_model_len, {dcp}) tokens a rank, {DCP_SOURCE}"
                if dcp > 1
                else ""
            )
            + f"): {TOKENS_BY_CONCURRENCY_SOURCE}"
        )
    elif dsv4 is not None:  # to 0.20.0: every V4 group's blocks over the groups, at the smallest group's block
        least = min(g.block_tokens for g in dsv4.groups)
        tokens = blocks // len(dsv4.groups) * least * dcp
        tokens_src = (
            f"num_blocks // {len(dsv4.groups)} V4 groups x the smallest group block {least}: "
            f"{TOKENS_BY_CONCURRENCY_SOURCE}"
        )
    ext_refusal: tuple[str, str] | None = None
    if ext is not None and capacity is not None:
        # the null block the BlockPool holds back: a block's bytes (the V4 groups' own reserve)
        null = dsv4.check_reserve_bytes if dsv4 is not None else per_block
        before = capacity - null  # get_kv_cache_configs' check_memory on the capacity
        checked = blocks * per_block - null if per_block > 0 else 0  # shrink_kv_cache_configs: (blocks - 1) x a block
        # the two checks in their order: on the capacity before warmup, on the measured blocks after it
        for room, warmed, where in ((before, False, CAPACITY_CHECK_AT), (checked, True, MEASURED_CHECK_AT)):
            if room <= 0:
                ext_refusal = (no_memory_message(utilization, after_warmup=warmed), where)
            elif need > room:
                too_long = too_long_message(
                    max_model_len=max_model_len, need=need, available=room, utilization=utilization, after_warmup=warmed
                )
                ext_refusal = (too_long, where)
            if ext_refusal is not None:
                break
    gib = GiB
    raised_at, code = "", ""
    # the HBM the compiled step's temporaries run in: the 1 - utilization share, or what the pinned arrays leave
    step_room = visible_bytes - weights_bytes - pinned if pinned else visible_bytes - cap
    # what leaves a TPU engine's compiled step and loop their room (step_room), as their refusals say it
    left = (
        f"the weights and the pinned arrays ({(weights_bytes + pinned) / gib:.2f} GiB) leave"
        if pinned
        else f"--gpu-memory-utilization {utilization} leaves"
    )
    if weights_bytes > visible_bytes:
        starts = False
        oom = "torch.OutOfMemoryError: CUDA out of memory" if hbm_worker is None else hbm_worker.weights_oom
        message = (
            f"{oom} while loading the weights: {weights_bytes / gib:.2f} GiB a device of the "
            f"{visible_bytes / gib:.2f} GiB the engine sees"
        )
        raised_at = weights_oom_at(expert_formats) if hbm_worker is None else hbm_worker.weights_oom_at
    elif given and resident + available > visible_bytes:
        starts = False
        message = (
            f"torch.OutOfMemoryError: CUDA out of memory: the KV cache of --kv-cache-memory-bytes "
            f"{available / gib:.2f} GiB beside the weights, the profiled peak and the graphs' estimate "
            f"({resident / gib:.2f} GiB) exceeds the {visible_bytes / gib:.2f} GiB the engine sees"
        )
        raised_at = KV_MEMORY_OOM_AT
    elif graph_profile_oom is not None and weights_bytes + graph_profile_oom[0] > visible_bytes:
        starts = False
        message = (
            f"torch.OutOfMemoryError: CUDA out of memory in CUDA graph profiling: {graph_profile_oom[1]}, "
            f"{(weights_bytes + graph_profile_oom[0]) / gib:.2f} GiB with the weights' {weights_bytes / gib:.2f} of the "
            f"{visible_bytes / gib:.2f} GiB the engine sees"
        )
        raised_at = graph_profile_oom[2]
    elif ext_refusal is not None:
        starts, (message, raised_at) = False, ext_refusal
    elif compact_short:
        starts = False
        message = (
            f"ValueError: Compact-mamba KV sizing does not fit: the state slots of {max_num_seqs:,} sequences leave no "
            "attention blocks in the KV budget. Raise `gpu_memory_utilization` or lower `max_num_seqs`."
        )
        raised_at = hbm_worker.compact_at if hbm_worker is not None else ""
    elif available <= 0:
        starts = False
        if hbm_worker is not None:
            used = weights_bytes + int(activation_bytes.value)
            message = hbm_worker.no_pool.format(
                used=round(used / gib, 2), cap=round(cap / gib, 2), over=round((used - cap) / gib, 2), util=utilization
            )
            raised_at = hbm_worker.no_pool_at
        else:
            holding = weights_bytes + int(activation_bytes.value) + int(non_torch_bytes.value)
            # the worker logs the figure ('Available KV cache memory: -13.51 GiB', InferenceX#3336) before the KV
            # manager's check raises (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory)
            message = (
                f"Available KV cache memory: {available / gib:.2f} GiB; ValueError: No available memory for the cache "
                "blocks. Try increasing `gpu_memory_utilization` when initializing the engine. (weights, activation "
                f"and non-torch {holding / gib:.2f} GiB of the {cap / gib:.2f} GiB --gpu-memory-utilization "
                f"{utilization} allows)"
            )
            raised_at = VLLM_CHECK_AT
    elif conc < 1 or need > checked:
        starts = False
        message = (
            f"ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({need / gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({checked / gib:.2f} GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
        )
        raised_at = VLLM_CHECK_AT
    elif backend_refusal is not None:
        starts, (message, raised_at), code = False, backend_refusal, "launch"
    elif capture_oom is not None and capture_oom[0] > capture_oom[1]:
        # the graphs are captured once the KV cache is initialized (Worker.compile_or_warm_up_model)
        starts, message, raised_at = False, capture_oom[2], capture_oom[3]
    elif pinned and hbm_worker is not None and weights_bytes + pinned > visible_bytes:
        starts = False
        message = (
            f"RESOURCE_EXHAUSTED allocating the KV cache: the pinned arrays, {pinned / gib:.2f} GiB a device, beside "
            f"the weights' {weights_bytes / gib:.2f} GiB exceed the {visible_bytes / gib:.2f} GiB the engine sees"
        )
        raised_at = hbm_worker.pinned_layers
    elif compiled_step is not None and hbm_worker is not None and compiled_step[0] > step_room:
        starts = False
        message = (
            f"RESOURCE_EXHAUSTED compiling the step at its largest token bucket, after the KV cache: its temporaries, "
            f"at least {compiled_step[0] / gib:.2f} GiB, exceed the {step_room / gib:.2f} GiB {left} "
            f"({compiled_step[1]})"
        )
        raised_at = hbm_worker.source
    elif compiled_loop is not None and hbm_worker is not None and compiled_loop[0] > step_room:
        starts = False
        message = (
            f"RESOURCE_EXHAUSTED compiling the fused decode loop, after the KV cache and the step: its temporaries, "
            f"{compiled_loop[0] / gib:.2f} GiB, exceed the {step_room / gib:.2f} GiB {left} ({compiled_loop[1]})"
        )
        raised_at = compiled_loop[1]
    else:
        starts = True
        message = f"GPU KV cache size: {tokens:,} tokens; Maximum concurrency for {max_model_len:,} tokens per request: {conc:.2f}x"
        if fitted:
            message = (
                f"Auto-fit max_model_len: reduced from {asked_len} to {max_model_len} to fit in available GPU memory "
                f"({VLLM_AUTO_FIT}); {message}"
            )
    pool_src = (
        f"--kv-cache-memory-bytes {available:,} B, the pool as given ({KV_MEMORY_SOURCE})"
        if given
        else f"the extensible KV cache's measured pool, u {utilization} ({UTILIZATION_SOURCE}), visible "
        f"{visible_bytes:,} B ({visible_source}): {ext.text}; at most the capacity reserved before warmup, "
        f"{capacity:,} B (requested - weights - the profile's peak, no graph estimate)"
        if ext is not None
        else f"int({utilization} x {visible_bytes:,} B visible ({visible_source})) - weights {weights_bytes:,} B - "
        f"activation - non-torch: {worker_source}"
    )
    return EngineSizing(
        engine=engine,
        weights_bytes=Figure(weights_bytes, weights_source),
        kv_pool_bytes=Figure(pinned, f"the pinned arrays: {blocks_src}")
        if pinned
        else Figure(max(available, 0), pool_src),
        kv_pool_tokens=Figure(tokens, tokens_src),
        block_tokens=Figure(block_tokens, block_source),
        num_blocks=Figure(blocks, blocks_src),
        max_concurrency=Figure(round(conc, 2), conc_src),
        activation_bytes=activation_bytes,
        non_torch_bytes=non_torch_bytes,
        starts=starts,
        message=message,
        raised_at=raised_at,
        max_model_len=max_model_len,
        reason_code=code,
        unpriced=unpriced,
        check_margin_bytes=max(checked - need, 0) if starts else 0,
        layout=(
            "dsv4-groups"
            if dsv4 is not None
            else "compact-slots"
            if compact_state_bytes is not None and st and num_gpu_blocks_override is None
            else "layer-groups"
            if st
            else ""
        ),
    )


def dsv4_longest_fit(dsv4: Dsv4Pages, *, available: int, max_model_len: int, chunk: int) -> int:
    """vLLM's _estimate_max_model_len_from_groups for V4: the longest length whose request's blocks, at the start
    check's bytes a block, fit ``available`` (a binary search; 0 when one token does not fit)."""

    def fits(n: int) -> bool:
        return (
            dsv4.blocks_per_request(max_model_len=n, max_num_batched_tokens=chunk) * dsv4.check_block_bytes <= available
        )

    lo, hi, best = 1, max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def engine_sizing(
    *,
    stack_name: str,
    kv_pool_method: str | None,
    reserve_fraction: float,
    hardware: str,
    visible_bytes: int,
    visible_source: str,
    weights_bytes: int,
    expert_pad: tuple[int, int, str] | None = None,
    weights_source: str = WEIGHTS_SOURCE,
    vision_bytes: int = 0,
    temp_bytes: int,
    temp_source: str,
    page_bytes: int | None,
    kv_bytes_per_token_layer: int,
    block_tokens: int,
    paging_source: str,
    n_mla: int,
    n_kda: int,
    max_model_len: int,
    auto_max_model_len: bool = False,
    num_gpu_blocks_override: int | None = None,
    state_bytes_per_layer_unpadded: int = 0,
    compact_state: bool = False,
    max_num_seqs: int = 1,
    block_override: int | None = None,
    dsv4: DSV4Dims | None = None,
    max_num_batched_tokens: int = 0,
    draft: DraftPricing | None = None,
    vendor: str = "",
    vocab_size: int = 0,
    cudagraph: CudagraphEstimate | None = None,
    captures_graphs: bool = False,
    capture: tuple[CaptureNeed, str] | None = None,
    backend_refusal: tuple[str, str] | None = None,
    fp4_indexer: bool = False,
    nvfp4: bool = False,
    dcp: int = 1,
    release: Release | None = None,
    hidden_size: int = 0,
    attention_heads: int = 0,
    attention_backend: str = "",
    q_lora_rank: int = 0,
    tp_attention: int = 0,
    in_flight: int | None = None,
    kv_cache_memory_bytes: int | None = None,
    utilization_given: bool = False,
    mega_moe: tuple[int, str] | None = None,
    expert_formats: tuple[str, ...] = (),
    eplb_state: tuple[int, str] | None = None,
    mla_workspace: tuple[int, str] | None = None,
    model_buffers: tuple[int, str] | None = None,
    moe_workspace: tuple[int, str] | None = None,
    rocm_moe: tuple[int, str] | None = None,
    moe_moment: tuple[int, str] | None = None,
    rocm_aiter_linear: bool = False,
    rocm_wo_a_fp8: bool | None = None,
    rocm_aiter_moe: bool = False,
    rocm_fp8_pad: tuple[int, str] | None = None,
    k3_scale_pad: tuple[int, str] | None = None,
    all2all: tuple[int, str] | None = None,
    hybrid_kv_off: bool = False,
    step_model: tuple[str, int, int, int, int, bool] | None = None,
    step_options: dict[str, str] | None = None,
    graph_profile_oom: tuple[int, str, str] | None = None,
    mesh_devices: int = 1,
    mm_profile: tuple[int, int, str] | None = None,
) -> EngineSizing | None:
    """The sizing of the stack's engine from a fit's numbers; None where the stack's pool is not vLLM's
    (kv_pool method utilization_minus_profile: GPU vLLM; utilization_minus_resident: the torch_tpu plugin).
    ``captures_graphs``: the command captures CUDA graphs after the pool (a GPU command without --enforce-eager or
    cudagraph_mode NONE): a STARTS then names what the capture takes beyond the estimate, out of what the
    utilization leaves (a verdict never rests silently on a lower bound).
    ``capture``: what the command's CUDA-graph capture takes after the pool at least and where the engine raises its
    OOM (engines/vllm/cudagraph.py capture_need): the start fails where it exceeds the memory the pool leaves
    (``capture_room``); None: not checked.
    ``cudagraph``: vLLM's CUDA-graph estimate for the command (engines/vllm/cudagraph.py), subtracted with the
    non-torch memory (Worker.determine_available_memory: requested - non-KV - the estimate); None: not priced.
    ``release``: the vLLM release the command runs (fit --engine-version, else the newest read: engines/vllm/
    releases.py; None: the code each rule cites). ``hybrid_kv_off``: --disable-hybrid-kv-cache-manager on
    DeepSeek-V4, its caches in one group of full-attention pages (engines/vllm/dsv4_pages.py dsv4_unified_pages).
    ``attention_backend``: --attention-config's backend ("": vLLM's choice), for V4's eager scratch pool's heads.
    ``hidden_size``, ``attention_heads`` (a device's), ``q_lora_rank``: the model's, for DeepSeek-V4's model buffers and
    dummy forward (0: not priced); ``tp_attention``: the attention TP group the logits are gathered over.
    ``in_flight``: the batches of max_num_batched_tokens a windowed V4 group holds pages for, the stack's
    (Stack.windowed_in_flight, set from a serve command); None: the newest release's default
    (engines/vllm/releases.py default_in_flight), the value the budget's charge reads too.
    ``expert_pad``: the stack's padding of TP-split expert shards (Stack.expert_pad, engines/vllm/moe_padding.py),
    already in ``weights_bytes``; a drafter's experts, added here, are padded alike. ``weights_source``: where
    ``weights_bytes`` comes from (fit passes the budget's own weights line).
    ``mega_moe``: DeepGEMM Mega MoE's symmetric buffer a GPU and its source (engines/vllm/mega_moe.py
    mega_moe_non_torch), added to the non-torch increase; None: the command runs no such buffer.
    ``eplb_state``: the EPLB state the model adds at load (engines/vllm/eplb.py eplb_state), in the load's
    measurement and so in the weights; None: EPLB off.
    ``model_buffers``: (bytes a device, source) of buffers the engine's model holds beside its weights, inside the
    weights' measurement (the command's reading, ServeQuestion.model_buffers); None: none.
    ``mla_workspace``: the MLA decode workspaces the attention backend's selection allocates while the model is built
    (engines/vllm/mla_block.py mla_decode_workspace), in the load's measurement and so in the weights; None: none.
    ``moe_workspace``: the MoE workspace the profile run's dummy forward leaves allocated under the sampler warm-up and
    its source (engines/vllm/moe_workspace.py profile_moe_workspace); None or 0: none priced.
    ``rocm_moe``: what DeepSeek-V4's MoE holds a token in vLLM's ROCm dummy forward beyond the layer's tensors and its
    source (engines/vllm/dsv4_workspace.py rocm_moe_rows); None: a model or GPU it does not serve.
    ``moe_moment``: what DeepSeek-V4's decoder layer holds at its MoE kernel in vLLM's CUDA dummy forward beyond the
    WorkspaceManager's buffer, and its source (engines/vllm/moe_workspace.py trtllm_mxfp4_moe_moment); the forward's
    peak where it exceeds the attention's; None: not priced.
    ``rocm_aiter_linear``: whether the command runs vLLM's AITER linear on ROCm (dsv4_workspace.py aiter_linear_on),
    for V4's normed qr in FP8 from 0.29.0. ``rocm_wo_a_fp8``: whether its attention keeps wo_a FP8 (dsv4_workspace.py
    wo_a_fp8_on: no bf16 copies, the FP8 projection from 0.31.0); None: taken as on where the release and GPU allow.
    ``rocm_aiter_moe``: whether V4's experts run AITER's fused_moe (dsv4_workspace.py aiter_fused_moe_runs).
    ``rocm_fp8_pad``: the 256 B a row vLLM's ROCm build pads block-fp8 linear weights by after loading, in the load's
    measurement and so in the weights, and its source (engines/vllm/rocm_fp8_pad.py); None: none.
    ``k3_scale_pad``: the padding AITER's w2 scale shuffle adds to Kimi-K3's routed experts on gfx950, in the load's
    measurement and so in the weights, and its source (engines/vllm/kimi_k3_memory.py k3_w2_scale_pad); None: none.
    ``all2all``: the expert-parallel all2all backend's buffers a GPU, made at load outside torch's allocator, and their
    source (engines/vllm/all2all_buffers.py all2all_non_torch), added to the non-torch increase; None: none.
    ``step_model``: (architecture, MoE layers, top-k, the experts' width, attention-DP ranks, expert parallelism as
    the command sets it) and ``step_options`` (the
    stack options the command set), for the temporaries a TPU engine's compiled step holds (HbmWorker.step_temporaries,
    over ``max_num_batched_tokens`` a rank); None: not priced.
    ``graph_profile_oom``: (bytes beside the weights, what they are, where raised) that CUDA-graph profiling needs at
    once (engines/vllm/mla_workspace.py graph_profile_need): the start dies there where the weights and they exceed
    the visible memory; None: not priced.
    ``mm_profile``: (bytes live beside the language model's dummy run and sampler warm-up, the encoder's own peak
    before them, source) of the profile run's multimodal dummy batch (engines/vllm/mm_profile.py): the torch peak is
    the larger of the encoder's peak and the language model's peak plus the live bytes; None: none priced."""
    if kv_pool_method not in ("utilization_minus_profile", "utilization_minus_resident"):
        return None
    # the torch_tpu plugin's per-layer layout (paging 'separate'): its own page, --block-size when a command gives one,
    # and the KDA state in compact slots apart from it (the engine's HbmWorker.compact_at)
    compact = compact_state and kv_pool_method == "utilization_minus_resident" and n_kda > 0
    if block_override is not None and not page_bytes:
        block_tokens = block_override
        paging_source = f"--block-size {block_override} (the command's page; the budget above prices its stack's)"
    page = page_bytes if page_bytes else block_tokens * kv_bytes_per_token_layer
    visible, visible_src = visible_hbm(hardware, visible_bytes, visible_source)
    weights_src = weights_source
    if vision_bytes:
        weights_bytes += vision_bytes
        weights_src += (
            f", + {vision_bytes:,} B: the vision tower, loaded without --language-model-only and without "
            "--limit-mm-per-prompt 0 for every modality it serves (Engine.tower_off_by_limits; counted whole on every "
            "device: its split in the engine was not read)"
        )
    if draft is not None and draft.bytes_per_device:
        weights_bytes += draft.bytes_per_device
        weights_src += f", + {draft.bytes_per_device:,} B: the speculative drafter, {draft.source}"
    if draft is not None and draft.extra_mla_layers:  # the MTP layers' attention caches, in the pool as MLA layers
        n_mla += draft.extra_mla_layers
        paging_source += f"; + {draft.extra_mla_layers} MTP MLA layer(s) in the pool ({draft.source})"
    if eplb_state is not None:
        weights_bytes += eplb_state[0]
        weights_src += f", + {eplb_state[1]}"
    if mla_workspace is not None and mla_workspace[0]:
        weights_bytes += mla_workspace[0]
        weights_src += f", + {mla_workspace[0]:,} B: {mla_workspace[1]}"
    if model_buffers is not None and model_buffers[0]:
        weights_bytes += model_buffers[0]
        weights_src += f", + {model_buffers[0]:,} B: {model_buffers[1]}"
    if expert_pad is not None and draft is not None and draft.expert_bytes_per_device:
        # the budget's weights hold the target's padded shards (Stack.expert_pad); the drafter's experts split alike
        extra = -(-draft.expert_bytes_per_device * (expert_pad[0] - expert_pad[1]) // expert_pad[1])
        weights_bytes += extra
        weights_src += f", + {extra:,} B: the drafter's experts, padded alike"
    if rocm_fp8_pad is not None and kv_pool_method == "utilization_minus_profile":
        weights_bytes += rocm_fp8_pad[0]
        weights_src += f", + {rocm_fp8_pad[1]}"
    if k3_scale_pad is not None and k3_scale_pad[0] and kv_pool_method == "utilization_minus_profile":
        weights_bytes += k3_scale_pad[0]
        weights_src += f", + {k3_scale_pad[1]}"
    if dsv4 is not None and dsv4.csa2 is None and kv_pool_method == "utilization_minus_profile" and vendor == "amd":
        buffers, how = dsv4_rocm_model_buffers(
            dsv4,
            max_num_batched_tokens=max_num_batched_tokens,
            hidden_size=hidden_size,
            mtp_ratios=draft.dsv4_mtp_ratios if draft is not None else (),
        )
        weights_bytes += buffers
        weights_src += f", + {how}"
    if (
        dsv4 is not None
        and kv_pool_method == "utilization_minus_profile"
        and vendor == "nvidia"
        and (dsv4.csa2 is not None or hidden_size)
    ):  # the buffers and RoPE tables the model builds inside the load's measurement: V4.1's, V4's
        buffers, how = (
            dsv41_model_buffers(
                dsv4,
                max_num_batched_tokens=max_num_batched_tokens,
                drafter_row_bytes=draft.target_hidden_row_bytes if draft is not None else 0,
            )
            if dsv4.csa2 is not None
            else dsv4_model_buffers(
                dsv4,
                max_num_batched_tokens=max_num_batched_tokens,
                hidden_size=hidden_size,
                mtp_ratios=draft.dsv4_mtp_ratios if draft is not None else (),
                local_heads=attention_heads or 0,
                release=release,
                attention_backend=attention_backend,
                drafter_reads_hidden=draft is not None
                and (bool(draft.dsv4_mtp_ratios) or draft.target_hidden_row_bytes > 0),
            )
        )
        weights_bytes += buffers
        weights_src += f", + {how}"
    pages = None
    v4 = dsv4 is not None and dsv4.csa2 is None and kv_pool_method == "utilization_minus_profile"
    if v4 and not block_override:
        # DeepSeek-V4 without --block-size: the block vLLM resolves for it, on either GPU vendor (V4_BLOCK_SOURCE)
        block_tokens = V4_DEFAULT_BLOCK
        paging_source = f"{block_tokens} tokens, the block vLLM resolves for DeepSeek-V4 ({V4_BLOCK_SOURCE})"
    groups_block = v4_groups_block(block_override) if v4 else None
    if dsv4 is not None and groups_block:
        # the MTP layers' caches: layers of their compress ratios
        dsv4 = with_mtp_layers(dsv4, draft.dsv4_mtp_ratios if draft is not None else ())
        pages = (
            dsv4_unified_pages(dsv4, block_tokens=groups_block)
            if hybrid_kv_off
            else dsv4_pages(dsv4, block_tokens=groups_block, release=release)
        )
    elif (
        dsv4 is not None
        and dsv4.csa2 is not None
        and kv_pool_method == "utilization_minus_profile"
        and vendor in ("nvidia", "amd")
    ):
        # DeepSeek-V4.1 on vLLM's CUDA backends, and on ROCm with the same specs (engines/vllm/dsv4_pages.py
        # V41_ROCM_SOURCE): its own records, pages and groups
        block_tokens = block_override or v41_default_block(hardware)
        paging_source = (
            f"--block-size {block_override} (the command's)"
            if block_override
            else f"{block_tokens} tokens, the block vLLM resolves for DeepSeek-V4.1 on {hardware} ({V41_BLOCK_SOURCE})"
        )
        pages = dsv41_pages(
            dsv4,
            block_tokens=block_tokens,
            sm100=hardware in SM100_FAMILY,
            fp4_indexer=fp4_indexer,
            nvfp4=nvfp4,
            draft_layers=len(draft.dsv4_mtp_ratios) if draft is not None else 0,
            num_speculative_tokens=draft.num_speculative_tokens if draft is not None else 0,
            release=release,
        )
    hbm_worker = None
    compiled_step: tuple[int, str] | None = None  # a TPU engine's compiled step's temporaries (HbmWorker)
    attention_copies = ""  # where that step copies every attention cache (HbmWorker.attention_cache_copies)
    compiled_loop: tuple[int, str] | None = None  # a second executable after the pool (HbmWorker.loop_temporaries)
    held_workspace = 0  # the MoE workspace in the profile peak (moe_workspace.py)
    sampler_alone = 0  # the sampler warm-up's live tensors alone (GPU vLLM)
    forward_unpriced = ""  # a V4 dummy forward k3plan did not trace (engines/vllm/dsv4_workspace.py)
    if kv_pool_method == "utilization_minus_resident":
        from k3plan.engines.registry import hbm_worker_for

        hbm_worker = hbm_worker_for(stack_name)
        act = Figure(0, f"the worker reads the bytes in use when no temporary is live: {hbm_worker.source}")
        non_torch = Figure(0, "none subtracted: the worker counts the devices' own bytes in use, its whole view")
        worker, unpriced = hbm_worker.source, ""
        if hbm_worker.step_temporaries is not None and step_model is not None:
            arch, n_moe, top_k, width, dp, expert_parallel = step_model
            compiled_step = hbm_worker.step_temporaries(
                architecture=arch, options=step_options or {}, n_moe=n_moe, top_k=top_k, expert_in=width,
                tokens=max_num_batched_tokens, dp=dp, expert_parallel=expert_parallel,
            )  # fmt: skip
            if hbm_worker.attention_cache_copies is not None:
                attention_copies = hbm_worker.attention_cache_copies(options=step_options or {}) or ""
            if hbm_worker.loop_temporaries is not None:
                compiled_loop = hbm_worker.loop_temporaries(
                    options=step_options or {}, n_moe=n_moe, n_attention=n_mla, max_num_seqs=max_num_seqs
                )
    else:
        act = Figure(
            temp_bytes,
            "k3plan's temporaries stand for vLLM's profiled activation peak at max_num_batched_tokens "
            f"(no logged peak for this point): {temp_source}",
        )
        # the sampler warm-up after the dummy forward (engines/vllm/sampler.py): the peak is the larger of the
        # forward's temporaries and the sampler's live tensors, not their sum
        sampler, _, sampler_how = sampler_profile_peak(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            vocab_size=vocab_size,
            release=release,
        )
        sampler_alone, sampler_alone_how = sampler, sampler_how
        if moe_workspace is not None and moe_workspace[0]:
            held_workspace = moe_workspace[0]
            if sampler:
                # the MoE workspace the dummy forward left allocated, under the sampler's tensors (engines/vllm/
                # moe_workspace.py): the torch peak is their sum
                sampler, sampler_how = sampler + held_workspace, f"{sampler_how}; + {moe_workspace[1]}"
        if sampler > temp_bytes:
            act = Figure(
                sampler,
                f"{sampler_how}, above k3plan's temporaries {temp_bytes:,} B at max_num_batched_tokens: {act.source}",
            )
        elif sampler:
            act = Figure(temp_bytes, f"{act.source}; not below {sampler_how}")
        rocm_v4 = vendor == "amd" and dsv4 is not None and dsv4.csa2 is None
        rocm_v41 = vendor == "amd" and dsv4 is not None and dsv4.csa2 is not None
        if pages is not None and dsv4 is not None and (vendor == "nvidia" or rocm_v4 or rocm_v41):  # the profile run
            if rocm_v41:  # V4.1 on ROCm: the indexer's gather and decode logits, the attention warm-up gather
                assert dsv4 is not None
                ws, logits, how = dsv41_rocm_profile_workspace(
                    dsv4,
                    max_model_len=max_model_len,
                    max_num_batched_tokens=max_num_batched_tokens,
                    max_num_seqs=max_num_seqs,
                    spec_tokens=draft.num_speculative_tokens if draft is not None else 0,
                    local_heads=attention_heads,
                    hardware=hardware,
                    release=release,
                )
            elif rocm_v4:  # V4 on ROCm: the CUDA reservations and gfx9's decode logits (engines/vllm/dsv4_workspace.py)
                ws, logits, how = dsv4_rocm_profile_workspace(
                    dsv4,
                    max_model_len=max_model_len,
                    max_num_batched_tokens=max_num_batched_tokens,
                    hardware=hardware,
                    release=release,
                    max_num_seqs=max_num_seqs,
                    spec_tokens=draft.num_speculative_tokens if draft is not None else 0,
                )
                if attention_heads:  # and the bf16 wo_a copies its attention keeps from the profile run on
                    cached, cached_how = dsv4_rocm_wo_a_bf16(
                        dsv4,
                        local_heads=attention_heads,
                        layers=len(dsv4.compress_ratios) + (len(draft.dsv4_mtp_ratios) if draft is not None else 0),
                        hardware=hardware,
                        release=release,
                        wo_a_fp8=rocm_wo_a_fp8,
                    )
                    if cached:
                        ws += cached
                        how += f"; + {cached_how}"
            elif dsv4.csa2 is None:
                ws, logits, how = dsv4_profile_workspace(
                    dsv4, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens, release=release
                )
            else:
                ws, logits, how = dsv41_profile_workspace(
                    dsv4,
                    max_model_len=max_model_len,
                    fp4_indexer=fp4_indexer,
                    release=release,
                    max_num_batched_tokens=max_num_batched_tokens,
                )
            if held_workspace and vendor == "nvidia":
                # the MoE workspace and V4's attention reservations are views of one WorkspaceManager buffer, grown
                # to the largest request and kept (engines/vllm/moe_workspace.py, vllm/v1/worker/workspace.py
                # get_simultaneous): the buffer is the larger of the two, held beside the forward and the sampler
                assert moe_workspace is not None
                sampler, sampler_how = sampler_alone, sampler_alone_how
                if held_workspace > ws:
                    how = f"{how}; the one WorkspaceManager buffer grown to the MoE's {held_workspace / GiB:.2f} GiB: {moe_workspace[1]}"
                    ws = held_workspace
                else:
                    how = f"{how}; the MoE's {held_workspace / GiB:.2f} GiB views of the same buffer fit in it: {moe_workspace[1]}"
            forward, forward_how = temp_bytes, act.source
            # V4's dummy forward as vLLM runs it on CUDA (FlashMLA's padded heads from 0.23.0; 0.20.x pads no q)
            if dsv4.csa2 is None and hidden_size and attention_heads and not rocm_v4:
                forward, forward_how = dsv4_forward_live(
                    dsv4,
                    tokens=max_num_batched_tokens,
                    hidden_size=hidden_size,
                    local_heads=attention_heads,
                    q_lora_rank=q_lora_rank,
                    mtp=draft is not None and bool(draft.dsv4_mtp_ratios),
                    release=release,
                    attention_backend=attention_backend,
                    tp=tp_attention or 1,
                )
                if logits:  # the indexer allocates its logits while its CSA layer's tensors are live
                    at_logits, at_how = dsv4_indexer_live(
                        dsv4,
                        tokens=max_num_batched_tokens,
                        hidden_size=hidden_size,
                        local_heads=attention_heads,
                        q_lora_rank=q_lora_rank,
                        release=release,
                        attention_backend=attention_backend,
                    )
                    if at_logits:
                        logits += at_logits
                        how = f"{how}; the logits at their moment {logits:,} B: {at_how}"
            if moe_moment is not None and not rocm_v4 and moe_moment[0] > forward:
                # the MoE kernel's moment above the attention's (engines/vllm/moe_workspace.py)
                forward, forward_how = moe_moment
            # and on ROCm, for the releases its eager forward was traced in (engines/vllm/dsv4_workspace.py)
            traced = rocm_forward_applies(release, hardware=hardware, aiter_moe=rocm_aiter_moe)
            if rocm_v4 and hidden_size and attention_heads and rocm_moe is not None and traced:
                forward, forward_how = dsv4_rocm_forward_live(
                    dsv4,
                    tokens=max_num_batched_tokens,
                    hidden_size=hidden_size,
                    local_heads=attention_heads,
                    q_lora_rank=q_lora_rank,
                    tp=tp_attention or 1,
                    mtp=draft is not None and bool(draft.dsv4_mtp_ratios),
                    moe_bytes=rocm_moe[0],
                    release=release,
                    aiter_linear=rocm_aiter_linear,
                    wo_a_fp8=bool(rocm_wo_a_fp8),
                )
                forward_how += f"; {rocm_moe[1]}"
            elif rocm_v4 and not traced:
                forward_unpriced = rocm_forward_unpriced(release, hardware=hardware, aiter_moe=rocm_aiter_moe)
            peak = max(forward, sampler)
            peak_label = f"max(the forward's and sampler's peak {peak:,} B, the logits)"
            peak_how = f"{peak_label}: " + (sampler_how if sampler > forward else forward_how)
            lane = transient = runner = 0
            dspark = (
                dsv4.csa2 is not None
                and dsv4.dspark is not None
                and draft is not None
                and draft.num_speculative_tokens > 0
                and hardware not in SM100_FAMILY
                and not rocm_v41  # the ROCm drafter's profile (amd/dspark.py) was not read
                and hidden_size > 0
                and vocab_size > 0
            )
            if dspark:  # V4.1 with DSpark on SM90, as the 0.31.0 wheel runs it (engines/vllm/dsv4_workspace.py)
                assert draft is not None
                k = draft.num_speculative_tokens
                lane, transient, dhow = dsv41_dspark_profile(
                    dsv4,
                    tokens=max_num_batched_tokens,
                    max_num_seqs=max_num_seqs,
                    k=k,
                    vocab=vocab_size,
                    hidden=hidden_size,
                    tp=tp_attention or 1,
                )
                runner, rhow = dspark_runner_buffers(
                    max_num_seqs=max_num_seqs, tokens=max_num_batched_tokens, k=k, vocab=vocab_size, hidden=hidden_size
                )
                how += f"; + {dhow}, the larger of it and {peak_label}; + {rhow}"
            act = Figure(ws + lane + max(peak, logits, transient) + runner, how if dspark else f"{how}; + {peak_how}")
        if mm_profile is not None and mm_profile[0]:
            # the encoder outputs and dummy inputs stay live through the dummy run and the sampler warm-up; the
            # encoder's own temporaries are gone before them (engines/vllm/mm_profile.py)
            live, encoder_peak, mm_how = mm_profile
            if encoder_peak > act.value + live:
                act = Figure(
                    encoder_peak,
                    f"the multimodal encoder's peak, above the language model's {act.value:,} B + {live:,} B: {mm_how}",
                )
            else:
                act = Figure(act.value + live, f"{act.source}; + {live:,} B: {mm_how}")
        non_torch = Figure(
            0,
            "not priced, 0: what vLLM measures at start and k3plan cannot derive (vllm-project/vllm@c621af16 "
            "vllm/v1/worker/gpu_worker.py Worker.determine_available_memory: requested - (weights + "
            "torch_peak_increase + non_torch_increase) - the CUDA-graph estimate): the non-torch increase counts from "
            "the worker's first snapshot, taken after init_worker_distributed_environment ('take memory snapshot after "
            "NCCL is initialized'), so the custom all-reduce buffers and PyNccl's communicator as its one-element "
            "warm-up all_reduce connected it are not in it (vLLM 0.11.0-0.20.0 wheels, device_communicators/pynccl.py "
            "PyNcclCommunicator.__init__); but NCCL connects each algorithm's buffers at that algorithm's first use "
            "(NVIDIA/nccl v2.27.5-1, the torch 2.9 / 2.10 pin, likewise v2.28.9-1 for torch 2.11: src/init.cc "
            "runtimeConn = cuMemSupport && NCCL_RUNTIME_CONNECT, default 1; src/group.cc ncclCollPreconnectFunc; vLLM's"
            " NCCL_CUMEM_ENABLE=0 override went in vllm-project/vllm#24141, before 0.11.0), so the profile run's first "
            "large all_reduce maps NVLS buffers on more than 2 GPUs (src/transport/nvls.cc ncclNvlsBufferSetup: "
            "nvlsChannels x 2 x NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8 x the node's ranks, NVLS_NCHANNELS_SM90 16, "
            "_SM100_NVL 24: 0.25 GiB at TP 8 on Hopper), and torch's ProcessGroupNCCL communicator of the TP group is "
            "created at the first collective on it (the logits' all_gather_into_tensor: base_device_communicator.py "
            "DeviceCommunicatorBase.all_gather; parallel_state.py init_distributed_environment gives init_process_group"
            " no device_id) with its channels' device structures and its ring's per-channel buffers (LL 512 KiB + LL128"
            " 4.69 MiB + Simple 4 MiB, src/init.cc computeBuffSizes), each allocation in 2 MiB granules "
            "(src/include/alloc.h ncclCuMemAlloc), over a channel count NCCL's topology search sets; these and cuBLAS /"
            " DeepGEMM / module and driver state are in it, and no code read sizes all of them (the NVLS buffers alone,"
            " for 1 or 2 communicators, bring no logged case within 3%: not priced); the CUDA-graph "
            "estimate (gpu_model_runner.py profile_cudagraph_memory, subtracted unless "
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) is mem_get_info over warming up and capturing the two largest "
            "sizes of each cudagraph mode (the first capture + (n - 1) x the second, at least 1 MiB a graph); the public "
            "logs that print either (vllm-project/vllm#10511, #12126, #50576) are other versions and GPUs",
        )
        if cudagraph is not None and (cudagraph.bytes or cudagraph.source.startswith("0: Model Runner V2")):
            # a priced estimate, or none because Model Runner V2 subtracts none (engines/vllm/cudagraph.py
            # v2_unprofiled): its source says which
            non_torch = Figure(
                cudagraph.bytes,
                f"{cudagraph.source}; the non-torch increase itself {non_torch.source}",
            )
        if mega_moe is not None and mega_moe[0]:
            # a buffer the profile run maps outside torch's allocator, in the non-torch increase (engines/vllm/mega_moe.py)
            non_torch = Figure(non_torch.value + mega_moe[0], f"{mega_moe[1]}; + {non_torch.source}")
        if all2all is not None and all2all[0]:
            # the all2all backend's buffers, made at load outside torch (engines/vllm/all2all_buffers.py)
            non_torch = Figure(non_torch.value + all2all[0], f"{all2all[1]}; + {non_torch.source}")
        worker = VLLM_GPU_WORKER
        unpriced = VLLM_UNPRICED
        if forward_unpriced:
            unpriced += f"; {forward_unpriced}"
        if all2all is not None and all2all[0]:  # the part of it k3plan prices (engines/vllm/all2all_buffers.py)
            unpriced += f", beyond the all2all backend's buffers it prices ({all2all[0] / GiB:.2f} GiB)"
    utilization = round(1 - reserve_fraction, 12)
    gpu = kv_pool_method == "utilization_minus_profile"
    ext_platform = None
    if gpu and release is not None and release >= EXTENSIBLE_FROM:
        extensible = not kv_cache_memory_bytes  # --kv-cache-memory-bytes turns it off (_resolve_extensible_kv_cache)
        if not utilization_given:
            utilization = DEFAULT_UTILIZATION if extensible else DEFAULT_UTILIZATION_ESTIMATE
        if extensible:
            ext_platform = platform_of(vendor)
            act = Figure(
                act.value,
                "the transient peak the extensible KV cache keeps free (ExtensibleKVCache.reserved_headroom_bytes: "
                "the profile run's allocated peak over current, raised by the sizing warmup's full-budget steps, "
                f"{WHEEL}, vllm/v1/worker/gpu_worker.py Worker.compile_or_warm_up_model): k3plan's profile-peak term, "
                "read for the V1 runner, stands for Model Runner V2's, an estimate: " + act.source,
            )
            if held_workspace:
                # the MoE workspace stays allocated after the profile run: resident to the extensible cache's
                # measurement (non_kv_used), not part of the peak over current it keeps free
                # the peak over current: the sampler's live tensors or the forward's other temporaries, k3plan's
                # temporaries less the workspace where they can hold it, whole where they are smaller than it (a
                # workspace larger than k3plan's forward, e.g. DP's gathered rows, comes on top of the forward)
                fwd = temp_bytes - held_workspace if temp_bytes >= held_workspace else temp_bytes
                act = Figure(
                    max(sampler_alone, fwd, 0),
                    act.source + f"; less the MoE workspace ({held_workspace:,} B), counted resident, not transient "
                    f"(the transient: the larger of the sampler's {sampler_alone:,} B and the forward's other "
                    f"temporaries, {fwd:,} B)",
                )
            non_torch = Figure(
                non_torch.value + held_workspace,
                (
                    f"the MoE workspace the profile run leaves allocated, {held_workspace:,} B (moe_workspace.py), + "
                    if held_workspace
                    else ""
                )
                + "the CUDA graphs' memory, which the extensible cache measures after capture (non_kv_used: "
                f"{WHEEL}, vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_bytes; no estimate before warmup: "
                "GPUModelRunner.profile_cudagraph_memory returns 0 under it): "
                + (
                    "k3plan's estimate stands for it, an estimate: "
                    if non_torch.value
                    else "not priced here (no graph estimate for this command), so the pool is an upper bound: "
                )
                + non_torch.source,
            )
            unpriced = f"{unpriced}; {EXTENSIBLE_UNPRICED}"
            if not block_override:
                # the default block 64 (16 before): the blocks k3plan prices are the backends' preferred or the hybrid
                # MLA alignment (>= 128), 64 or more, which a 64 default leaves as they are
                paging_source += (
                    f"; from 0.34.0 the default block is {EXT_DEFAULT_BLOCK}, unchanging it ({EXT_BLOCK_SOURCE})"
                )
    capture_oom: tuple[int, int, str, str] | None = None
    if gpu and captures_graphs and ext_platform is None:
        # the graphs are captured once the pool is allocated (gpu_model_runner.py capture_model after
        # initialize_kv_cache), out of what the pool leaves (capture_room)
        estimate = cudagraph.bytes if cudagraph is not None else 0
        room, room_how = capture_room(
            visible=visible,
            utilization=utilization,
            weights=weights_bytes,
            transient=int(act.value) - held_workspace,
            resident_non_torch=int(non_torch.value) - estimate,
            estimate=estimate,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
        )
        if capture is not None:
            need, at = capture
            oom = "HIP out of memory" if vendor == "amd" else "CUDA out of memory"
            capture_oom = (
                need.bytes,
                room,
                f"torch.OutOfMemoryError: {oom} capturing the CUDA graphs after the KV cache: they take "
                f"{need.source}, beyond the {max(room, 0) / GiB:.2f} GiB {room_how}",
                at,
            )
        if unpriced:
            # where a graph is larger than what is priced, the capture is where the start fails (the graph-OOM cases
            # in tests/engines/cases)
            unpriced += (
                "; nor what its CUDA-graph capture takes after the pool beyond "
                + (f"the {capture[0].bytes / GiB:.2f} GiB priced" if capture is not None else "what is priced")
                + f", in the {max(room, 0) / GiB:.2f} GiB {room_how}"
            )
    return vllm_kv_pool(
        engine=stack_name,
        utilization=utilization,
        visible_bytes=visible,
        weights_bytes=weights_bytes,
        weights_source=weights_src,
        activation_bytes=act,
        non_torch_bytes=non_torch,
        visible_source=visible_src,
        page_bytes=page,
        block_tokens=block_tokens,
        block_source=paging_source,
        n_attention=n_mla,
        n_state=n_kda,
        max_model_len=max_model_len,
        worker_source=worker,
        hbm_worker=hbm_worker,
        compiled_step=compiled_step,
        attention_dp=step_model[4] if step_model is not None else 1,
        attention_copies=attention_copies,
        capture_oom=capture_oom,
        compiled_loop=compiled_loop,
        auto_max_model_len=auto_max_model_len,
        num_gpu_blocks_override=num_gpu_blocks_override,
        compact_state_bytes=state_bytes_per_layer_unpadded if compact else None,
        max_num_seqs=max_num_seqs,
        dsv4=pages,
        max_num_batched_tokens=max_num_batched_tokens,
        backend_refusal=backend_refusal,
        dcp=dcp,
        unpriced=unpriced,
        graph_profile_oom=graph_profile_oom if kv_pool_method == "utilization_minus_profile" else None,
        in_flight_batches=in_flight if in_flight is not None else default_in_flight(),
        kv_cache_memory_bytes=kv_cache_memory_bytes if kv_pool_method == "utilization_minus_profile" else None,
        extensible_platform=ext_platform,
        expert_formats=expert_formats,
        concurrency_by_tokens=gpu and release is not None and release < CONCURRENCY_BY_BLOCKS_FROM,
        # the torch_tpu plugin's and tpu-inference's vLLM not read for it: the older form kept
        tokens_by_concurrency=gpu and (release is None or release >= TOKENS_BY_CONCURRENCY_FROM),
        # the engine's mesh, where its worker sums the devices' pools (HbmWorker.sums_devices)
        # (DeepSeek-V4's cache creation there not read for it: a device's, as before)
        pool_devices=mesh_devices if hbm_worker is not None and hbm_worker.sums_devices and dsv4 is None else 1,
    )


def capture_room(
    *,
    visible: int,
    utilization: float,
    weights: int,
    transient: int,
    resident_non_torch: int,
    estimate: int,
    kv_cache_memory_bytes: int | None,
) -> tuple[int, str]:
    """The bytes a device has for the CUDA-graph capture once vLLM's pool is allocated, and what leaves them
    (engines/vllm/cudagraph.py CAPTURE_SOURCE): with --kv-cache-memory-bytes the device less the weights, the memory
    the engine keeps outside torch and the given pool (utilization is ignored); else what --gpu-memory-utilization
    leaves outside its budget, + the profile run's transient peak (``transient``: given back by memory_profiling's
    empty_cache before the pool is allocated) + the CUDA-graph estimate subtracted from the pool (``estimate``). The
    CUDA context and what else the worker's first snapshot holds sit in it too, not priced (the room an upper bound)."""
    gib = GiB
    if kv_cache_memory_bytes:
        room = visible - weights - resident_non_torch - kv_cache_memory_bytes
        return room, (
            f"the device's {visible / gib:.2f} GiB leave beside the weights' {weights / gib:.2f}, "
            f"{resident_non_torch / gib:.2f} of non-torch memory and the --kv-cache-memory-bytes pool's "
            f"{kv_cache_memory_bytes / gib:.2f} (utilization ignored), with the CUDA context"
        )
    outside = visible - int(utilization * visible)
    room = outside + transient + estimate
    return room, (
        f"left after the pool: the {outside / gib:.2f} GiB --gpu-memory-utilization {utilization:g} leaves outside "
        f"its budget with the CUDA context, + the profile's {transient / gib:.2f} GiB transient peak given back"
        + (
            f" + the {estimate / gib:.2f} GiB graph estimate subtracted"
            if estimate >= gib // 100
            else f" + the {estimate / MiB:.0f} MiB graph estimate subtracted"
            if estimate
            else ""
        )
    )


# Engine-visible HBM a device where an engine's own log prints it (the driver's total is not what torch can
# allocate): hardware name -> (bytes, source). Elsewhere the hardware spec's usable HBM stands, said so.
ENGINE_VISIBLE_HBM: dict[str, tuple[int, str]] = {
    "nvidia-h100-sxm": (
        round(79.18 * GiB),
        "torch's total capacity as vLLM's CUDA OOM prints it: 'GPU 0 has a total capacity of 79.18 GiB' "
        "(vllm-project/vllm#51124, an H100 80GB; the log rounds to 0.01 GiB)",
    ),
    "nvidia-h200": (
        round(139.80 * GiB),
        "torch's total as vLLM's worker prints it at start: 'Free memory on device cuda:1 (112.72/139.8 GiB) on "
        "startup is less than desired GPU memory utilization (0.82, 114.64 GiB)' (an H200 NVL of 143,771 MiB, vLLM "
        "0.23.0: github.com/uv-xiao/pto-cu/blob/e5e2ca9a/docs/in_progress/nvidia_backend/vllm_remote_model_load_probe.md; "
        "format_gib rounds to 0.01 GiB, and 0.82 x 139.80 = 114.64)",
    ),
    "nvidia-b300": (
        round(267.69 * GiB),
        "torch's total as vLLM's worker prints it at start on a B300 node: 'Free memory on device (264.19/267.69 GiB) "
        "on startup. Desired GPU memory utilization is (0.95, 254.3 GiB)' (InferenceX server log 440197, DeepSeek-V4-Pro "
        "at TP 4, quoted by github.com/SemiAnalysisAI/InferenceX-app/blob/450ba1312bde44c75b275dfe247de9974d133bc1/"
        "packages/db/src/lib/fixtures/agentic-memory-vllm.json; format_gib rounds to 0.01 GiB, and 0.95 x 267.69 = "
        "254.31; nvidia-smi's 275,040 MiB is 268.59)",
    ),
    "amd-mi355x": (
        round(287.98 * GiB),
        "torch's total as vLLM's worker prints it at start on MI355X: 'Free memory on device cuda:N "
        "(272.0-272.4/287.98 GiB) on startup is less than desired GPU memory utilization' (vLLM on InferenceX's "
        "mi355x-amds nodes, the free figures a range over the ranks: github.com/SemiAnalysisAI/InferenceX/blob/"
        "462f8ed735d9f3ab9a98a896a553c6e41cee410f/benchmarks/single_node/agentic/kimik3_fp4_mi355x_mtp.sh; the same "
        "nodes' DeepSeek-V4 recipe writes 0.95 as 273.6 GiB, 0.95 x 287.98; format_gib rounds to 0.01 GiB). What the "
        "ROCm stack and other processes hold before vLLM's first snapshot is not taken from it: vLLM requests "
        "ceil(utilization x this total) and only checks that much is free",
    ),
}


def visible_hbm(hardware: str, spec_bytes: int, spec_source: str) -> tuple[int, str]:
    """The HBM an engine can allocate a device: its own logged figure where one is cited, else the hardware
    spec's usable HBM (named as such)."""
    got = ENGINE_VISIBLE_HBM.get(hardware)
    if got is not None:
        return got
    return spec_bytes, f"hardware spec's usable HBM (no engine-logged figure for {hardware}): {spec_source}"
