"""Family ``kimi_linear``: Kimi K3 and Kimi-Linear-48B-A3B.

Hybrid of KDA (Kimi Delta Attention, linear attention) and MLA layers, an MoE on every layer from
``first_k_dense_replace`` on. K3 adds: fields under ``text_config``, LatentMoE
(``routed_expert_hidden_size``: experts work in a narrower latent, with down/up projections and a
norm around them), AttnRes (per-layer residual norms + [1, hidden] projections), a full-rank KDA
output gate, an MLA output gate, MXFP4 routed experts and a MoonViT vision tower.
Tensor names and shapes follow the released checkpoints (docs/k3-facts.md §2).
"""

from __future__ import annotations

import re

from k3plan.errors import K3PlanError
from k3plan.models.builder import InventoryBuilder
from k3plan.models.config import CompressedTensorsQuant, ConfigReader, quantization
from k3plan.models.families.common import mla_dims, mlp_schedule
from k3plan.models.families.moonvit import add_vision
from k3plan.models.inventory import TensorInventory
from k3plan.models.spec import KDADims, Mixer, ModelSpec, MoEDims

ARCHITECTURES = ("KimiK3ForConditionalGeneration", "KimiLinearForCausalLM")
MODEL_TYPES = ("kimi_k3", "kimi_linear")


def _text(raw: dict, source: str) -> ConfigReader:
    root = ConfigReader(raw, source=source)
    return root.sub("text_config") if root.has("text_config") else root


def parse(raw: dict, *, name: str, source: str) -> ModelSpec:
    c = _text(raw, source)
    n_layers = c.int("num_hidden_layers")
    lin = c.sub("linear_attn_config")
    kda_layers = lin.int_list("kda_layers")
    mla_layers = lin.int_list("full_attn_layers")
    if sorted(kda_layers + mla_layers) != list(range(1, n_layers + 1)):
        raise K3PlanError(
            f"{source}: linear_attn_config.kda_layers and full_attn_layers must together list "
            f"layers 1..{n_layers} once each (1-indexed)"
        )
    mixers: tuple[Mixer, ...] = tuple("kda" if i + 1 in set(kda_layers) else "mla" for i in range(n_layers))
    mlps = mlp_schedule(c, n_layers)
    hidden = c.int("hidden_size")
    latent = c.opt_int("routed_expert_hidden_size")
    n_shared = c.int("num_shared_experts", 0, minimum=0)
    moe_inter = c.int("moe_intermediate_size")
    mla = mla_dims(c, output_gate_key="mla_use_output_gate")
    kda = KDADims(
        heads=lin.int("num_heads"),
        head_dim=lin.int("head_dim"),
        conv_kernel=lin.int("short_conv_kernel_size"),
        full_rank_gate=lin.bool("use_full_rank_gate", False),
    )
    moe = MoEDims(
        num_experts=c.int("num_experts"),
        top_k=c.int("num_experts_per_token"),
        expert_in=latent or hidden,
        expert_intermediate=moe_inter,
        num_shared=n_shared,
        shared_intermediate=moe_inter * n_shared,
        latent=latent is not None,
    )
    if moe.top_k > moe.num_experts:
        raise K3PlanError(f"{source}: num_experts_per_token {moe.top_k} exceeds num_experts {moe.num_experts}")
    model_type = ConfigReader(raw, source=source).get("model_type", "")
    return ModelSpec(
        name=name,
        family="kimi_linear",
        architecture=str(model_type),
        source=source,
        hidden_size=hidden,
        vocab_size=c.int("vocab_size"),
        num_layers=n_layers,
        mixers=mixers,
        mlps=mlps,
        dense_intermediate=c.int("intermediate_size"),
        mla=mla,
        kda=kda,
        moe=moe,
        mtp_layers=c.int("num_nextn_predict_layers", 0, minimum=0),
        max_context=c.opt_int("max_position_embeddings") or c.opt_int("model_max_length"),
        attn_res_block_size=c.opt_int("attn_res_block_size"),
    )


def _quant_rules(raw: dict, source: str):
    """(format, ignore regexes) that the config's quantization_config would apply to Linears."""
    q = quantization(_text(raw, source), accepted=(CompressedTensorsQuant,))
    return (q.storage, q.ignore_patterns()) if q else (None, [])


