"""Config fields the DeepSeek-V3 and Kimi Linear families read the same way (same HF keys)."""

from __future__ import annotations

from k3plan.models.config import ConfigReader
from k3plan.models.spec import MLADims, Mlp


def mlp_schedule(c: ConfigReader, n_layers: int) -> tuple[Mlp, ...]:
    """Per layer: MoE from ``first_k_dense_replace`` on, every ``moe_layer_freq``-th layer; dense otherwise."""
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    freq = c.int("moe_layer_freq", 1)
    return tuple("moe" if i >= first_dense and (i - first_dense) % freq == 0 else "dense" for i in range(n_layers))


def mla_dims(c: ConfigReader, *, output_gate_key: str | None = None) -> MLADims:
    """MLA's head count, LoRA ranks and head dims; ``output_gate_key`` names the family's gate flag, if any."""
    return MLADims(
        heads=c.int("num_attention_heads"),
        q_lora_rank=c.opt_int("q_lora_rank"),
        kv_lora_rank=c.int("kv_lora_rank"),
        qk_nope_head_dim=c.int("qk_nope_head_dim"),
        qk_rope_head_dim=c.int("qk_rope_head_dim"),
        v_head_dim=c.int("v_head_dim"),
        output_gate=c.bool(output_gate_key, False) if output_gate_key else False,
    )
