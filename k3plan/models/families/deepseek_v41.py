"""Family ``deepseek_v41``: DeepSeek-V4.1-Flash (``DeepseekV41ForCausalLM``): CSA2 + single-pass mHC + MoE,
with Engram n-gram memory, DSpark drafts and a vision tower.

config.json nests the text model under ``text_config`` and the ViT under ``vision_config``; the checkpoint
keeps DeepSeek's own names (no ``model.`` prefix), as V4's. Laid out as the public checkpoint's safetensors
headers have it (tests/models/test_deepseek_v41.py checks the totals: 96,085 tensors, 510,286,023,000 B):

- every layer (40 backbone + ``num_nextn_predict_layers`` DSpark blocks): V4's attention (``attn.wq_a``,
  ``q_norm``, ``wq_b``, one shared-KV ``wkv`` of ``head_dim``, ``kv_norm``, ``attn_sink``, grouped ``wo_a`` /
  ``wo_b``), the mHC mixes ``hc_{attn,ffn}_{fn,base,scale}`` (f32) -- no ``hc_head_*`` (single-pass mHC) --
  and an MoE: ``ffn.gate.weight`` (bf16), ``gate.bias`` and the vision routing bias ``gate.bias_vl`` (f32),
  a shared expert (fp8) and routed experts in FP4 (I8-packed, E8M0 a 32). DSpark blocks route over their own
  ``dspark_n_routed_experts`` (top ``dspark_num_experts_per_tok``).
- CSA2, on the backbone only: a ``kv_source`` layer carries ``attn.compressor.{wkv,norm}`` (+ ``wgate`` where
  its ratio is above 1) and the indexer's key half ``attn.indexer.{wk,k_norm}`` (bf16, no ``ape``); an
  ``index_source`` layer the query half ``attn.indexer.wq_b`` (fp8) and ``weights_proj`` (bf16).
- Engram on ``engram_layer_ids``: ``engram.embed`` [num_embeddings, head_dim] (e4m3 rows + E8M0 a 32: 264 B a
  row), ``engram.wkv`` [(hc_mult + 1) x h, (max_ngram - 1) x n_heads x head_dim] (fp8) and ``q_weight`` /
  ``k_weight`` [hc_mult, h] (bf16). Kind ``engram``: outside the backbone totals, a memory tier of its own.
- DSpark (kind ``mtp``): ``mtp.0.main_proj`` [h, h x targets] (fp8) + ``main_norm``; the last block's
  ``norm``, ``markov_head.{embed,head}`` [vocab, markov_rank] and ``confidence_head.proj`` [1, h + rank].
- vision (kind ``vision``, all bf16): ``vision.patch_embed``, ``vision.blocks.{i}`` (norm1, fused ``wqkv`` with
  bias, ``wo`` with bias, norm2, SwiGLU ``mlp.w1`` [2 x inter, d] / ``w2``), ``vision.norm``, the ``aligner``
  (w1 [h, d x downsample^2], w2 [h, h], biases) and ``image_{start,end,newline}`` [h].
- fp8 weights are e4m3 with an E8M0 scale per [32, 32] block (``quantization_config``: fp8, ue8m0, [32, 32]).

The config and the checkpoint figures are public (k3plan/models/bundled/deepseek-v4.1-flash/provenance.json).
"""

from __future__ import annotations

from typing import Any

from k3plan.errors import K3PlanError
from k3plan.models.builder import InventoryBuilder
from k3plan.models.config import ConfigReader
from k3plan.models.families.deepseek_v3 import deepseek_moe
from k3plan.models.families.deepseek_v4 import rope_fields
from k3plan.models.inventory import TensorInventory
from k3plan.models.spec import CSA2Dims, DSparkDims, DSV4Dims, EngramDims, MLADims, ModelSpec
from k3plan.units import fmt_gib

ARCHITECTURES = ("DeepseekV41ForCausalLM",)
MODEL_TYPES = ("deepseek_v41",)

LINEAR_FMT = "ds_fp8_b32"
EXPERT_FMT = "ds_fp4"
ENGRAM_TABLE_FMT = "ds_fp8_row32"
# a sanity bound, not a model fact: V4.1-Flash's tables have ~3.8e8 rows each
MAX_ENGRAM_ROWS = 2**36


