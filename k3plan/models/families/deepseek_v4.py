"""Family ``deepseek_v4``: DeepSeek-V4-Flash and DeepSeek-V4-Pro (compressed sparse attention + mHC + MoE).

Read from config.json (``model_type: deepseek_v4``) and laid out as the public checkpoints' safetensors
headers have it (DeepSeek's own names, no ``model.`` prefix):

- every layer: one shared-KV attention head of ``head_dim`` (512) values: ``attn.wq_a`` [q_lora, h] ->
  ``q_norm`` -> ``attn.wq_b`` [heads x head_dim, q_lora]; ``attn.wkv`` [head_dim, h] -> ``kv_norm``; the
  grouped low-rank output ``attn.wo_a`` [o_groups x o_lora, heads x head_dim / o_groups] and ``attn.wo_b``
  [h, o_groups x o_lora]; an f32 ``attn_sink`` a head.
- ``compress_ratios[i]`` non-zero: ``attn.compressor.{wkv,wgate}`` [c x head_dim, h] (bf16), ``ape``
  [ratio, c x head_dim] (f32) and ``norm`` [head_dim], c = 2 for ratio 4 (CSA's overlapping blocks), 1 else
  (HCA). Ratio 4 also carries the lightning indexer: ``attn.indexer.wq_b`` [index_heads x index_head_dim,
  q_lora], ``weights_proj`` [index_heads, h] and its own compressor (c = 2 of index_head_dim).
- mHC: ``hc_{attn,ffn}_fn`` [m^2 + 2m, m x h], ``_base`` [m^2 + 2m], ``_scale`` [3] (f32, m = hc_mult);
  ``hc_head_*`` once at the top.
- every layer is MoE: ``ffn.gate.weight`` [E, h]; the first ``num_hash_layers`` route by token id through
  ``ffn.gate.tid2eid`` [vocab, top_k] (i64) and carry no ``gate.bias``; routed experts w1/w3 [inter, h],
  w2 [h, inter] in FP4 (``expert_dtype``), the shared expert in fp8.
- fp8 weights are e4m3 with an E8M0 scale per [128, 128] block (``quantization_config``: fp8, ue8m0).
- the MTP block ``mtp.0`` is a layer of compress ratio 0 plus ``e_proj``/``h_proj``, three norms and its own
  ``hc_head_*``; kind ``mtp``, excluded from the totals (as for DeepSeek-V3).
- a DSpark checkpoint (DeepSeek-V4-Flash-0731: ``dspark_*`` keys, compress_ratios 46 long) holds DSpark stages in
  its place: one window-only V4 layer a ``dspark_target_layer_ids`` entry (``mtp.0``-``mtp.2``, the model's own
  256 experts), ``mtp.0.main_proj`` [h, h x targets] + ``main_norm``, and on the last stage ``norm``,
  ``hc_head_*``, ``markov_head.{embed,head}`` [vocab, markov_rank] and ``confidence_head.proj`` [1, h + rank]
  (SGLANG_DSPARK); kind ``mtp``. ``nextn_block`` gives the April-shaped MTP block an engine builds from the
  config's num_nextn_predict_layers instead (VLLM_V4_MTP).

Checked against the public checkpoints (tests/models/test_deepseek_v4.py): this inventory gives
``model.safetensors.index.json``'s ``metadata.total_size`` to the byte and its weight_map's tensor count
(Flash: 159,609,485,896 B in 69,187 tensors; Pro: 864,704,792,696 B in 145,116; Flash-0731: 166,878,536,440 B
in 72,317, tests/models/test_deepseek_v4_0731.py), and the headers' dtypes
and shapes (Pro's every tensor family; Flash's layer 0).

V4's layers are ``mla`` in ``ModelSpec.mixers`` (one latent head of 512 values shared by K and V is the
absorbed-MLA shape: ``MLADims`` with kv_lora 448 + rope 64); what differs -- which entries a layer keeps and
reads -- is in ``ModelSpec.dsv4`` and ``k3plan.step.dsv4_cache``.
"""

from __future__ import annotations

from typing import Any

