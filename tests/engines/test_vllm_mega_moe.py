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
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 22, 0), **args) is None
    assert mega_moe_non_torch(moe_backend=None, release=(0, 25, 0), **args) is None
    one = dict(args, ep=1)  # torch's allocator for a group of one: in the torch peak, not this term
    assert mega_moe_non_torch(moe_backend="deep_gemm_mega_moe", release=(0, 25, 0), **one) is None
