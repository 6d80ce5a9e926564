"""What vLLM's ROCm load measure holds beyond the allocated weights for DeepSeek-R1 (FP8 block) at TP 8 on an
e4m3fnuz GPU (MI300X, MI325X): a replay of PyTorch's caching allocator over vLLM's load, 0.11.x-0.20.x.

Why a replay. From 0.11.0 to 0.20.x vLLM's ROCm platform measures the load as the device's used memory
(vllm/platforms/rocm.py RocmPlatform.get_current_memory_usage: ``torch.cuda.mem_get_info`` total - free, no
``empty_cache``; read in the 0.11.0, 0.11.2, 0.13.0, 0.14.1, 0.16.0, 0.17.0, 0.18.0, 0.20.0 and 0.20.2 wheels (PyPI);
from 0.21.0 it empties the cache and reads ``max_memory_allocated`` as CUDA's does: the 0.21.0, 0.23.0-0.34.0 wheels),
so "Model loading took" there counts every segment torch's caching allocator still reserves when
``GPUModelRunner.load_model``'s DeviceMemoryProfiler exits (vllm/utils/mem_utils.py), free blocks included.

What the load does on an e4m3fnuz GPU (the same in the 0.11.2, 0.13.0, 0.14.1, 0.16.0 and 0.18.0 wheels):
- the model is built on the device in its code's order (model_executor/models/deepseek_v2.py: each layer's
  fused_qkv_a_proj, q_a_layernorm, q_b_proj, kv_a_layernorm, kv_b_proj, o_proj, the one cached RoPE table
  (get_rope; DeepseekScalingRotaryEmbedding's cos_sin_cache and its temporaries), MLAAttention's scale scalars, then
  the MLP: gate, e_score_correction_bias, shared_experts (built before experts), the routed experts; weights
  [N, K] fp8 then their 128 x 128 block scales in float32);
- process_weights_after_loading (model_loader/utils.py) visits the modules in named_modules order. A block-fp8
  linear (quantization/fp8.py Fp8LinearMethod -> utils/fp8_utils.py process_fp8_weight_block_strategy) runs
  normalize_e4m3fn_to_e4m3fnuz (utils/w8a8_utils.py: the ``w == -128`` bool mask, N x K bytes, freed after the
  in-place zeroing; ``weight_scale * 2.0`` a new scale), then _maybe_pad_fp8_weight where the row is a multiple of
  512 B (VLLM_ROCM_FP8_PADDING, default on: F.pad to K + 256, then torch.cuda.empty_cache() while the old weight is
  still referenced), then the layer's weight and scale are replaced (the old ones freed after the empty_cache). The
  routed experts (Fp8MoEMethod: AITER off by default, VLLM_ROCM_USE_AITER "False" in envs.py) run the same
  normalization on w13 (256 x 512 x 7,168 B of mask at TP 8) and w2 and replace their scales; nothing pads them and
  nothing empties the cache after them;
- then every MLAAttention dequantizes kv_b_proj (v1/attention/backends/mla/common.py, 0.16.0 on
  model_executor/layers/attention/mla_attention.py: get_and_maybe_dequant_weights: an identity matrix through the
  fp8 linear) and keeps W_UV / W_UK_T as views of the bf16 product, [512, 16 x 256] a layer at TP 8.

PyTorch's allocator (c10/cuda/CUDACachingAllocator.cpp, pytorch/pytorch@001074d2; HIP builds the same file):
sizes rounded up to 512 B; requests up to 1 MiB from 2 MiB segments (small pool), larger ones from the large pool:
the smallest free block that fits (get_free_block's lower_bound on size), split where more than 1 MiB remains
(should_split), else a new segment of 20 MiB below 10 MiB or the size rounded up to 2 MiB (get_allocation_size);
free blocks merge with free neighbours; empty_cache releases only segments with no live block. Allocated bytes
count whole blocks (an unsplit block's slack included).

Run: ``python3 benchmarks/rocm_load_cache_replay.py``. Printed (PyTorch's default allocator settings): allocated
85,764,325,888 B (79.87 GiB: k3plan's 79.78 GiB weights with the padding, + the RoPE table and unsplit slack),
reserved 87,235,231,744 B = 81.24 GiB, 1.37 GiB of it free blocks (the last MoE layer's 896 MiB mask segment, a
346 MiB remnant of an earlier mask segment that a padded weight landed in before its empty_cache, and the pads'
holes). Red Hat's MI300X starts print 81.31 GiB (tests/engines/cases/vllm-kamra-r1-0528-mi300x-*): the rest,
0.07 GiB, is non-torch memory the load adds (HIP modules), not replayed. Not a k3plan rule: with it the five cases'
weights stay inside 3% as before and their pools outside (logged 85.23-88.00 GiB, k3plan 90.42-93.38 -> 88.96-91.92),
so it enters no count (the session 48 rule); the rest of their pools' gap is ROCm's non-torch increase.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from k3plan.units import GiB

MIB = 1 << 20
K_MIN_BLOCK = 512  # kMinBlockSize
K_SMALL_SIZE = MIB  # kSmallSize: the largest small-pool request
K_SMALL_BUFFER = 2 * MIB  # kSmallBuffer
K_LARGE_BUFFER = 20 * MIB  # kLargeBuffer
K_MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc
K_ROUND_LARGE = 2 * MIB  # kRoundLarge


@dataclass(eq=False)
class Block:
    addr: int
    size: int
    small: bool
    free: bool = True
    prev: Block | None = None
    next: Block | None = None


@dataclass
class Allocator:
    """CUDACachingAllocator's native path on one stream, default config (no expandable segments, no
    max_split_size)."""

    pools: dict[bool, list[tuple[int, int, Block]]] = field(default_factory=lambda: {True: [], False: []})
    reserved: int = 0
    allocated: int = 0
    next_addr: int = 0

    def _insert(self, b: Block) -> None:
        bisect.insort(self.pools[b.small], (b.size, b.addr, b), key=lambda t: (t[0], t[1]))

    def _remove(self, b: Block) -> None:
        pool = self.pools[b.small]
        i = bisect.bisect_left(pool, (b.size, b.addr), key=lambda t: (t[0], t[1]))
        assert pool[i][2] is b
        pool.pop(i)

    def malloc(self, nbytes: int) -> Block:
        size = max(K_MIN_BLOCK, -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK)
        small = size <= K_SMALL_SIZE
        pool = self.pools[small]
        i = bisect.bisect_left(pool, (size, -1), key=lambda t: (t[0], t[1]))
        if i < len(pool):
            b = pool.pop(i)[2]
        else:
            seg = (
                K_SMALL_BUFFER
                if small
                else K_LARGE_BUFFER
                if size < K_MIN_LARGE_ALLOC
                else -(-size // K_ROUND_LARGE) * K_ROUND_LARGE
            )
            b = Block(self.next_addr, seg, small)
            self.next_addr += seg + (1 << 40)  # segments never adjacent
            self.reserved += seg
        rest = b.size - size
        if rest >= K_MIN_BLOCK if small else rest > K_SMALL_SIZE:
            r = Block(b.addr + size, rest, small, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = r
            b.next, b.size = r, size
            self._insert(r)
        b.free = False
        self.allocated += b.size
        return b

    def free(self, b: Block) -> None:
        b.free = True
        self.allocated -= b.size
        if b.prev is not None and b.prev.free:
            p = b.prev
            self._remove(p)
            p.size += b.size
            p.next = b.next
            if b.next is not None:
                b.next.prev = p
            b = p
        if b.next is not None and b.next.free:
            n = b.next
            self._remove(n)
            b.size += n.size
            b.next = n.next
            if n.next is not None:
                n.next.prev = b
        self._insert(b)

    def empty_cache(self) -> None:
        for small, pool in self.pools.items():
            keep = []
            for t in pool:
                if t[2].prev is None and t[2].next is None:
                    self.reserved -= t[2].size
                else:
                    keep.append(t)
            self.pools[small] = keep


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def replay(tp: int = 8) -> Allocator:
    """DeepSeek-R1's load at ``tp`` (config.json: hidden 7,168, vocabulary 129,280, 61 layers of which 3 dense,
    q_lora 1,536, kv_lora 512, 128 heads of 128 + 64 (q / k) and 128 (v), intermediate 18,432, experts 256 of
    2,048, one shared)."""
    h, vocab, layers, dense, experts, heads = 7168, 129280, 61, 3, 256, 128 // tp
    a = Allocator()
    live: dict[str, Block] = {}

    def new(name: str, nbytes: int) -> None:
        live[name] = a.malloc(nbytes)

    def drop(name: str) -> None:
        a.free(live.pop(name))

    def temp(nbytes: int) -> None:
        a.free(a.malloc(nbytes))

    def scale(n: int, k: int) -> int:
        return cdiv(n, 128) * cdiv(k, 128) * 4

    shapes: dict[str, tuple[int, int]] = {}

    def linear(name: str, n: int, k: int) -> None:
        shapes[name] = (n, k)
        new(name + ".w", n * k)
        new(name + ".s", scale(n, k))

    moe_i = 2048 // tp
    new("embed", vocab // tp * h * 2)
    for i in range(layers):
        p = f"{i}."
        linear(p + "qkv_a", 1536 + 576, h)
        new(p + "q_a_ln", 1536 * 2)
        linear(p + "q_b", heads * 192, 1536)
        new(p + "kv_a_ln", 512 * 2)
        linear(p + "kv_b", heads * 256, 512)
        linear(p + "o", h, heads * 128)
        if i == 0:  # the one cached RoPE: [4,096 x 40 positions, 64] float32, built from [pos, 32] temporaries
            pos = 4096 * 40
            tmps = [a.malloc(n) for n in (32 * 4, pos * 4, pos * 32 * 4, pos * 32 * 4, pos * 32 * 4)]
            new("rope", pos * 64 * 4)
            for t in tmps:
                a.free(t)
        for s in ("k_scale", "v_scale", "q_scale", "prob_scale"):
            new(p + s, 4)
        if i < dense:
            linear(p + "gate_up", 2 * 18432 // tp, h)
            linear(p + "down", h, 18432 // tp)
        else:
            new(p + "gate", experts * h * 2)
            new(p + "bias", experts * 4)
            linear(p + "sh_gate_up", 2 * moe_i, h)
            linear(p + "sh_down", h, moe_i)
            new(p + "w13", experts * 2 * moe_i * h)
            new(p + "w2", experts * h * moe_i)
            new(p + "w13s", experts * scale(2 * moe_i, h))
            new(p + "w2s", experts * scale(h, moe_i))
        new(p + "in_ln", h * 2)
        new(p + "post_ln", h * 2)
    new("norm", h * 2)
    new("lm_head", vocab // tp * h * 2)

    def process_linear(name: str) -> None:
        n, k = shapes[name]
        temp(n * k)  # the w == -128 mask
        new(name + ".s2", scale(n, k))  # weight_scale * 2.0
        if k % 512 == 0:  # F.pad, empty_cache, then the old weight replaced
            new(name + ".wp", n * (k + 256))
            a.empty_cache()
            drop(name + ".w")
        drop(name + ".s")

    for i in range(layers):
        p = f"{i}."
        for name in ("qkv_a", "q_b", "kv_b", "o"):
            process_linear(p + name)
        if i < dense:
            process_linear(p + "gate_up")
            process_linear(p + "down")
            continue
        process_linear(p + "sh_gate_up")
        process_linear(p + "sh_down")
        temp(experts * 2 * moe_i * h)  # w13's mask
        new(p + "w13s2", experts * scale(2 * moe_i, h))
        temp(experts * h * moe_i)  # w2's mask
        new(p + "w2s2", experts * scale(h, moe_i))
        drop(p + "w13s")
        drop(p + "w2s")
    for i in range(layers):  # MLA: eye(512) bf16, its fp8 quant and scales, the [512, heads x 256] bf16 product kept
        tmps = [a.malloc(512 * 512 * 2), a.malloc(512 * 512), a.malloc(512 * 4 * 4)]
        new(f"{i}.W_UV", 512 * heads * 256 * 2)
        for t in tmps:
            a.free(t)
    return a


def main() -> None:
    a = replay()
    free = sorted((t[0] for t in a.pools[False]), reverse=True)
    print(
        f"allocated {a.allocated:,} B ({a.allocated / GiB:.2f} GiB), reserved {a.reserved:,} B "
        f"({a.reserved / GiB:.2f} GiB): {(a.reserved - a.allocated) / GiB:.2f} GiB in free blocks "
        f"(largest {', '.join(f'{b / MIB:.0f}' for b in free[:3])} MiB)"
    )


if __name__ == "__main__":
    main()