def _text(raw: dict, source: str) -> ConfigReader:
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise K3PlanError(
            f"{source}: field 'text_config' is {'missing' if text is None else 'not a JSON object'}; "
            "DeepSeek-V4.1's config.json nests the text model there"
        )
    return ConfigReader(text, source=source, prefix="text_config.")


def _ids(c: ConfigReader, key: str, n_layers: int, *, minimum: int = 0) -> tuple[int, ...]:
    values = c.int_list(key)
    for v in values:
        if not minimum <= v < n_layers:
            raise K3PlanError(f"{c.source}: field 'text_config.{key}' lists layer {v}; expected 0 to {n_layers - 1}")
    if len(set(values)) != len(values):
        raise K3PlanError(f"{c.source}: field 'text_config.{key}' lists a layer twice: {values}")
    return tuple(values)


def parse(raw: dict, *, name: str, source: str) -> ModelSpec:
    _quant(raw, source)
    c = _text(raw, source)
    n_layers = c.int("num_hidden_layers")
    n_mtp = c.int("num_nextn_predict_layers", 0, minimum=0)
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    head_dim = c.int("head_dim")
    rope = c.int("qk_rope_head_dim")
    if c.int("num_key_value_heads", 1) != 1:
        raise K3PlanError(f"{source}: field 'text_config.num_key_value_heads' must be 1; DeepSeek-V4.1 shares one")
    if rope >= head_dim:
        raise K3PlanError(f"{source}: text_config.qk_rope_head_dim {rope} must be below head_dim {head_dim}")
    ratios = c.int_list("compress_ratios")
    if len(ratios) != n_layers + n_mtp:
        raise K3PlanError(
            f"{source}: field 'text_config.compress_ratios' lists {len(ratios)} layers; expected "
            f"num_hidden_layers + num_nextn_predict_layers = {n_layers + n_mtp}"
        )
    o_groups = c.int("o_groups")
    if (heads * head_dim) % o_groups:
        raise K3PlanError(f"{source}: text_config.o_groups {o_groups} does not divide heads x head_dim")
    kv_src = _ids(c, "kv_source_layer_ids", n_layers)
    idx_src = _ids(c, "index_source_layer_ids", n_layers)
    if not kv_src:
        raise K3PlanError(f"{source}: field 'text_config.kv_source_layer_ids' is empty; CSA2 needs a KV source")
    for i in kv_src:
        if ratios[i] < 1:
            raise K3PlanError(
                f"{source}: text_config.kv_source_layer_ids lists layer {i}, whose compress_ratios entry is "
                f"{ratios[i]}; a KV source compresses at 1 or more"
            )
    if not set(kv_src) <= set(idx_src):
        raise K3PlanError(f"{source}: text_config.kv_source_layer_ids {list(kv_src)} must be index sources too")
    cand = c.opt_int("candidate_source_layer_id", minimum=0)
    if cand is not None and cand not in kv_src:
        raise K3PlanError(
            f"{source}: field 'text_config.candidate_source_layer_id' is {cand}; expected one of the KV sources "
            f"{list(kv_src)}"
        )
    # the later indexers' candidate set (candidate_topk_blocks x candidate_block_size entries of the candidate
    # source): where a candidate source is named, an empty set is no set
    least = 0 if cand is None else 1
    csa2 = CSA2Dims(
        kv_source_layer_ids=kv_src,
        index_source_layer_ids=idx_src,
        candidate_source_layer_id=cand,
        candidate_topk_blocks=c.int("candidate_topk_blocks", 0, minimum=least),
        candidate_block_size=c.int("candidate_block_size", 0, minimum=least),
    )
    engram = _engram(c, n_layers)
    # the FP4 / FP8 formats' scale blocks: 32 values (experts, Engram rows, indexer keys), 16 (the main KV)
    for key in ("hidden_size", "moe_intermediate_size", "head_dim", "index_head_dim") + (
        ("engram_head_dim",) if engram is not None else ()
    ):
        if c.int(key) % 32:
            raise K3PlanError(
                f"{source}: field 'text_config.{key}' is {c.int(key)}; DeepSeek-V4.1's FP4/FP8 scale blocks need a "
                "multiple of 32"
            )
    dspark = (
        DSparkDims(
            block_size=c.int("dspark_block_size"),
            target_layer_ids=_ids(c, "dspark_target_layer_ids", n_layers),
            markov_rank=c.int("dspark_markov_rank"),
            n_routed_experts=c.int("dspark_n_routed_experts"),
            num_experts_per_tok=c.int("dspark_num_experts_per_tok"),
        )
        if n_mtp
        else None
    )
    dsv4 = DSV4Dims(
        head_dim=head_dim,
        rope_dim=rope,
        sliding_window=c.int("sliding_window"),
        compress_ratios=tuple(ratios[:n_layers]),
        mtp_compress_ratios=tuple(ratios[n_layers:]),
        index_n_heads=c.int("index_n_heads"),
        index_head_dim=c.int("index_head_dim"),
        index_topk=c.int("index_topk"),
        o_groups=o_groups,
        o_lora_rank=c.int("o_lora_rank"),
        hc_mult=c.int("hc_mult", 1),
        hc_sinkhorn_iters=c.int("hc_sinkhorn_iters", 0, minimum=0),
        num_hash_layers=0,
        **rope_fields(c),
        csa2=csa2,
        engram=engram,
        dspark=dspark,
    )
    moe = deepseek_moe(c, source, hidden=hidden)
    mla = MLADims(
        heads=heads,
        q_lora_rank=c.int("q_lora_rank"),
        kv_lora_rank=head_dim - rope,
        qk_nope_head_dim=head_dim - rope,
        qk_rope_head_dim=rope,
        v_head_dim=head_dim,
    )
    vision = raw.get("vision_config")
    if vision is not None:
        _vision_dims(raw, source)  # checked here so a bad vision_config is one line at load
    return ModelSpec(
        name=name,
        family="deepseek_v41",
        architecture=str(raw.get("model_type", "")),
        source=source,
        hidden_size=hidden,
        vocab_size=c.int("vocab_size"),
        num_layers=n_layers,
        mixers=tuple("mla" for _ in range(n_layers)),
        mlps=tuple("moe" for _ in range(n_layers)),
        dense_intermediate=moe.expert_intermediate * max(moe.num_shared, 1),
        mla=mla,
        dsv4=dsv4,
        moe=moe,
        mtp_layers=n_mtp,
        max_context=c.opt_int("max_position_embeddings"),
    )