from k3plan.errors import K3PlanError
from k3plan.models.builder import InventoryBuilder
from k3plan.models.config import ConfigReader
from k3plan.models.families.deepseek_v3 import deepseek_moe
from k3plan.models.inventory import TensorInventory
from k3plan.models.spec import DSparkDims, DSV4Dims, MLADims, ModelSpec

ARCHITECTURES = ("DeepseekV4ForCausalLM",)
MODEL_TYPES = ("deepseek_v4",)

CSA_RATIO = 4  # the ratio whose layers carry the indexer and overlapping (2x wide) compressor blocks


def _positive(c: ConfigReader, key: str) -> float:
    """An optional positive number of the config (0.0 where absent); anything else is a one-line error."""
    value = c.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise K3PlanError(f"{c.source}: field '{c.prefix}{key}' is {value!r}; expected a positive number")
    return float(value)


def rope_fields(c: ConfigReader) -> dict:
    """DSV4Dims' RoPE fields from config.json: the two thetas, YaRN's table length (rope_scaling, or
    rope_parameters, original_max_position_embeddings x factor; 0 without YaRN) and max_position_embeddings."""
    key = "rope_scaling" if c.has("rope_scaling") else "rope_parameters"
    scaling = c.sub(key, required=False)
    kind = scaling.get("type", None) or scaling.get("rope_type", None)
    yarn = 0
    if kind == "yarn":
        yarn = int(scaling.int("original_max_position_embeddings") * _positive(scaling, "factor"))
    return dict(
        rope_theta=_positive(c, "rope_theta"),
        compress_rope_theta=_positive(c, "compress_rope_theta"),
        yarn_positions=yarn,
        max_position=c.opt_int("max_position_embeddings") or 0,
    )