def inventory(spec: ModelSpec, raw: dict) -> tuple[TensorInventory, tuple[str, ...]]:
    c = _text(raw, spec.source)
    is_k3 = ConfigReader(raw, source=spec.source).has("text_config")
    top = "language_model." if is_k3 else ""
    pre = f"{top}model."
    h, kda, mla, moe = spec.hidden_size, spec.kda, spec.mla, spec.moe
    assert kda is not None  # a kimi_linear spec always carries KDA dims (spec() above)
    quant_fmt, ignore = _quant_rules(raw, spec.source)
    expert_fmt = quant_fmt or "bf16"
    attn_res = c.has("attn_res_block_size")
    b = InventoryBuilder()
    E = [("embed", h)]
    b.linear(
        f"{pre}embed_tokens.weight",
        [("vocab", spec.vocab_size)],
        E,
        fmt="bf16",
        kind="global",
        role="embed",
        active=0.0,
    )
    b.vector(f"{pre}norm.weight", E, fmt="bf16", kind="global", role="norm")
    if attn_res:
        b.vector(f"{pre}output_attn_res_norm.weight", E, fmt="bf16", kind="global", role="norm")
        b.linear(f"{pre}output_attn_res_proj.weight", [("unit", 1)], E, fmt="bf16", kind="global", role="norm")
    b.linear(f"{top}lm_head.weight", [("vocab", spec.vocab_size)], E, fmt="bf16", kind="global", role="lm_head")

    HD = [("heads", kda.heads), ("head_dim", kda.head_dim)]
    for i in range(spec.num_layers):
        L = f"{pre}layers.{i}."
        mixer, mlp = spec.mixers[i], spec.mlps[i]
        kw = dict(layer=i, kind=mixer, fmt="bf16")
        b.vector(f"{L}input_layernorm.weight", E, role="norm", **kw)
        if attn_res:
            b.vector(f"{L}self_attention_res_norm.weight", E, role="norm", **kw)
            b.linear(f"{L}self_attention_res_proj.weight", [("unit", 1)], E, role="norm", **kw)
        A = f"{L}self_attn."
        if mixer == "kda":
            for p in "qkv":
                b.linear(f"{A}{p}_proj.weight", HD, E, role="attn", **kw)
            for p in "qkv":
                b.add(
                    f"{A}{p}_conv1d.weight",
                    [HD, [("unit", 1)], [("conv", kda.conv_kernel)]],
                    role="attn",
                    layer=i,
                    kind="kda",
                    fmt="f32",
                )
            b.linear(f"{A}f_a_proj.weight", [("low_rank", kda.head_dim)], E, role="attn", **kw)
            b.linear(f"{A}f_b_proj.weight", HD, [("low_rank", kda.head_dim)], role="attn", **kw)
            # K3 stores A_log padded to head_dim (128, first 96 used); Kimi-Linear as [1, 1, heads, 1].
            if kda.full_rank_gate:
                b.vector(f"{A}A_log", [("head_dim", kda.head_dim)], role="attn", layer=i, kind="kda", fmt="f32")
            else:
                b.add(
                    f"{A}A_log",
                    [[("unit", 1)], [("unit", 1)], [("heads", kda.heads)], [("unit", 1)]],
                    role="attn",
                    layer=i,
                    kind="kda",
                    fmt="f32",
                )
            b.vector(f"{A}dt_bias", HD, role="attn", layer=i, kind="kda", fmt="f32")
            b.linear(f"{A}b_proj.weight", [("heads", kda.heads)], E, role="attn", **kw)
            if kda.full_rank_gate:
                b.linear(f"{A}g_proj.weight", HD, E, role="attn", **kw)
            else:
                b.linear(f"{A}g_a_proj.weight", [("low_rank", kda.head_dim)], E, role="attn", **kw)
                b.linear(f"{A}g_b_proj.weight", HD, [("low_rank", kda.head_dim)], role="attn", **kw)
            b.vector(f"{A}o_norm.weight", [("head_dim", kda.head_dim)], role="attn", layer=i, kind="kda", fmt="f32")
            b.linear(f"{A}o_proj.weight", E, HD, role="attn", **kw)
        else:
            qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            if mla.q_lora_rank:
                b.linear(f"{A}q_a_proj.weight", [("q_lora", mla.q_lora_rank)], E, role="attn", **kw)
                b.vector(f"{A}q_a_layernorm.weight", [("q_lora", mla.q_lora_rank)], role="attn", **kw)
                b.linear(
                    f"{A}q_b_proj.weight",
                    [("heads", mla.heads), ("head_dim", qk)],
                    [("q_lora", mla.q_lora_rank)],
                    role="attn",
                    **kw,
                )
            else:
                b.linear(f"{A}q_proj.weight", [("heads", mla.heads), ("head_dim", qk)], E, role="attn", **kw)
            b.linear(f"{A}kv_a_proj_with_mqa.weight", [("kv_lora", mla.cache_values_per_token)], E, role="attn", **kw)
            b.vector(f"{A}kv_a_layernorm.weight", [("kv_lora", mla.kv_lora_rank)], role="attn", **kw)
            b.linear(
                f"{A}kv_b_proj.weight",
                [("heads", mla.heads), ("head_dim", mla.qk_nope_head_dim + mla.v_head_dim)],
                [("kv_lora", mla.kv_lora_rank)],
                role="attn",
                **kw,
            )
            if mla.output_gate:
                b.linear(
                    f"{A}g_proj.weight", [("heads", mla.heads), ("head_dim", mla.v_head_dim)], E, role="attn", **kw
                )
            b.linear(f"{A}o_proj.weight", E, [("heads", mla.heads), ("head_dim", mla.v_head_dim)], role="attn", **kw)

        kw = dict(layer=i, kind=mlp, fmt="bf16")
        b.vector(f"{L}post_attention_layernorm.weight", E, role="norm", **kw)
        if attn_res:
            b.vector(f"{L}mlp_res_norm.weight", E, role="norm", **kw)
            b.linear(f"{L}mlp_res_proj.weight", [("unit", 1)], E, role="norm", **kw)
        if mlp == "dense":
            F = [("mlp", spec.dense_intermediate)]
            b.linear(f"{L}mlp.gate_proj.weight", F, E, role="dense_mlp", **kw)
            b.linear(f"{L}mlp.up_proj.weight", F, E, role="dense_mlp", **kw)
            b.linear(f"{L}mlp.down_proj.weight", E, F, role="dense_mlp", **kw)
            continue
        M = f"{L}block_sparse_moe."
        X = [("expert", moe.num_experts)]
        b.linear(f"{M}gate.weight", X, E, role="router", **kw)
        b.vector(f"{M}gate.e_score_correction_bias", X, role="router", layer=i, kind="moe", fmt="f32")
        lat = [("latent", moe.expert_in)] if moe.latent else E
        if moe.latent:
            b.linear(f"{M}routed_expert_down_proj.weight", lat, E, role="latent_proj", **kw)
            b.linear(f"{M}routed_expert_up_proj.weight", E, lat, role="latent_proj", **kw)
            if c.bool("latent_moe_use_norm", False):
                b.vector(f"{M}routed_expert_norm.weight", lat, role="latent_proj", **kw)
        if moe.num_shared:
            S = [("mlp", moe.shared_intermediate)]
            b.linear(f"{M}shared_experts.gate_proj.weight", S, E, role="shared_expert", **kw)
            b.linear(f"{M}shared_experts.up_proj.weight", S, E, role="shared_expert", **kw)
            b.linear(f"{M}shared_experts.down_proj.weight", E, S, role="shared_expert", **kw)
        F = [("mlp", moe.expert_intermediate)]
        ek = dict(
            role="expert",
            layer=i,
            kind="moe",
            fmt=expert_fmt,
            active=moe.top_k / moe.num_experts,
            lead=("expert", moe.num_experts),
        )
        b.linear(M + "experts.{e}.w1.weight", F, lat, **ek)
        b.linear(M + "experts.{e}.w2.weight", lat, F, **ek)
        b.linear(M + "experts.{e}.w3.weight", F, lat, **ek)

    notes = list(add_vision(b, raw, spec))
    notes += _quant_notes(b, quant_fmt, ignore)
    return b.inventory(), tuple(notes)