ENGRAM_KEYS = (
    "engram_num_embeddings",
    "engram_max_ngram_size",
    "engram_n_heads",
    "engram_head_dim",
    "engram_vocab_size",
    "engram_compressed_vocab_size",
)


def _engram(c: ConfigReader, n_layers: int) -> EngramDims | None:
    if not c.has("engram_layer_ids"):
        partial = [k for k in ENGRAM_KEYS if c.has(k)]
        if partial:  # Engram's sizes without its layers: a config cut short, not a model without Engram
            raise K3PlanError(
                f"{c.source}: field 'text_config.engram_layer_ids' is missing while {', '.join(partial)} "
                "are given; expected the Engram layers, or none of the engram_* fields"
            )
        return None
    layers = _ids(c, "engram_layer_ids", n_layers)
    rows = c.int_list("engram_num_embeddings", maximum=MAX_ENGRAM_ROWS)
    if len(rows) != len(layers) or any(r < 1 for r in rows):
        raise K3PlanError(
            f"{c.source}: field 'text_config.engram_num_embeddings' lists {rows}; expected one positive row count "
            f"a layer of engram_layer_ids {list(layers)}"
        )
    return EngramDims(
        layer_ids=layers,
        num_embeddings=tuple(rows),
        max_ngram_size=c.int("engram_max_ngram_size", minimum=2),
        n_heads=c.int("engram_n_heads"),
        head_dim=c.int("engram_head_dim"),
        vocab_size=c.int("engram_vocab_size", maximum=MAX_ENGRAM_ROWS),
        compressed_vocab_size=c.int("engram_compressed_vocab_size"),
    )


def _quant(raw: dict, source: str) -> None:
    q = raw.get("quantization_config")
    if not (
        isinstance(q, dict)
        and q.get("quant_method") == "fp8"
        and q.get("scale_fmt") == "ue8m0"
        and q.get("weight_block_size") == [32, 32]
        and q.get("expert_dtype") == "fp4"
    ):
        raise K3PlanError(
            f"{source}: quantization_config {q!r}; DeepSeek-V4.1's fp8 e4m3 with ue8m0 [32, 32] scales and fp4 "
            "experts is modelled"
        )


