"""The KV block vLLM runs a dense-MLA model at (DeepSeek-V3 / R1, Kimi-K2: every layer one MLA spec, no linear
attention, no DeepSeek-V4 / V3.2 sparse attention), by release and GPU family, where the command gives no
--block-size: the block of the decode kernel the release picks by default. The budget's page and the engine's pool
read it in one place (step/cache.py cache_inputs, through Stack.engine_block, set by fit from a serve command).

Read in the wheels (PyPI):

- 0.11.0-0.14.x (vllm/platforms/cuda.py CudaPlatform.check_and_update_config; 0.11.0-0.12.0, 0.13.0, 0.14.1): on the
  SM100 family (0.11.0-0.12.x: compute capability exactly 10.0, B200 / GB200) CUTLASS MLA by default ('Blackwell =>
  Force CutlassMLA'), whose block is forced to 128 ('Forcing kv cache block size to 128 for CUTLASS_MLA backend');
  elsewhere FlashMLA, forced to 64. Under ``VLLM_ATTENTION_BACKEND=FLASHINFER_MLA`` the block is 64 (32 or a multiple
  of 64 kept), under ``FLASHMLA`` 64 on SM90 (FlashMLA's forcing tests is_flashmla_(dense_)supported, Hopper only: on
  the SM100 family it forces nothing, not followed further here).
- sm_103 (B300 / GB300) at 0.11.0-0.12.x: is_device_capability(100) is False there, so check_and_update_config takes
  its 'Not Blackwell' branch, use_flashmla, which forces nothing on compute capability 10.x (attention/ops/flashmla.py
  is_flashmla_supported / is_flashmla_dense_supported: 'only supported on Hopper devices'): the block stays the 16
  the same function sets where CacheConfig.block_size is None (a VLLM_ATTENTION_BACKEND of CUTLASS_MLA or
  FLASHINFER_MLA forces 128 / 64 as on sm_100: that branch tests no capability). 0.11.0's get_attn_backend_cls then
  names TRITON_MLA (CUTLASS / FlashInfer MLA need is_device_capability(100), FlashMLA and FlashAttention MLA major 9),
  which takes 16. 0.11.1-0.12.x's worker takes the first valid backend of _get_backend_priorities for major 10,
  CUTLASS_MLA (supports_compute_capability: major == 10), whose kernel block is 128 only
  (supported_kernel_block_sizes / get_supported_kernel_block_sizes [128]): after the pool is sized at 16,
  initialize_kv_cache's _prepare_kernel_block_sizes raises 'ValueError: No common block size for 16.'
  (v1/worker/gpu_model_runner.py select_common_block_size; sm103_block_refusal below).
- 0.15.0-0.17.x (the same function; 0.15.0, 0.16.0, 0.17.0): on the SM100 family FlashInfer MLA by
  default where qk_nope_head_dim is 128 (DeepSeek-V3, Kimi-K2: 'Blackwell => Force FlashInfer MLA'), forced to 64;
  elsewhere FlashMLA, 64.
- from 0.18.0 (0.18.0-0.28.0, 0.33.0, 0.34.0): no block is forced; Platform.
  update_block_size_for_backend asks the first attention layer's backend for its preferred block
  (AttentionBackend.get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE 16, 64 from 0.34.0): the default
  where supported, else the backend's smallest). The backend is the first valid one of _get_backend_priorities: on the SM100 family
  FLASHINFER_MLA (get_supported_kernel_block_sizes [32, 64], kv dtypes auto / bf16 / fp16 / fp8): 32; on SM90
  FLASH_ATTN_MLA (MultipleOf(16), kv dtypes auto / bf16 / fp16 only): 16, and with an fp8 cache FLASHMLA ([64]): 64.
  From 0.34.0, at the default 64, 64 on both.
  A vLLM 0.18.0 start of DeepSeek-R1-0528 on 8 x B200 logs 1,219,424 tokens, 38,107 blocks of 32
  (tests/engines/cases/vllm-kamra-r1-0528-b200-tp8-8k.yaml); its H200 starts of 0.18.0 / 0.19.0 653,808 (a multiple
  of 16, not of 32) and of 0.11.0-0.16.0 multiples of 64.

Not read: 0.29.0-0.32.x (the same code on both sides of each gap); a release before 0.11.0;
--attention-backend / --attention-config.backend (and VLLM_ATTENTION_BACKEND values other than the three above), left
at k3plan's stack page (paging align_tokens).
"""

