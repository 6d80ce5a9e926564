"""Family ``deepseek_v3``: DeepSeek-V3, Kimi K2 and Kimi-K2.5/K2.6 (MLA on every layer + MoE).

Checkpoint layout (HF ``DeepseekV3ForCausalLM``): every Linear inside the decoder layers is
fp8 e4m3 with an f32 ``weight_scale_inv`` per [128, 128] block, except the router gate (BF16);
embeddings, norms and lm_head are BF16. The multi-token-prediction (MTP) layers from
``num_nextn_predict_layers`` sit after the last decoder layer; they are listed with kind ``mtp``
and excluded from the model's totals.

Kimi-K2.5 / K2.6 (``KimiK25ForConditionalGeneration``): the same text model under ``text_config``, its
tensors under ``language_model.``; a compressed-tensors ``quantization_config`` (pack-quantized int4, group
32) whose ``ignore`` list leaves only the routed experts quantized -- the router, attention, shared experts,
the dense MLP and lm_head are BF16 -- and a MoonViT vision tower + projector (kind ``vision``, counted apart).

NVIDIA's ModelOpt NVFP4 exports (nvidia/DeepSeek-R1-0528-FP4-v2): ``quantization_config`` with ``quant_method:
modelopt``, ``quant_algo: NVFP4``; every decoder Linear is NVFP4 (formats.nvfp4, named by its base: ``<base>.weight``
/ ``.weight_scale`` / ``.weight_scale_2`` / ``.input_scale``) unless ``exclude_modules`` names it, then BF16; the
router gate, embeddings, norms and lm_head are BF16 as in the fp8 checkpoint. A MoE layer's routed experts are read
as one: expert 0's names decide for all.

AMD Quark's OCP MXFP4 exports (amd/DeepSeek-R1-0528-MXFP4-Preview): ``quantization_config`` with ``quant_method:
quark``; every decoder Linear is MXFP4 under Quark's names (formats.quark_mxfp4: ``<base>.weight`` /
``.weight_scale``) unless ``exclude`` names it, then BF16 -- the same name-by-name rule as ModelOpt's.
"""

from __future__ import annotations

from typing import Any

from k3plan.errors import K3PlanError
from k3plan.models.builder import InventoryBuilder
from k3plan.models.config import (
    CompressedTensorsQuant,
    ConfigReader,
    Fp8BlockQuant,
    ModelOptQuant,
    QuarkQuant,
    quantization,
)
from k3plan.models.families.common import mla_dims, mlp_schedule
from k3plan.models.families.moonvit import add_vision
from k3plan.models.inventory import TensorInventory
from k3plan.models.spec import ModelSpec, MoEDims

ARCHITECTURES = ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration")
MODEL_TYPES = ("deepseek_v3", "kimi_k2", "kimi_k25")


def _text(raw: dict, source: str) -> ConfigReader:
    """The text model's fields: ``text_config`` in a multimodal config (Kimi-K2.5/K2.6), else the root."""
    root = ConfigReader(raw, source=source)
    return root.sub("text_config") if root.has("text_config") else root


def parse(raw: dict, *, name: str, source: str) -> ModelSpec:
    c = _text(raw, source)
    n_layers = c.int("num_hidden_layers")
    mlps = mlp_schedule(c, n_layers)
    hidden = c.int("hidden_size")
    moe = deepseek_moe(c, source, hidden=hidden)
    return ModelSpec(
        name=name,
        family="deepseek_v3",
        architecture=str(ConfigReader(raw, source=source).get("model_type", "")),
        source=source,
        hidden_size=hidden,
        vocab_size=c.int("vocab_size"),
        num_layers=n_layers,
        mixers=tuple("mla" for _ in range(n_layers)),
        mlps=mlps,
        dense_intermediate=c.int("intermediate_size"),
        mla=mla_dims(c),
        moe=moe,
        mtp_layers=c.int("num_nextn_predict_layers", 0, minimum=0),
        max_context=c.opt_int("max_position_embeddings"),
    )


# a quantization_config that decides each decoder Linear by its name (``excluded``) and stores the rest as ``storage``
NamedQuant = ModelOptQuant | QuarkQuant