def parse(raw: dict, *, name: str, source: str) -> ModelSpec:
    c = ConfigReader(raw, source=source)
    n_layers = c.int("num_hidden_layers")
    n_mtp = c.int("num_nextn_predict_layers", 0, minimum=0)
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    head_dim = c.int("head_dim")
    rope = c.int("qk_rope_head_dim")
    if c.int("num_key_value_heads", 1) != 1:
        raise K3PlanError(f"{source}: num_key_value_heads {raw.get('num_key_value_heads')}; DeepSeek-V4 shares one")
    if rope >= head_dim:
        raise K3PlanError(f"{source}: qk_rope_head_dim {rope} must be below head_dim {head_dim}")
    ratios = c.int_list("compress_ratios")
    if len(ratios) < n_layers:
        raise K3PlanError(f"{source}: compress_ratios lists {len(ratios)} layers; num_hidden_layers is {n_layers}")
    dspark = _dspark(c, n_layers, n_mtp, source)
    if dspark is not None:
        # the DSpark stages replace the MTP block: one stage a target layer (SGLANG_DSPARK), whatever
        # num_nextn_predict_layers says (0731's config keeps the April 1)
        n_mtp = len(dspark.target_layer_ids)
    window = c.int("sliding_window")
    o_groups = c.int("o_groups")
    if (heads * head_dim) % o_groups:
        raise K3PlanError(f"{source}: o_groups {o_groups} does not divide heads x head_dim {heads * head_dim}")
    dsv4 = DSV4Dims(
        head_dim=head_dim,
        rope_dim=rope,
        sliding_window=window,
        compress_ratios=tuple(ratios[:n_layers]),
        mtp_compress_ratios=tuple(ratios[n_layers : n_layers + n_mtp]),
        index_n_heads=c.int("index_n_heads"),
        index_head_dim=c.int("index_head_dim"),
        index_topk=c.int("index_topk"),
        o_groups=o_groups,
        o_lora_rank=c.int("o_lora_rank"),
        hc_mult=c.int("hc_mult", 1),
        hc_sinkhorn_iters=c.int("hc_sinkhorn_iters", 0, minimum=0),
        num_hash_layers=c.int("num_hash_layers", 0, minimum=0),
        **rope_fields(c),
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
    return ModelSpec(
        name=name,
        family="deepseek_v4",
        architecture=str(c.get("model_type", "")),
        source=source,
        hidden_size=hidden,
        vocab_size=c.int("vocab_size"),
        num_layers=n_layers,
        mixers=tuple("mla" for _ in range(n_layers)),
        mlps=tuple("moe" for _ in range(n_layers)),
        dense_intermediate=moe.expert_intermediate * max(moe.num_shared, 1),  # no dense layers; the field is required
        mla=mla,
        dsv4=dsv4,
        moe=moe,
        mtp_layers=n_mtp,
        max_context=c.opt_int("max_position_embeddings"),
    )


# SGLang's DeepSeek-V4 DSpark draft, read in the 0.5.17 wheel (the release sgl-project/sglang#34822's 0731 run is
# pinned at): the draft's stages are DeepSeek-V4 decoder layers built over the target's own config, so they route
# over its n_routed_experts / num_experts_per_tok; one stage a target layer; stage 0 adds main_proj (targets x hidden
# -> hidden, quantized as the linears) and main_norm, the last stage norm and hc_head_*; one Markov head (embed and
# head, vocab x markov_rank) and a confidence head (hidden + markov_rank -> 1, no bias) for the draft
SGLANG_DSPARK = (
    "sglang 0.5.17 wheel (PyPI) sglang/srt/models/deepseek_v4_dspark.py DeepseekV4ForCausalLMDSpark (num_stages = "
    "len(dspark_target_layer_ids)), DSparkV4Stage(DeepseekV4DecoderLayer) (main_proj, main_norm on stage 0; norm, "
    "hc_head_* on the last), DSparkV4MarkovHead, the confidence head; speculative/dspark_components/dspark_config.py "
    "checkpoint_bundles_dspark_draft (any of dspark_block_size / _markov_rank / _noise_token_id / _target_layer_ids)"
)
DSPARK_KEYS = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids")


def _dspark(c: ConfigReader, n_layers: int, n_nextn: int, source: str) -> DSparkDims | None:
    """The checkpoint's bundled DSpark draft (DeepSeek-V4-Flash-0731), marked as SGLang marks it (any dspark_* key,
    SGLANG_DSPARK); None where the config carries none (the April release: its MTP block)."""
    if not any(c.has(k) for k in DSPARK_KEYS):
        return None
    targets = tuple(c.int_list("dspark_target_layer_ids"))
    if not targets or any(not 0 <= t < n_layers for t in targets):
        raise K3PlanError(
            f"{source}: field 'dspark_target_layer_ids' is {list(targets)}; expected layers of the "
            f"{n_layers}-layer model"
        )
    return DSparkDims(
        block_size=c.int("dspark_block_size"),
        target_layer_ids=targets,
        markov_rank=c.int("dspark_markov_rank"),
        n_routed_experts=c.int("n_routed_experts"),
        num_experts_per_tok=c.int("num_experts_per_tok"),
        nextn_layers=n_nextn,
    )


def _expert_fmt(raw: dict, source: str) -> str:
    """Routed experts: FP4 (``expert_dtype: fp4``, Flash's config). Pro's config.json has no expert_dtype, yet
    its safetensors headers hold I8-packed FP4 experts with E8M0 scales a 32 inputs (the same as Flash's):
    absent means fp4 here; any other value is refused rather than guessed."""
    value = raw.get("expert_dtype", "fp4")
    if value != "fp4":
        raise K3PlanError(f"{source}: expert_dtype {value!r}; only DeepSeek-V4's fp4 experts are modelled")
    return "ds_fp4"


def _linear_fmt(raw: dict, source: str) -> str:
    q = raw.get("quantization_config")
    if q is None:
        return "bf16"
    if not (
        isinstance(q, dict)
        and q.get("quant_method") == "fp8"
        and q.get("scale_fmt", "ue8m0") == "ue8m0"
        and q.get("weight_block_size", [128, 128]) == [128, 128]
    ):
        raise K3PlanError(
            f"{source}: quantization_config {q!r}; DeepSeek-V4's fp8 e4m3 with ue8m0 [128, 128] scales is modelled"
        )
    return "ds_fp8"


def _layer(
    b: InventoryBuilder, spec: ModelSpec, raw_hash: bool, prefix: str, i: int, ratio: int, lf: str, ef: str, mtp: bool
) -> None:
    h, d, mla, moe = spec.hidden_size, spec.dsv4, spec.mla, spec.moe
    assert d is not None and mla.q_lora_rank is not None
    E = [("embed", h)]
    Q = [("q_lora", mla.q_lora_rank)]
    D = [("head_dim", d.head_dim)]
    HD = [("heads", mla.heads), ("head_dim", d.head_dim)]
    role = (lambda r: "mtp") if mtp else (lambda r: r)
    kw: dict[str, Any] = dict(layer=i, kind="mtp" if mtp else "mla")
    A = f"{prefix}attn."
    b.vector(f"{prefix}attn_norm.weight", E, fmt="bf16", role=role("norm"), **kw)
    b.vector(f"{A}attn_sink", [("heads", mla.heads)], fmt="f32", role=role("attn"), **kw)
    b.linear(f"{A}wq_a", Q, E, fmt=lf, role=role("attn"), **kw)
    b.vector(f"{A}q_norm.weight", Q, fmt="bf16", role=role("attn"), **kw)
    b.linear(f"{A}wq_b", HD, Q, fmt=lf, role=role("attn"), **kw)
    b.linear(f"{A}wkv", D, E, fmt=lf, role=role("attn"), **kw)
    b.vector(f"{A}kv_norm.weight", D, fmt="bf16", role=role("attn"), **kw)
    b.linear(
        f"{A}wo_a",
        [("o_groups", d.o_groups), ("o_lora", d.o_lora_rank)],
        [("group_in", mla.heads * d.head_dim // d.o_groups)],
        fmt=lf,
        role=role("attn"),
        **kw,
    )
    b.linear(f"{A}wo_b", E, [("o_groups", d.o_groups), ("o_lora", d.o_lora_rank)], fmt=lf, role=role("attn"), **kw)
    if ratio:
        co = 2 if ratio == CSA_RATIO else 1
        C = f"{A}compressor."
        W = [("comp", co * d.head_dim)]
        b.add(f"{C}ape", [[("ratio", ratio)], W], fmt="f32", role=role("attn"), **kw)
        b.vector(f"{C}norm.weight", D, fmt="bf16", role=role("attn"), **kw)
        b.linear(f"{C}wgate.weight", W, E, fmt="bf16", role=role("attn"), **kw)
        b.linear(f"{C}wkv.weight", W, E, fmt="bf16", role=role("attn"), **kw)
    if ratio == CSA_RATIO:
        X = f"{A}indexer."
        IW = [("comp", 2 * d.index_head_dim)]
        b.add(f"{X}compressor.ape", [[("ratio", ratio)], IW], fmt="f32", role=role("attn"), **kw)
        b.vector(f"{X}compressor.norm.weight", [("index_dim", d.index_head_dim)], fmt="bf16", role=role("attn"), **kw)
        b.linear(f"{X}compressor.wgate.weight", IW, E, fmt="bf16", role=role("attn"), **kw)
        b.linear(f"{X}compressor.wkv.weight", IW, E, fmt="bf16", role=role("attn"), **kw)
        b.linear(f"{X}weights_proj.weight", [("index_heads", d.index_n_heads)], E, fmt="bf16", role=role("attn"), **kw)
        b.linear(
            f"{X}wq_b",
            [("index_heads", d.index_n_heads), ("index_dim", d.index_head_dim)],
            Q,
            fmt=lf,
            role=role("attn"),
            **kw,
        )
    kw = dict(layer=i, kind="mtp" if mtp else "moe")
    F = f"{prefix}ffn."
    b.vector(f"{prefix}ffn_norm.weight", E, fmt="bf16", role=role("norm"), **kw)
    X_ = [("expert", moe.num_experts)]
    b.linear(f"{F}gate.weight", X_, E, fmt="bf16", role=role("router"), **kw)
    if raw_hash:
        # a lookup table, one row a token (as the embedding): in the checkpoint's totals, not in the active ones
        b.linear(
            f"{F}gate.tid2eid",
            [("vocab", spec.vocab_size)],
            [("top_k", moe.top_k)],
            fmt="i64",
            role="router",
            active=0.0,
            **kw,
        )
    else:
        b.vector(f"{F}gate.bias", X_, fmt="f32", role=role("router"), **kw)
    I_ = [("mlp", moe.expert_intermediate)]
    for p, dims in (("w1", (I_, E)), ("w2", (E, I_)), ("w3", (I_, E))):
        b.linear(
            F + "experts.{e}." + p,
            *dims,
            fmt=ef,
            role=role("expert"),
            active=moe.top_k / moe.num_experts,
            lead=("expert", moe.num_experts),
            **kw,
        )
    if moe.num_shared:
        S = [("mlp", moe.shared_intermediate)]
        for p, dims in (("w1", (S, E)), ("w2", (E, S)), ("w3", (S, E))):
            b.linear(f"{F}shared_experts.{p}", *dims, fmt=lf, role=role("shared_expert"), **kw)
    _hc(b, prefix, "attn", spec, role("norm"), layer=i, kind=kw["kind"])
    _hc(b, prefix, "ffn", spec, role("norm"), layer=i, kind=kw["kind"])


def _hc(b: InventoryBuilder, prefix: str, what: str, spec: ModelSpec, role: str, **kw: Any) -> None:
    """mHC's mixing for one sub-block: m^2 + 2m coefficients (pre m, post m, residual m x m) read off the
    m x h flattened streams; ``what`` 'head' is the final collapse (m coefficients, one scale)."""
    assert spec.dsv4 is not None
    m, h = spec.dsv4.hc_mult, spec.hidden_size
    n = m if what == "head" else m * m + 2 * m
    name = f"{prefix}hc_{what}_"
    b.vector(f"{name}base", [("hc", n)], fmt="f32", role=role, **kw)
    b.linear(f"{name}fn", [("hc", n)], [("hc_streams", m), ("embed", h)], fmt="f32", role=role, **kw)
    b.vector(f"{name}scale", [("hc_scale", 1 if what == "head" else 3)], fmt="f32", role=role, **kw)


def _nextn_extras(b: InventoryBuilder, spec: ModelSpec, P: str, i: int, lf: str) -> None:
    """An MTP block's own tensors beside its decoder layer: e_proj / h_proj (the linears' format), enorm, hnorm,
    norm and hc_head_*."""
    E = [("embed", spec.hidden_size)]
    M: dict[str, Any] = dict(layer=i, kind="mtp", role="mtp")
    b.linear(f"{P}e_proj", E, E, fmt=lf, **M)
    b.linear(f"{P}h_proj", E, E, fmt=lf, **M)
    for n in ("enorm", "hnorm", "norm"):
        b.vector(f"{P}{n}.weight", E, fmt="bf16", **M)
    _hc(b, P, "head", spec, "mtp", layer=i, kind="mtp")


# vLLM's DeepSeek-V4 MTP drafter, read in the 0.26.0 wheel: DeepSeekV4MultiTokenPredictor builds
# num_nextn_predict_layers DeepSeekV4MultiTokenPredictorLayer (enorm, hnorm, e_proj / h_proj ReplicatedLinear with the
# model's quant_config, hc_head_*, a DeepseekV4DecoderLayer), whatever the checkpoint's mtp.* hold
VLLM_V4_MTP = (
    "vllm 0.26.0 wheel (PyPI) vllm/models/deepseek_v4/nvidia/mtp.py DeepSeekV4MultiTokenPredictor (num_mtp_layers = "
    "config.num_nextn_predict_layers) and DeepSeekV4MultiTokenPredictorLayer; vllm/config/speculative.py "
    "hf_config_override (deepseek_v4 -> DeepSeekV4MTPModel, n_predict = num_nextn_predict_layers)"
)


def nextn_block(spec: ModelSpec, inv: TensorInventory) -> tuple[Any, ...]:
    """The MTP layers an engine builds from num_nextn_predict_layers (VLLM_V4_MTP) on a checkpoint whose mtp.* are
    DSpark stages (DeepSeek-V4-Flash-0731): the April release's block shape over this model's dimensions, the
    linears and experts in the formats the checkpoint's layers have."""
    d = spec.dsv4
    assert d is not None and d.dspark is not None
    lf = next(t.fmt for t in inv.tensors if t.name == "layers.0.attn.wq_a")
    ef = next(t.fmt for t in inv.tensors if t.name.startswith("layers.0.ffn.experts.") and t.name.endswith(".w1"))
    b = InventoryBuilder()
    for j in range(d.dspark.nextn_layers):
        i = spec.num_layers + j
        ratio = d.mtp_compress_ratios[j] if j < len(d.mtp_compress_ratios) else 0
        _layer(b, spec, False, f"mtp.{j}.", i, ratio, lf, ef, mtp=True)
        _nextn_extras(b, spec, f"mtp.{j}.", i, lf)
    return b.inventory().tensors


def inventory(spec: ModelSpec, raw: dict) -> tuple[TensorInventory, tuple[str, ...]]:
    d = spec.dsv4
    assert d is not None
    lf, ef = _linear_fmt(raw, spec.source), _expert_fmt(raw, spec.source)
    E = [("embed", spec.hidden_size)]
    b = InventoryBuilder()
    b.linear("embed.weight", [("vocab", spec.vocab_size)], E, fmt="bf16", kind="global", role="embed", active=0.0)
    b.vector("norm.weight", E, fmt="bf16", kind="global", role="norm")
    b.linear("head.weight", [("vocab", spec.vocab_size)], E, fmt="bf16", kind="global", role="lm_head")
    _hc(b, "", "head", spec, "norm", kind="global")
    for i in range(spec.num_layers):
        _layer(b, spec, i < d.num_hash_layers, f"layers.{i}.", i, d.compress_ratios[i], lf, ef, mtp=False)
    ds = d.dspark
    for j in range(spec.mtp_layers):
        i = spec.num_layers + j
        ratio = d.mtp_compress_ratios[j] if j < len(d.mtp_compress_ratios) else 0
        P = f"mtp.{j}."
        M = dict(layer=i, kind="mtp", role="mtp")
        # the MTP block is never hash-routed (its gate has a bias and no tid2eid in both checkpoints)
        _layer(b, spec, False, P, i, ratio, lf, ef, mtp=True)
        if ds is None:
            _nextn_extras(b, spec, P, i, lf)
            continue
        # a DSpark stage (SGLANG_DSPARK)
        if j == 0:
            b.linear(
                f"{P}main_proj",
                E,
                [("targets", len(ds.target_layer_ids)), ("embed", spec.hidden_size)],
                fmt=lf,
                **M,
            )
            b.vector(f"{P}main_norm.weight", E, fmt="bf16", **M)
        if j == spec.mtp_layers - 1:
            b.vector(f"{P}norm.weight", E, fmt="bf16", **M)
            _hc(b, P, "head", spec, "mtp", layer=i, kind="mtp")
            R = [("markov_rank", ds.markov_rank)]
            b.linear(f"{P}markov_head.embed.weight", [("vocab", spec.vocab_size)], R, fmt="bf16", **M)
            b.linear(f"{P}markov_head.head.weight", [("vocab", spec.vocab_size)], R, fmt="bf16", **M)
            b.linear(
                f"{P}confidence_head.proj.weight",
                [("one", 1)],
                [("embed_rank", spec.hidden_size + ds.markov_rank)],
                fmt="bf16",
                **M,
            )
    notes = [
        f"compressed attention: {d.n_csa} CSA (ratio 4, top-{d.index_topk} indexer), {d.n_hca} HCA, "
        f"{d.n_swa} window-only layer(s); every layer a {d.sliding_window}-token window",
        f"first {d.num_hash_layers} layer(s) hash-routed (tid2eid); mHC with {d.hc_mult} residual streams",
    ]
    if "expert_dtype" not in raw:
        notes.append("config.json has no expert_dtype: experts taken as fp4 (the checkpoint's headers hold them so)")
    if ds is not None:
        notes.append(
            f"DSpark drafter: {spec.mtp_layers} stages over layers {list(ds.target_layer_ids)}, "
            f"{ds.n_routed_experts} experts top-{ds.num_experts_per_tok}, {ds.block_size} draft positions; listed "
            "separately (kind mtp) and excluded from the totals"
        )
    elif spec.mtp_layers:
        notes.append(f"{spec.mtp_layers} MTP layer(s) listed separately and excluded from the totals")
    return b.inventory(), tuple(notes)