from __future__ import annotations

from k3plan.engines.release import Release
from k3plan.engines.vllm.attention_config import SM90, SM100_FAMILY
from k3plan.engines.vllm.extensible import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_BLOCK_SIZE_BEFORE,
    EXTENSIBLE_FROM,
    preferred_block,
)

READ_FROM: Release = (0, 11, 0)
FLASHINFER_DEFAULT_FROM: Release = (0, 15, 0)  # SM100: FlashInfer MLA forced to 64 instead of CUTLASS MLA's 128
PREFERRED_FROM: Release = (0, 18, 0)  # no block forced: the backend's preferred (update_block_size_for_backend)
FAMILY_FROM: Release = (0, 13, 0)  # is_device_capability_family(100) from 0.13.0; 0.11.x-0.12.x: exactly 10.0
SM100_EXACT = frozenset({"nvidia-b200", "nvidia-gb200-nvl72"})  # sm_100 (B300 / GB300 are sm_103)
SELECTED_ALONE_FROM: Release = (0, 11, 1)  # get_valid_backends: 0.11.0 names one backend by its own tests
# sm_103 before 0.13.0: CacheConfig.block_size None -> 16 in check_and_update_config, nothing forced (module docstring)
SM103_BLOCK = 16
SM103_SOURCE = (
    "vllm {v} wheel (PyPI), vllm/platforms/cuda.py CudaPlatform.check_and_update_config (is_device_capability(100) "
    "False on sm_103: 'Not Blackwell', use_flashmla, which vllm/attention/ops/flashmla.py leaves unforced off Hopper; "
    "block_size None -> 16); the decode backend {k}"
)
# the worker's kernel-block check that stops 0.11.1-0.12.x on sm_103 after the pool is sized (sm103_block_refusal)
SM103_REFUSAL_UNTIL: Release = FAMILY_FROM
CUTLASS_KERNEL_BLOCK = 128  # cutlass_mla.py CutlassMLABackend supported_kernel_block_sizes [128]
SM103_REFUSAL_AT = (
    "vllm {v} wheel (PyPI), vllm/v1/worker/gpu_model_runner.py GPUModelRunner.initialize_kv_cache -> "
    "_prepare_kernel_block_sizes -> select_common_block_size (CUTLASS_MLA, the first valid backend of vllm/platforms/"
    "cuda.py _get_backend_priorities for compute capability major 10, takes kernel blocks of 128 only: "
    "v1/attention/backends/mla/cutlass_mla.py)"
)
ENV = "VLLM_ATTENTION_BACKEND"
ENV_GONE_FROM: Release = (0, 15, 0)  # engines/vllm/backend_env.py ATTENTION_GONE_FROM
FORCED_SOURCE = (
    "vllm {v} wheel (PyPI), vllm/platforms/cuda.py CudaPlatform.check_and_update_config ('Forcing kv cache block "
    "size to {b} for {k} backend')"
)
PREFERRED_SOURCE = (
    "vllm {v} wheel (PyPI), vllm/platforms/interface.py Platform.update_block_size_for_backend "
    "(AttentionBackend.get_preferred_block_size(16)), vllm/platforms/cuda.py _get_backend_priorities ({k} first "
    "valid), v1/attention/backends/mla/{f} get_supported_kernel_block_sizes"
)


def _at(release: Release) -> str:
    return ".".join(str(p) for p in release)


def smallest_kernel_block(hardware: str, *, fp8_kv: bool) -> tuple[int, str] | None:
    """The smallest kernel block of the MLA decode backend vLLM 0.18.0 on picks by default on ``hardware``
    (_get_backend_priorities' first valid: FLASHINFER_MLA [32, 64] on the SM100 family; FLASH_ATTN_MLA MultipleOf(16)
    on SM90, FLASHMLA [64] there with an fp8 cache) and which it is; None on another GPU."""
    if hardware in SM100_FAMILY:
        return 32, "FLASHINFER_MLA (get_supported_kernel_block_sizes [32, 64])"
    if hardware in SM90:
        return (
            (64, "FLASHMLA ([64]; FLASH_ATTN_MLA takes no fp8 cache)")
            if fp8_kv
            else (16, "FLASH_ATTN_MLA (MultipleOf(16))")
        )
    return None