def _quant_notes(b: InventoryBuilder, fmt: str | None, ignore: list[re.Pattern]) -> list[str]:
    """Where the config's quantization rules (``fmt`` and ``ignore``, from _quant_rules) and the
    checkpoint (only routed experts quantized) disagree: Linears the rules would quantize but the
    checkpoint stores in BF16."""
    if not fmt:
        return []
    ignored = _any_match(ignore)
    linear_roles = {"attn", "router", "latent_proj", "shared_expert", "dense_mlp", "lm_head", "norm"}
    diverging = [
        t
        for t in b.tensors
        if t.kind not in ("vision", "mtp")
        and t.role in linear_roles
        and t.fmt == "bf16"
        and len(t.shape) == 2
        and not ignored(t.name)
    ]
    if not diverging:
        return []
    params = sum(t.params for t in diverging)
    roles = sorted({t.role for t in diverging})
    return [
        f"config quantization rules ({fmt}, targets Linear) would also quantize {len(diverging)} "
        f"tensors ({', '.join(roles)}; {params:,} params) that the checkpoint stores in BF16; "
        f"the inventory follows the checkpoint (only routed experts are {fmt})"
    ]


def _any_match(patterns: list[re.Pattern]):
    """``name -> any(p.match(name) for p in patterns)`` as one regex (an alternation matches at the
    start where any of its branches does); the patterns one by one where they do not combine
    (a backreference would count the groups of the branches before it, flags must agree)."""
    if any(re.search(r"\\[1-9]|\(\?P=", p.pattern) for p in patterns):
        return lambda name: any(p.match(name) for p in patterns)
    try:
        one = re.compile("|".join(f"(?:{p.pattern})" for p in patterns)) if patterns else None
    except re.error:
        return lambda name: any(p.match(name) for p in patterns)
    if one is None or any(p.flags != one.flags for p in patterns):
        return lambda name: any(p.match(name) for p in patterns)
    return lambda name: one.match(name) is not None