def _vision_dims(raw: dict, source: str) -> dict[str, int]:
    vision: Any = raw.get("vision_config")  # ConfigReader refuses anything but an object, naming the field
    v = ConfigReader(vision, source=source, prefix="vision_config.")
    return {
        "layers": v.int("num_hidden_layers"),
        "dim": v.int("hidden_size"),
        "inter": v.int("intermediate_size"),
        "patch": v.int("patch_size"),
        "downsample": v.int("downsample_ratio"),
    }


def _moe(b: InventoryBuilder, spec: ModelSpec, prefix: str, i: int, *, n_e: int, top_k: int, mtp: bool) -> None:
    h, moe = spec.hidden_size, spec.moe
    E = [("embed", h)]
    kw: dict[str, Any] = dict(layer=i, kind="mtp" if mtp else "moe")
    role = (lambda r: "mtp") if mtp else (lambda r: r)
    F = f"{prefix}ffn."
    b.vector(f"{prefix}ffn_norm.weight", E, fmt="bf16", role=role("norm"), **kw)
    X = [("expert", n_e)]
    b.linear(f"{F}gate.weight", X, E, fmt="bf16", role=role("router"), **kw)
    b.vector(f"{F}gate.bias", X, fmt="f32", role=role("router"), **kw)
    b.vector(f"{F}gate.bias_vl", X, fmt="f32", role=role("router"), **kw)
    I_ = [("mlp", moe.expert_intermediate)]
    for p, dims in (("w1", (I_, E)), ("w2", (E, I_)), ("w3", (I_, E))):
        b.linear(
            F + "experts.{e}." + p,
            *dims,
            fmt=EXPERT_FMT,
            role=role("expert"),
            active=top_k / n_e,
            lead=("expert", n_e),
            **kw,
        )
    S = [("mlp", moe.shared_intermediate)]
    for p, dims in (("w1", (S, E)), ("w2", (E, S)), ("w3", (S, E))) if moe.num_shared else ():  # n_shared_experts 0
        b.linear(f"{F}shared_experts.{p}", *dims, fmt=LINEAR_FMT, role=role("shared_expert"), **kw)


def _hc(b: InventoryBuilder, spec: ModelSpec, prefix: str, what: str, role: str, **kw: Any) -> None:
    assert spec.dsv4 is not None
    m, h = spec.dsv4.hc_mult, spec.hidden_size
    n = m * m + 2 * m
    b.vector(f"{prefix}hc_{what}_base", [("hc", n)], fmt="f32", role=role, **kw)
    b.linear(f"{prefix}hc_{what}_fn", [("hc", n)], [("hc_streams", m), ("embed", h)], fmt="f32", role=role, **kw)
    b.vector(f"{prefix}hc_{what}_scale", [("hc_scale", 3)], fmt="f32", role=role, **kw)