def dense_mla_block(
    release: Release, hardware: str, *, fp8_kv: bool, env: dict[str, str] | None = None
) -> tuple[int, str] | None:
    """(tokens, source) of the block vLLM ``release`` runs a dense-MLA model at on ``hardware`` without --block-size
    (module docstring); None where it was not read (the stack's page holds)."""
    sm100 = hardware in SM100_FAMILY
    if release < READ_FROM or not (sm100 or hardware in SM90):
        return None
    at = _at(release)
    if sm100 and release < FAMILY_FROM and hardware not in SM100_EXACT:
        # sm_103 before 0.13.0: the 'Not Blackwell' branch (module docstring); a backend the variable names forces its
        # block as on sm_100, FlashMLA's forcing nothing (not followed)
        chosen = (env or {}).get(ENV)
        if chosen is None:
            return SM103_BLOCK, SM103_SOURCE.format(
                v=at, k="TRITON_MLA" if release < SELECTED_ALONE_FROM else "CUTLASS_MLA (sm103_block_refusal)"
            )
        if chosen not in ("FLASHINFER_MLA", "CUTLASS_MLA"):
            return None
    if sm100 and release < FLASHINFER_DEFAULT_FROM and (env or {}).get(ENV) == "FLASHMLA":
        return None  # FlashMLA's forcing is Hopper-only (is_flashmla_dense_supported): not 64 here, not followed
    if release < PREFERRED_FROM:
        chosen = (env or {}).get(ENV) if release < ENV_GONE_FROM else None
        if chosen is None:
            kernel = (
                "CUTLASS_MLA"
                if sm100 and release < FLASHINFER_DEFAULT_FROM
                else "FlashInferMLA"
                if sm100
                else "FlashMLA"
            )
        elif chosen in ("FLASHINFER_MLA", "FLASHMLA", "CUTLASS_MLA"):
            kernel = {"FLASHINFER_MLA": "FlashInferMLA", "FLASHMLA": "FlashMLA", "CUTLASS_MLA": "CUTLASS_MLA"}[chosen]
        else:
            return None
        block = 128 if kernel == "CUTLASS_MLA" else 64
        return block, FORCED_SOURCE.format(v=at, b=block, k=kernel)
    # the default the backend is asked about: 16, 64 from 0.34.0 (engines/vllm/extensible.py DEFAULT_BLOCK_SIZE)
    default = DEFAULT_BLOCK_SIZE if release >= EXTENSIBLE_FROM else DEFAULT_BLOCK_SIZE_BEFORE
    sizes: tuple[int, ...]
    if sm100:
        kernel, f, sizes = "FLASHINFER_MLA", "flashinfer_mla.py ([32, 64])", (32, 64)
    elif fp8_kv:  # FLASH_ATTN_MLA takes no fp8 cache: FLASHMLA's [64]
        kernel, f, sizes = "FLASHMLA (FLASH_ATTN_MLA takes no fp8 cache)", "flashmla.py ([64])", (64,)
    else:
        kernel, f, sizes = "FLASH_ATTN_MLA", "flashattn_mla.py (MultipleOf(16))", (-16,)
    block = preferred_block(default, sizes)
    return block, PREFERRED_SOURCE.format(v=at, k=kernel, f=f) + f" at CacheConfig.DEFAULT_BLOCK_SIZE {default}"


def sm103_block_refusal(
    release: Release, hardware: str, *, block: int | None, env: dict[str, str] | None = None
) -> tuple[str, str] | None:
    """(vLLM's error, where it is raised) where vLLM ``release`` stops a dense-MLA model on sm_103 (B300 / GB300) when
    the KV cache is initialized, after the pool is sized: 0.11.1-0.12.x with no VLLM_ATTENTION_BACKEND, whose worker
    runs CUTLASS_MLA (kernel blocks of 128 only) on the block check_and_update_config leaves, 16 without --block-size
    (``block`` None), or the one given; None elsewhere (module docstring)."""
    if hardware not in SM100_FAMILY or hardware in SM100_EXACT:
        return None
    if not SELECTED_ALONE_FROM <= release < SM103_REFUSAL_UNTIL or (env or {}).get(ENV) is not None:
        return None
    kv_block = SM103_BLOCK if block is None else block
    if kv_block % CUTLASS_KERNEL_BLOCK == 0:
        return None
    return f"ValueError: No common block size for {kv_block}.", SM103_REFUSAL_AT.format(v=_at(release))


