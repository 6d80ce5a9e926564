"""vLLM's own memory sizing, as its code does it (GPU vLLM and the torch_tpu plugin): pure functions over
numbers passed in, so fit, plan and the tests/engines referee share one formula.

    available  = int(utilization x engine-visible HBM) - weights - activation - non-torch
    num_blocks = available // (page_bytes x group_size)
    "GPU KV cache size" tokens = num_blocks // kv_groups x block_tokens
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
  commit not pinned; newer versions log tokens as max_concurrency x max_model_len).
"""

from __future__ import annotations

from dataclasses import dataclass

from k3plan.units import GiB

VLLM_REPORT = (
    "vllm-project/vllm vllm/v1/core/kv_cache_utils.py _report_kv_cache_config (num_blocks // len(kv_cache_groups) "
    "x min block_size) / get_max_concurrency_for_kv_cache_config (read in stored copies, commit not pinned)"
)
TORCHTPU_WORKER = (
    "kowalski-4831/vllm-torchtpu@0095cdcb src/vllm_torchtpu/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(utils.compute_hbm_budget: cap = int(limit x utilization), available = cap - (limit - free) after profile_run)"
)
VLLM_GPU_WORKER = (
    "vllm-project/vllm vllm/v1/worker/gpu_worker.py Worker.determine_available_memory (requested memory = "
    "utilization x total - non_kv_cache_memory: weights + torch peak increase + non-torch; read in stored copies)"
)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Figure:
    """One engine figure and where it comes from."""

    value: int | float
    source: str


@dataclass(frozen=True)
class EngineSizing:
    """vLLM's KV pool for one device, in the engine's own logged conventions."""

    engine: str
    kv_pool_bytes: Figure
    kv_pool_tokens: Figure
    block_tokens: Figure
    num_blocks: Figure
    max_concurrency: Figure
    activation_bytes: Figure
    non_torch_bytes: Figure
    starts: bool
    message: str

    FIGURES = (
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
        out.update(starts=self.starts, message=self.message)
        out["sources"] = {name: getattr(self, key).source for key, name in self.FIGURES}
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
) -> EngineSizing:
    """vLLM's pool as its worker and KV manager size it (module docstring); ``starts``: the engine's start
    checks pass (available > 0 and one max_model_len request fits: vLLM's _check_enough_kv_cache_memory)."""
    cap = int(visible_bytes * utilization)
    available = cap - weights_bytes - int(activation_bytes.value) - int(non_torch_bytes.value)
    size, att, st = kv_groups(n_attention=n_attention, n_state=n_state)
    per_block = page_bytes * size
    blocks = max(available, 0) // per_block if per_block > 0 else 0
    groups = att + st
    tokens = blocks // groups * block_tokens if groups else 0
    per_request = cdiv(max_model_len, block_tokens) * att + st
    conc = blocks / per_request if per_request else 0.0
    gib = GiB
    if available <= 0:
        starts = False
        message = (
            f"the weights and activation take {(weights_bytes + int(activation_bytes.value)) / gib:.2f} GiB of the "
            f"{cap / gib:.2f} GiB that --gpu-memory-utilization {utilization} allows: no room for the KV cache "
            f"(the engine raises: memory in use exceeds the utilization cap; raise --gpu-memory-utilization)"
        )
    elif conc < 1:
        starts = False
        need = per_request * per_block
        message = (
            f"To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({need / gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available / gib:.2f} GiB). (vLLM's own message, _check_enough_kv_cache_memory)"
        )
    else:
        starts = True
        message = f"GPU KV cache size: {tokens:,} tokens; Maximum concurrency for {max_model_len:,} tokens per request: {conc:.2f}x"
    pool_src = (
        f"int({utilization} x {visible_bytes:,} B visible ({visible_source})) - weights {weights_bytes:,} B - "
        f"activation - non-torch: {worker_source}"
    )
    return EngineSizing(
        engine=engine,
        kv_pool_bytes=Figure(max(available, 0), pool_src),
        kv_pool_tokens=Figure(tokens, f"num_blocks // {groups} KV groups x block {block_tokens}: {VLLM_REPORT}"),
        block_tokens=Figure(block_tokens, block_source),
        num_blocks=Figure(
            blocks, f"available // (page {page_bytes:,} B x group size {size}): {att} attention + {st} state groups"
        ),
        max_concurrency=Figure(
            round(conc, 2), f"num_blocks / (cdiv({max_model_len}, {block_tokens}) x {att} + {st}): {VLLM_REPORT}"
        ),
        activation_bytes=activation_bytes,
        non_torch_bytes=non_torch_bytes,
        starts=starts,
        message=message,
    )


def engine_sizing(
    *,
    stack_name: str,
    kv_pool_method: str | None,
    reserve_fraction: float,
    visible_bytes: int,
    visible_source: str,
    weights_bytes: int,
    temp_bytes: int,
    temp_source: str,
    page_bytes: int | None,
    kv_bytes_per_token_layer: int,
    block_tokens: int,
    paging_source: str,
    n_mla: int,
    n_kda: int,
    max_model_len: int,
) -> EngineSizing | None:
    """The sizing of the stack's engine from a fit's numbers; None where the stack's pool is not vLLM's
    (kv_pool method utilization_minus_profile: GPU vLLM; utilization_minus_resident: the torch_tpu plugin)."""
    if kv_pool_method not in ("utilization_minus_profile", "utilization_minus_resident"):
        return None
    page = page_bytes if page_bytes else block_tokens * kv_bytes_per_token_layer
    if kv_pool_method == "utilization_minus_resident":
        act = Figure(
            0, f"the worker reads the bytes in use after profile_run, when no temporary is live: {TORCHTPU_WORKER}"
        )
        non_torch = Figure(0, "none subtracted: the plugin counts limit - free, torch_tpu's whole device view")
        worker = TORCHTPU_WORKER
    else:
        act = Figure(
            temp_bytes,
            "k3plan's temporaries stand for vLLM's profiled activation peak at max_num_batched_tokens "
            f"(no logged peak for this point): {temp_source}",
        )
        non_torch = Figure(
            0, "not found: no cited non-torch figure (CUDA context, NCCL, cuBLAS workspaces) for this GPU; 0 assumed"
        )
        worker = VLLM_GPU_WORKER
    return vllm_kv_pool(
        engine=stack_name,
        utilization=round(1 - reserve_fraction, 12),
        visible_bytes=visible_bytes,
        weights_bytes=weights_bytes,
        activation_bytes=act,
        non_torch_bytes=non_torch,
        visible_source=visible_source,
        page_bytes=page,
        block_tokens=block_tokens,
        block_source=paging_source,
        n_attention=n_mla,
        n_state=n_kda,
        max_model_len=max_model_len,
        worker_source=worker,
    )