def _layer(b: InventoryBuilder, spec: ModelSpec, prefix: str, i: int, *, mtp: bool) -> None:
    h, d, mla = spec.hidden_size, spec.dsv4, spec.mla
    assert d is not None and d.csa2 is not None and mla.q_lora_rank is not None
    E = [("embed", h)]
    Q = [("q_lora", mla.q_lora_rank)]
    D = [("head_dim", d.head_dim)]
    kind = "mtp" if mtp else "mla"
    role = (lambda r: "mtp") if mtp else (lambda r: r)
    kw: dict[str, Any] = dict(layer=i, kind=kind)
    A = f"{prefix}attn."
    _hc(b, spec, prefix, "attn", role("norm"), **kw)
    _hc(b, spec, prefix, "ffn", role("norm"), **kw)
    b.vector(f"{prefix}attn_norm.weight", E, fmt="bf16", role=role("norm"), **kw)
    b.vector(f"{A}attn_sink", [("heads", mla.heads)], fmt="f32", role=role("attn"), **kw)
    b.linear(f"{A}wq_a", Q, E, fmt=LINEAR_FMT, role=role("attn"), **kw)
    b.vector(f"{A}q_norm.weight", Q, fmt="bf16", role=role("attn"), **kw)
    b.linear(f"{A}wq_b", [("heads", mla.heads), ("head_dim", d.head_dim)], Q, fmt=LINEAR_FMT, role=role("attn"), **kw)
    b.linear(f"{A}wkv", D, E, fmt=LINEAR_FMT, role=role("attn"), **kw)
    b.vector(f"{A}kv_norm.weight", D, fmt="bf16", role=role("attn"), **kw)
    OG = [("o_groups", d.o_groups), ("o_lora", d.o_lora_rank)]
    b.linear(
        f"{A}wo_a", OG, [("group_in", mla.heads * d.head_dim // d.o_groups)], fmt=LINEAR_FMT, role=role("attn"), **kw
    )
    b.linear(f"{A}wo_b", E, OG, fmt=LINEAR_FMT, role=role("attn"), **kw)
    if not mtp:
        c2 = d.csa2
        if i in c2.kv_source_layer_ids:
            C = f"{A}compressor."
            b.linear(f"{C}wkv.weight", D, E, fmt="bf16", role="attn", **kw)
            b.vector(f"{C}norm.weight", D, fmt="bf16", role="attn", **kw)
            if d.compress_ratios[i] > 1:
                b.linear(f"{C}wgate.weight", D, E, fmt="bf16", role="attn", **kw)
            ID = [("index_dim", d.index_head_dim)]
            b.linear(f"{A}indexer.wk.weight", ID, D, fmt="bf16", role="attn", **kw)
            b.vector(f"{A}indexer.k_norm.weight", ID, fmt="bf16", role="attn", **kw)
        if i in c2.index_source_layer_ids:
            X = f"{A}indexer."
            IH = [("index_heads", d.index_n_heads)]
            b.linear(f"{X}wq_b", [*IH, ("index_dim", d.index_head_dim)], Q, fmt=LINEAR_FMT, role="attn", **kw)
            b.linear(f"{X}weights_proj.weight", IH, E, fmt="bf16", role="attn", **kw)
        g = d.engram
        if g is not None and i in g.layer_ids:
            k = g.layer_ids.index(i)
            G = f"{prefix}engram."
            ekw: dict[str, Any] = dict(layer=i, kind="engram", role="engram")
            # a lookup table: (max_ngram - 1) x n_heads rows a token of ~3.8e8, none of it "active" as a matmul
            b.linear(
                f"{G}embed",
                [("engram_rows", g.num_embeddings[k])],
                [("engram_dim", g.head_dim)],
                fmt=ENGRAM_TABLE_FMT,
                active=0.0,
                **ekw,
            )
            b.linear(
                f"{G}wkv",
                [("hc_streams_1", d.hc_mult + 1), ("embed", h)],
                [("engram_cols", g.rows_per_token_layer), ("engram_dim", g.head_dim)],
                fmt=LINEAR_FMT,
                **ekw,
            )
            b.linear(f"{G}q_weight", [("hc_streams", d.hc_mult)], E, fmt="bf16", **ekw)
            b.linear(f"{G}k_weight", [("hc_streams", d.hc_mult)], E, fmt="bf16", **ekw)
    if mtp:
        ds = d.dspark
        assert ds is not None
        _moe(b, spec, prefix, i, n_e=ds.n_routed_experts, top_k=ds.num_experts_per_tok, mtp=True)
    else:
        _moe(b, spec, prefix, i, n_e=spec.moe.num_experts, top_k=spec.moe.top_k, mtp=False)


def _vision(b: InventoryBuilder, spec: ModelSpec, raw: dict) -> None:
    v = _vision_dims(raw, spec.source)
    h, vd, vi, p, r = spec.hidden_size, v["dim"], v["inter"], v["patch"], v["downsample"]
    kw: dict[str, Any] = dict(kind="vision", role="vision", fmt="bf16")
    VD = [("vision_embed", vd)]
    E = [("embed", h)]
    b.linear("vision.patch_embed.proj.weight", VD, [("patch", 3 * p * p)], **kw)
    b.vector("vision.patch_embed.proj.bias", VD, **kw)
    for j in range(v["layers"]):
        P = f"vision.blocks.{j}."
        b.vector(f"{P}norm1.weight", VD, **kw)
        b.linear(f"{P}attn.wqkv.weight", [("qkv", 3 * vd)], VD, **kw)
        b.vector(f"{P}attn.wqkv.bias", [("qkv", 3 * vd)], **kw)
        b.linear(f"{P}attn.wo.weight", VD, VD, **kw)
        b.vector(f"{P}attn.wo.bias", VD, **kw)
        b.vector(f"{P}norm2.weight", VD, **kw)
        b.linear(f"{P}mlp.w1.weight", [("vision_mlp", 2 * vi)], VD, **kw)
        b.linear(f"{P}mlp.w2.weight", VD, [("vision_mlp", vi)], **kw)
    b.vector("vision.norm.weight", VD, **kw)
    b.linear("aligner.w1.weight", E, [("vision_merge", vd * r * r)], **kw)
    b.vector("aligner.w1.bias", E, **kw)
    b.linear("aligner.w2.weight", E, E, **kw)
    b.vector("aligner.w2.bias", E, **kw)
    for t in ("image_start", "image_end", "image_newline"):
        b.vector(t, E, **kw)


def inventory(spec: ModelSpec, raw: dict) -> tuple[TensorInventory, tuple[str, ...]]:
    d = spec.dsv4
    assert d is not None and d.csa2 is not None
    h = spec.hidden_size
    E = [("embed", h)]
    b = InventoryBuilder()
    b.linear("embed.weight", [("vocab", spec.vocab_size)], E, fmt="bf16", kind="global", role="embed", active=0.0)
    b.vector("norm.weight", E, fmt="bf16", kind="global", role="norm")
    b.linear("head.weight", [("vocab", spec.vocab_size)], E, fmt="bf16", kind="global", role="lm_head")
    for i in range(spec.num_layers):
        _layer(b, spec, f"layers.{i}.", i, mtp=False)
    ds = d.dspark
    for j in range(spec.mtp_layers):
        _layer(b, spec, f"mtp.{j}.", spec.num_layers + j, mtp=True)
    if spec.mtp_layers and ds is not None:
        M: dict[str, Any] = dict(kind="mtp", role="mtp")
        first, last = spec.num_layers, spec.num_layers + spec.mtp_layers - 1
        P, L = "mtp.0.", f"mtp.{spec.mtp_layers - 1}."
        b.linear(
            f"{P}main_proj", E, [("targets", len(ds.target_layer_ids)), ("embed", h)], fmt=LINEAR_FMT, layer=first, **M
        )
        b.vector(f"{P}main_norm.weight", E, fmt="bf16", layer=first, **M)
        b.vector(f"{L}norm.weight", E, fmt="bf16", layer=last, **M)
        R = [("markov_rank", ds.markov_rank)]
        b.linear(f"{L}markov_head.embed.weight", [("vocab", spec.vocab_size)], R, fmt="bf16", layer=last, **M)
        b.linear(f"{L}markov_head.head.weight", [("vocab", spec.vocab_size)], R, fmt="bf16", layer=last, **M)
        b.linear(
            f"{L}confidence_head.proj.weight",
            [("one", 1)],
            [("embed_rank", h + ds.markov_rank)],
            fmt="bf16",
            layer=last,
            **M,
        )
    if raw.get("vision_config") is not None:
        _vision(b, spec, raw)
    inv = b.inventory()
    c2 = d.csa2
    notes = [
        f"CSA2: main KV and indexer keys on layers {list(c2.kv_source_layer_ids)} only (ratios "
        f"{[d.compress_ratios[i] for i in c2.kv_source_layer_ids]}), shared by the layers after them; indexer "
        f"queries on {list(c2.index_source_layer_ids)}; every layer a {d.sliding_window}-token window; "
        f"single-pass mHC with {d.hc_mult} residual streams",
    ]
    if d.engram is not None:
        g = d.engram
        notes.append(
            f"Engram n-gram memory (layers {list(g.layer_ids)}): {inv.engram_params / 1e9:,.2f}B parameters, "
            f"{fmt_gib(inv.engram_bytes)}, outside the backbone totals; {g.rows_per_token_layer} rows of "
            f"{g.head_dim} a token a layer, addressed by the input tokens alone (can live below HBM, prefetched)"
        )
    if ds is not None:
        notes.append(
            f"DSpark drafter: {spec.mtp_layers} blocks, {ds.n_routed_experts} experts top-{ds.num_experts_per_tok}, "
            f"{ds.block_size} draft positions; listed separately (kind mtp) and excluded from the totals"
        )
    if raw.get("vision_config") is not None:
        notes.append(f"vision tower and aligner: {inv.vision_params / 1e6:,.1f}M parameters, excluded from the totals")
    return inv, tuple(notes)
