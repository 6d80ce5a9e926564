"""SGLang's hierarchical cache (``--enable-hierarchical-cache``, HiCache) on the GPU: what it allocates there and when,
as the sglang 0.4.2.post1-0.4.9 wheels (PyPI) do it (0.4.2.post1-0.4.3.post2 register the flag and ship the
controller but build no HiRadixCache: no controller runs there). Nothing here is priced: what the code sizes on the GPU is nothing
at start, and what a release puts on GPU 0 is sized by the CUDA driver, not by SGLang (a caveat, below).

When: managers/scheduler.py ``Scheduler.init_memory_pool_and_cache`` builds ``HiRadixCache`` (mem_cache/
hiradix_cache.py) after ``TpModelWorker`` is up, i.e. after ModelRunner.initialize has loaded the model, sized the KV
pool from --mem-fraction-static (model_runner.py ``profile_max_num_token``: rest_memory = available after loading -
total x (1 - mem_fraction_static)) and captured the CUDA graphs. So whatever HiCache holds on a GPU comes out of the
1 - mem_fraction_static share, beside the graphs and the activations, and never moves the pool.

What (0.4.5 wheel): the host pool (mem_pool_host: ``MLATokenToKVPoolHost`` / ``MHATokenToKVPoolHost``, hicache_ratio x
the device pool's tokens, ``torch.empty(..., device='cpu', pin_memory=True)``) and its ``mem_state`` / ``free_slots``
are host memory; ``HiCacheController.__init__`` (managers/cache_controller.py) makes two CUDA streams (write_stream,
load_stream) and starts the write / load threads, with no GPU tensor. GPU memory is taken only when KV moves, at run
time: a write-through (a node's second hit, ``HiRadixCache.inc_hit_count``: hit_count > write_through_threshold 1; not
on the warm-up request's first insert) gathers ``MLATokenToKVPool.get_flat_data`` (``torch.stack`` of each layer's
rows: layers x tokens x (kv_lora_rank + qk_rope_head_dim) x the KV dtype's bytes, about twice that at the stack) for at
most 2 x TransferBuffer.max_buffer_size (1,000) - 1 tokens an operation (``CacheOperation.split``), on write_stream,
then copies it to the host; a load-back copies one layer's rows at a time to the GPU (``transfer_per_layer``). For
DeepSeek-R1 in bf16 KV: 2 x 61 x 1,999 x 576 x 2 B = 0.26 GiB at the write's peak, 72 MiB a layer for a 65,536-token
load. Run-time memory, in the same share; not priced (k3plan prices no run-time activations for SGLang).

GPU 0 (``HICACHE_GPU0_FIRST`` - ``HICACHE_GPU0_LAST``): the controller's threads enter ``with torch.cuda.stream(...)``
(write_thread_func_direct / load_thread_func_* / write_aux_func); a new thread's CUDA device is device 0, so on every
rank but GPU 0's the stream context switches device 0 -> the rank's GPU and back, and the process ends up holding a
CUDA context on GPU 0 (sgl-project/sglang#5778, 'fix bug that gpu0 occupies more memory when hicache is turned on', by
the reporter of sgl-project/sglang#5372: 'gpu0 needs to occupy more memory, 320M * (tp - 1) for H20'). The 0.4.6.post3
wheel replaces the stream contexts with ``torch.cuda.set_stream(stream)`` (which moves the thread to the stream's
device) in all of them. A CUDA context's size is the driver's (the GPU, CUDA and torch builds), not a figure SGLang's
code computes, and when the first switch creates it (the thread's first CUDA call after the context manager, torch's
lazy device switch) was not read: a caveat, not a term.
"""

from __future__ import annotations

from k3plan.engines.release import Release

HICACHE_FLAG = "--enable-hierarchical-cache"
# the releases whose HiCacheController threads enter torch.cuda.stream(...) from a thread on device 0: (release, post)
# the first whose Scheduler builds HiRadixCache (0.4.2.post1-0.4.3.post2: the flag and the controller, no HiRadixCache)
HICACHE_GPU0_FIRST: tuple[Release, int] = ((0, 4, 3), 3)
HICACHE_GPU0_LAST: tuple[Release, int] = ((0, 4, 6), 2)  # 0.4.6.post3 switches to torch.cuda.set_stream
HICACHE_GPU0_SOURCE = (
    "sglang 0.4.3.post3-0.4.6.post2 wheels (PyPI), sglang/srt/managers/cache_controller.py HiCacheController "
    "(write_thread_func_direct, load_thread_func_direct, load_thread_func_layer_by_layer, write_aux_func, "
    "load_thread_func_buffer: 'with torch.cuda.stream(self.write_stream / self.load_stream)' in a thread whose device "
    "is 0); the 0.4.6.post3 wheel calls torch.cuda.set_stream instead (sgl-project/sglang#5778); the threads start in "
    "HiRadixCache.__init__ (mem_cache/hiradix_cache.py), built by Scheduler.init_memory_pool_and_cache after the KV pool "
    "is sized and the CUDA graphs captured (managers/scheduler.py)"
)
# the reporter's measurement, sgl-project/sglang#5778's description (pynvml on 8 x H20, TP 8, DeepSeek-R1): quoted in
# the caveat, not priced (a driver's context size, not SGLang's code)
HICACHE_GPU0_MEASURED = "320M * (tp - 1) for H20"


def hicache_gpu0_caveat(*, on: bool, release: Release | None, post: int, tp: int, platform: str = "") -> str | None:
    """The caveat for a command that runs HiCache (``on``) in a release whose controller threads put a CUDA context
    of every other rank on GPU 0 (module docstring), at ``tp`` > 1 on a GPU; None otherwise (no release given: the
    newest read, which does not)."""
    if not on or release is None or tp <= 1 or platform == "tpu":
        return None
    if not HICACHE_GPU0_FIRST <= (release, post) <= HICACHE_GPU0_LAST:
        return None
    return (
        f"{HICACHE_FLAG}: every rank whose GPU is not its node's GPU 0 also holds a CUDA context on GPU 0 (up to "
        f"{tp - 1} at --tp-size {tp} on one node), made after the KV pool is sized: out of GPU 0's 1 - "
        f"mem_fraction_static share beside the CUDA graphs and activations, not priced (a driver's context size; "
        f"measured '{HICACHE_GPU0_MEASURED}' in sgl-project/sglang#5778) ({HICACHE_GPU0_SOURCE})"
    )