# The MLA decode workspaces a kernel module allocates when it is imported: FlashInfer MLA's g_fi_workspace
# (torch.zeros(FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE 128 MiB), v1/attention/backends/mla/flashinfer_mla.py, module
# level in the 0.11.0-0.24.0 wheels; from 0.25.0 _get_workspace_buffer, first called in forward_mqa, a decode: not in
# the load) and CUTLASS MLA's g_sm100_workspace (SM100Workspace(128 MiB), torch.empty, cutlass_mla.py, module level in
# every wheel read). MLAAttention.__init__ (model_executor/layers/attention/mla_attention.py; vllm/attention/layer.py to
# 0.12.x) asks get_attn_backend while the model is built inside load_model's DeviceMemoryProfiler, so what the
# selection imports lands in 'Model loading took' (torch.cuda.max_memory_allocated), the weights figure vLLM's non-KV
# memory counts. The selection (vllm/platforms/cuda.py): 0.11.0 imports the one module get_attn_backend_cls names (on
# sm_100 CUTLASS MLA at the forced 128, on sm_103 TRITON_MLA: no workspace); from 0.11.1 a selected backend alone
# (0.13.0-0.14.x: CUTLASS_MLA set in AttentionConfig on the SM100 family; 0.15.0-0.17.x: FLASHINFER_MLA), and with
# none selected get_valid_backends calls get_class() on every backend of _get_backend_priorities: on SM90
# FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA (FlashInfer MLA's module imported), on the SM100 family from
# 0.18.0 FLASHINFER_MLA, (from 0.21.0 TOKENSPEED_MLA,) CUTLASS_MLA, ... (both; from 0.24.0 through
# _get_attn_backend_class, the same get_class()). 0.11.1-0.12.x on the SM100 family (sm_100 and sm_103 alike:
# _get_backend_priorities tests major == 10) select none in the worker: check_and_update_config's
# envs.VLLM_ATTENTION_BACKEND = 'CUTLASS_MLA' ('TODO: This does not work') sets an attribute of the vllm.envs module in
# the process that builds VllmConfig, the API server, not os.environ; vllm serve and the api_server entry point set
# VLLM_WORKER_MULTIPROC_METHOD=spawn (entrypoints/utils.py cli_env_setup), so the engine core (v1/engine/utils.py
# launch_core_engines, get_mp_context) and its workers start fresh interpreters whose vllm.envs reads the unset
# variable; the engine core's own VllmConfig.__post_init__ (v1/engine/core.py EngineCoreProc._perform_handshakes)
# runs only after the handshake block, in which EngineCore.__init__ has already built the executor and loaded the
# model. _cached_get_attn_backend (attention/selector.py) so passes no backend and get_valid_backends imports
# CUTLASS_MLA, FLASHINFER_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA and FLASHMLA_SPARSE: both workspaces, 256 MiB.
# Read in the 0.11.1, 0.11.2 and 0.12.0 wheels; where the front end's process is the engine's
# (VLLM_ENABLE_V1_MULTIPROCESSING=0) or the command forks (VLLM_WORKER_MULTIPROC_METHOD=fork), not read. vLLM's H200
# starts of DeepSeek-R1-0528 log 79.58 GiB loaded at 0.11.0 and 79.74 GiB at 0.11.2-0.20.0
# (tests/engines/cases/vllm-kamra-r1-0528-h200-tp8-8k-v0*.yaml): 0.16 GiB more, this 0.125 GiB and 0.035 unexplained.
# Read in the 0.11.0-0.12.0, 0.13.0, 0.14.1, 0.15.0, 0.16.0, 0.17.0, 0.18.0-0.28.0, 0.33.0 and 0.34.0 wheels.
# FlashInfer MLA's prefill workspace (VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, 394 MiB, in
# MLACommonMetadataBuilder.__init__ where use_flashinfer_prefill: the SM100 family) is made with the metadata builders:
# after the pool is sized to 0.17.x (initialize_kv_cache), and from 0.18.0 also inside profile_cudagraph_memory, whose
# builders _cleanup_profiling_kv_cache drops after the torch peak is read: in neither case in vLLM's non-KV memory.
WORKSPACE = 128 * 1024 * 1024  # FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE; SM100Workspace(128 * 1024 * 1024)
FI_LAZY_FROM: Release = (0, 25, 0)  # _get_workspace_buffer in forward_mqa (0.25.0-0.28.0, 0.33.0, 0.34.0 wheels)
WORKSPACE_SOURCE = (
    "vllm {v} wheel (PyPI): {mods} imported by vllm/platforms/cuda.py {how} while MLAAttention.__init__ builds the "
    "model inside load_model's DeviceMemoryProfiler: module-level 128 MiB decode workspace(s) in the load"
)
# the environment that puts the worker in (or forks it from) the process whose vllm.envs check_and_update_config set
IN_PROCESS_ENV = (("VLLM_ENABLE_V1_MULTIPROCESSING", ("0", "false")), ("VLLM_WORKER_MULTIPROC_METHOD", ("fork",)))
BACKEND_MODULE = {
    "CUTLASS_MLA": "cutlass_mla.py g_sm100_workspace",
    "FLASHINFER_MLA": "flashinfer_mla.py g_fi_workspace",
}


