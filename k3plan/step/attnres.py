"""Attention Residuals (Kimi K3's AttnRes): which history each call of a forward mixes (issue 38)."""

from __future__ import annotations


def attnres_call_blocks(layers: int, block_size: int) -> list[int]:
    """The history's block count K at each Attention Residual call of one forward, in order.

    KimiDecoderLayer.forward (kowalski-4831/vllm-torchtpu src/vllm_torchtpu/models/vllm/kimi_k3/model.py @589f3946):
    ``if block_residuals.shape[-2] > 0: self_attention_res(...)``; ``if self.layer_idx % self.attn_res_block_size == 0:
    block_residuals = cat((block_residuals, prefix_sum))``; ``mlp_res(prefix_sum, block_residuals)``;
    KimiModel.forward: ``output_attn_res(hidden_states, block_residuals)`` after the last layer. K3 (93 layers, a
    block every 12): 92 + 93 + 1 = 186 calls, K = 1..8."""
    if layers < 1 or block_size < 1:
        raise ValueError("layers and block size must be >= 1")
    k, out = 0, []
    for i in range(layers):
        if k > 0:
            out.append(k)  # self_attention_res
        if i % block_size == 0:
            k += 1
        out.append(k)  # mlp_res
    out.append(k)  # output_attn_res
    return out