def _formats(raw: dict, source: str = "config.json") -> tuple[str, str, NamedQuant | None]:
    """(the decoder Linears' format, the routed experts' format, a ModelOpt config deciding each Linear by name).
    fp8: every decoder Linear but the router; compressed-tensors (Kimi-K2.5/K2.6): the routed experts only -- its
    ``ignore`` list names attention, the shared experts, the dense MLP and lm_head, and the checkpoint stores the
    router BF16 as well; ModelOpt NVFP4 / Quark MXFP4: every decoder Linear its exclude list does not name."""
    q = quantization(_text(raw, source), accepted=(Fp8BlockQuant, CompressedTensorsQuant, ModelOptQuant, QuarkQuant))
    if isinstance(q, CompressedTensorsQuant):
        return "bf16", q.storage, None
    if isinstance(q, (ModelOptQuant, QuarkQuant)):
        return q.storage, q.storage, q
    lf = q.storage if isinstance(q, Fp8BlockQuant) else "bf16"
    return lf, lf, None


def _linear(b: InventoryBuilder, q: NamedQuant | None, name: str, out, inp, *, fmt: str, **kw: Any) -> None:
    """One decoder Linear ``<module>.weight`` in ``fmt``; under a ModelOpt / Quark config, its format (named by its
    module) unless the exclude list names the module, then BF16. The routed experts' template is decided by expert 0's
    name."""
    if q is not None:
        module = name.removesuffix(".weight")
        if q.excluded(module.format(e=0)):
            fmt = "bf16"
        else:
            fmt, name = q.storage, module
    b.linear(name, out, inp, fmt=fmt, **kw)


def _decoder_layer(
    b: InventoryBuilder,
    spec: ModelSpec,
    i: int,
    lf: str,
    *,
    ef: str | None = None,
    top: str = "",
    kind_override=None,
    q: NamedQuant | None = None,
) -> None:
    h, mla, moe = spec.hidden_size, spec.mla, spec.moe

    def lin(name: str, out, inp, **kw: Any) -> None:
        _linear(b, q, name, out, inp, **kw)

    ef = ef or lf
    E = [("embed", h)]
    L = f"{top}model.layers.{i}."
    mixer_kind = kind_override or "mla"
    mlp_kind = kind_override or spec.mlps[min(i, spec.num_layers - 1)]
    role = (lambda r: "mtp") if kind_override else (lambda r: r)
    kw: dict[str, Any] = dict(layer=i, kind=mixer_kind)
    b.vector(f"{L}input_layernorm.weight", E, fmt="bf16", role=role("norm"), **kw)
    A = f"{L}self_attn."
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank:
        lin(f"{A}q_a_proj.weight", [("q_lora", mla.q_lora_rank)], E, fmt=lf, role=role("attn"), **kw)
        b.vector(f"{A}q_a_layernorm.weight", [("q_lora", mla.q_lora_rank)], fmt="bf16", role=role("attn"), **kw)
        lin(
            f"{A}q_b_proj.weight",
            [("heads", mla.heads), ("head_dim", qk)],
            [("q_lora", mla.q_lora_rank)],
            fmt=lf,
            role=role("attn"),
            **kw,
        )
    else:
        lin(f"{A}q_proj.weight", [("heads", mla.heads), ("head_dim", qk)], E, fmt=lf, role=role("attn"), **kw)
    lin(f"{A}kv_a_proj_with_mqa.weight", [("kv_lora", mla.cache_values_per_token)], E, fmt=lf, role=role("attn"), **kw)
    b.vector(f"{A}kv_a_layernorm.weight", [("kv_lora", mla.kv_lora_rank)], fmt="bf16", role=role("attn"), **kw)
    lin(
        f"{A}kv_b_proj.weight",
        [("heads", mla.heads), ("head_dim", mla.qk_nope_head_dim + mla.v_head_dim)],
        [("kv_lora", mla.kv_lora_rank)],
        fmt=lf,
        role=role("attn"),
        **kw,
    )
    lin(f"{A}o_proj.weight", E, [("heads", mla.heads), ("head_dim", mla.v_head_dim)], fmt=lf, role=role("attn"), **kw)
    kw = dict(layer=i, kind=mlp_kind)
    b.vector(f"{L}post_attention_layernorm.weight", E, fmt="bf16", role=role("norm"), **kw)
    M = f"{L}mlp."
    if mlp_kind == "dense":
        F = [("mlp", spec.dense_intermediate)]
        for p, dims in (("gate", (F, E)), ("up", (F, E)), ("down", (E, F))):
            lin(f"{M}{p}_proj.weight", *dims, fmt=lf, role="dense_mlp", **kw)
        return
    X = [("expert", moe.num_experts)]
    b.linear(f"{M}gate.weight", X, E, fmt="bf16", role=role("router"), **kw)
    b.vector(f"{M}gate.e_score_correction_bias", X, fmt="f32", role=role("router"), **kw)
    if moe.num_shared:
        S = [("mlp", moe.shared_intermediate)]
        for p, dims in (("gate", (S, E)), ("up", (S, E)), ("down", (E, S))):
            lin(f"{M}shared_experts.{p}_proj.weight", *dims, fmt=lf, role=role("shared_expert"), **kw)
    F = [("mlp", moe.expert_intermediate)]
    for p, dims in (("gate", (F, E)), ("up", (F, E)), ("down", (E, F))):
        lin(
            M + "experts.{e}." + f"{p}_proj.weight",
            *dims,
            fmt=ef,
            role=role("expert"),
            active=moe.top_k / moe.num_experts,
            lead=("expert", moe.num_experts),
            **kw,
        )