def mla_decode_workspace(
    release: Release, hardware: str, *, env: dict[str, str] | None = None
) -> tuple[int, str] | None:
    """(bytes, source) of the MLA decode workspaces vLLM ``release`` allocates at import while it loads a dense-MLA
    model on ``hardware`` (``WORKSPACE`` above); None where it was not read or allocates none."""
    sm100 = hardware in SM100_FAMILY
    if release < READ_FROM or not (sm100 or hardware in SM90):
        return None
    at = _at(release)
    env = env or {}
    chosen = env.get(ENV) if release < ENV_GONE_FROM else None
    fi_module = release < FI_LAZY_FROM  # FlashInfer MLA's buffer made at import
    if release < SELECTED_ALONE_FROM:  # the one module get_attn_backend_cls names
        if not sm100:
            return 0, f"vllm {at} wheel: FlashMLA's module, no module-level workspace"
        default = "CUTLASS_MLA" if hardware in SM100_EXACT else "TRITON_MLA"  # sm_103: not capability 100
        pick = chosen or default
        if pick == "TRITON_MLA":
            return (
                0,
                f"vllm {at} wheel: TRITON_MLA's module (get_attn_backend_cls on sm_103), no module-level workspace",
            )
        if pick not in BACKEND_MODULE:
            return None
        mods = [BACKEND_MODULE[pick]]
        how = "get_attn_backend_cls (the named backend only)"
    elif sm100 and release < PREFERRED_FROM:
        if release < FAMILY_FROM:  # 0.11.1-0.12.x: the worker's own selection (comment above)
            if any(env.get(k, "").lower() in vals for k, vals in IN_PROCESS_ENV):
                return None  # the front end's vllm.envs assignment may reach the worker: not read
            if chosen is None:
                mods = [BACKEND_MODULE["CUTLASS_MLA"], BACKEND_MODULE["FLASHINFER_MLA"]]
                how = (
                    "get_valid_backends (no backend reaches the spawned worker: get_class() on every backend of "
                    "_get_backend_priorities for major 10)"
                )
                return len(mods) * WORKSPACE, WORKSPACE_SOURCE.format(v=at, mods=" and ".join(mods), how=how)
            if chosen not in BACKEND_MODULE:
                return None
            mods = [BACKEND_MODULE[chosen]]
            how = f"get_attn_backend_cls ({chosen} selected by the environment: its module only)"
            return len(mods) * WORKSPACE, WORKSPACE_SOURCE.format(v=at, mods=" and ".join(mods), how=how)
        default = "CUTLASS_MLA" if release < FLASHINFER_DEFAULT_FROM else "FLASHINFER_MLA"
        pick = chosen or default
        if pick not in BACKEND_MODULE:
            return None
        mods = [BACKEND_MODULE[pick]]
        how = f"get_attn_backend_cls ({pick} selected in check_and_update_config: its module only)"
    elif chosen is not None:
        return None  # a backend the command selects on SM90 at 0.11.1-0.14.x: not read
    else:
        mods = ([BACKEND_MODULE["FLASHINFER_MLA"]] if fi_module else []) + (
            [BACKEND_MODULE["CUTLASS_MLA"]] if sm100 else []
        )
        how = "get_valid_backends (get_class() on every backend of _get_backend_priorities)"
    return len(mods) * WORKSPACE, WORKSPACE_SOURCE.format(v=at, mods=" and ".join(mods) or "no module", how=how)