def inventory(spec: ModelSpec, raw: dict) -> tuple[TensorInventory, tuple[str, ...]]:
    lf, ef, q = _formats(raw, spec.source)
    top = "language_model." if ConfigReader(raw, source=spec.source).has("text_config") else ""
    h = spec.hidden_size
    E = [("embed", h)]
    b = InventoryBuilder()
    b.linear(
        f"{top}model.embed_tokens.weight",
        [("vocab", spec.vocab_size)],
        E,
        fmt="bf16",
        kind="global",
        role="embed",
        active=0.0,
    )
    b.vector(f"{top}model.norm.weight", E, fmt="bf16", kind="global", role="norm")
    b.linear(f"{top}lm_head.weight", [("vocab", spec.vocab_size)], E, fmt="bf16", kind="global", role="lm_head")
    for i in range(spec.num_layers):
        _decoder_layer(b, spec, i, lf, ef=ef, top=top, q=q)
    # MTP: embedding + projection of [h; embed] + a full MoE decoder layer + shared head.
    for i in range(spec.num_layers, spec.num_layers + spec.mtp_layers):
        L = f"{top}model.layers.{i}."
        M: dict[str, Any] = dict(layer=i, kind="mtp", role="mtp", fmt="bf16")
        b.linear(f"{L}embed_tokens.weight", [("vocab", spec.vocab_size)], E, **M)
        b.vector(f"{L}enorm.weight", E, **M)
        b.vector(f"{L}hnorm.weight", E, **M)
        _linear(b, q, f"{L}eh_proj.weight", E, [("embed2", 2 * h)], **M)
        b.vector(f"{L}shared_head.norm.weight", E, **M)
        b.linear(f"{L}shared_head.head.weight", [("vocab", spec.vocab_size)], E, **M)
        _decoder_layer(b, spec, i, lf, ef=ef, top=top, kind_override="mtp", q=q)
    notes = list(add_vision(b, raw, spec))
    if spec.mtp_layers:
        notes.append(f"{spec.mtp_layers} MTP layer(s) listed separately and excluded from the totals")
    return b.inventory(), tuple(notes)


def deepseek_moe(c: ConfigReader, source: str, *, hidden: int) -> MoEDims:
    """The routed and shared experts of a DeepSeek-style config (V3, Kimi K2, V4): each expert on the full hidden."""
    n_shared = c.int("n_shared_experts", 0, minimum=0)
    moe_inter = c.int("moe_intermediate_size")
    moe = MoEDims(
        num_experts=c.int("n_routed_experts"),
        top_k=c.int("num_experts_per_tok"),
        expert_in=hidden,
        expert_intermediate=moe_inter,
        num_shared=n_shared,
        shared_intermediate=moe_inter * n_shared,
        latent=False,
    )
    if moe.top_k > moe.num_experts:
        raise K3PlanError(f"{source}: num_experts_per_tok {moe.top_k} exceeds n_routed_experts {moe.num_experts}")
    return moe
