"""vLLM's speculative decoding as ``vllm serve`` takes it (issue 47 item 1): ``--speculative-config`` JSON (and the
older ``--num-speculative-tokens`` / ``--speculative-model`` flags) read into the method and its token count, and what
the engine holds for it, priced from the checkpoint's own MTP tensors.

What the engine holds (each rule cited where it is applied):

- ``method`` ``mtp`` (and the model-type names vLLM maps to it: ``deepseek_mtp``, ...): the checkpoint's MTP layers
  built as the target's decoder layer (vllm/models/deepseek_v4/hw_agnostic/mtp.py DeepSeekV4MultiTokenPredictorLayer:
  ``mtp_block = DeepseekV4DecoderLayer(...)``, ``e_proj`` / ``h_proj`` ReplicatedLinear; V3's deepseek_mtp likewise),
  so its experts spread over the same expert group as the target's, its attention over TP, its projections, norms
  and hyper-connection parameters whole on every rank (MTP_SOURCE); its attention layer registers its own KV cache
  (one more layer in the pool: for DeepSeek-V4 a layer of the MTP layer's compress ratio, ``mtp_compress_ratios``;
  for an MLA model one more MLA layer);
- ``dspark`` (DeepSeek-V4.1's own drafter, its ``mtp.*`` DSpark stages in the target checkpoint; DSPARK_SOURCE):
  ``num_nextn_predict_layers`` DeepseekV4DecoderLayers (attention over TP, experts over the expert group, as MTP's),
  ``main_proj`` (ReplicatedLinear over the target layers' hidden states), ``main_norm``, ``norm``, the hyper-connection
  head and ``confidence_head`` (ReplicatedLinear) whole, the Markov head's two vocab tables (VocabParallelEmbedding,
  ParallelLMHead) over TP; the embedding and LM head are the target's (aliased); a ``topk_indices_buffer``
  [max_num_batched_tokens, index_topk] int32 allocated at init; each draft layer's sliding-window cache is a layer
  of its own in the pool (``get_draft_kv_cache_layer_names``), the checkpoint's ``mtp_compress_ratios`` (0: window
  only). A separate DSpark checkpoint (a ``model`` other than the target's, Kimi-K3's Inferact/Kimi-K3-DSpark) is
  not priced; ``num_speculative_tokens`` is required (vLLM's default for dspark was not read);
- ``ngram``: the n-gram proposer matches on the host (vllm/config/speculative.py: draft_model_config = the target's,
  no draft weights), nothing on the device;
- the profile run: the drafter's dummy run follows the target's forward at the same token count
  (vllm/v1/worker/gpu_model_runner.py GPUModelRunner._dummy_run: ``self.drafter.dummy_run(num_tokens)`` after
  ``self.model(...)``), so the peak is the larger of the two one-layer peaks, not their sum: no extra temporary;
- every other method (eagle, eagle3, draft_model, medusa, mlp_speculator, dflash, suffix, ngram_gpu,
  custom_class, extract_hidden_states) loads a draft checkpoint or device buffers k3plan does not price: refused by
  name.
"""

from __future__ import annotations

import json

from k3plan.engines.serve_values import same_checkpoint, whole_number
from k3plan.errors import K3PlanError
from k3plan.models.families.deepseek_v4 import VLLM_V4_MTP, nextn_block
from k3plan.structs import Frozen
from k3plan.units import GiB

SPEC_SOURCE = (
    "vllm-project/vllm vllm/config/speculative.py @002e77c1 SpeculativeConfig.__post_init__ (a method in "
    "MTPModelTypes is replaced with mtp; num_speculative_tokens defaults to the draft config's n_predict, the "
    "checkpoint's num_nextn_predict_layers)"
)
MTP_SOURCE = (
    "vllm-project/vllm vllm/models/deepseek_v4/hw_agnostic/mtp.py DeepSeekV4MultiTokenPredictorLayer (stored copy, "
    "commit not pinned): the target's DeepseekV4DecoderLayer (attention over TP, FusedMoE experts over the expert "
    "group), e_proj / h_proj ReplicatedLinear, hc_head_* and norms whole"
)
PROFILE_SOURCE = (
    "vllm-project/vllm vllm/v1/worker/gpu_model_runner.py GPUModelRunner._dummy_run: drafter.dummy_run(num_tokens) "
    "after the target's forward, the same tokens (stored copies, commit not pinned): the profiled peak is the larger "
    "one-layer peak, no extra temporary"
)
DSPARK_SOURCE = (
    "vllm-project/vllm vllm/models/deepseek_v4/nvidia/dspark.py @03435722 DSparkDeepseekV4Model (layers "
    "DeepseekV4DecoderLayer at layers.{num_hidden_layers + i}, main_proj ReplicatedLinear, topk_indices_buffer "
    "[max_num_batched_tokens, index_topk] int32, DSparkMarkovHead VocabParallelEmbedding + ParallelLMHead, "
    "DSparkConfidenceHead ReplicatedLinear) and DSparkDeepseekV4ForCausalLM (embed and LM head aliased from the "
    "target; get_draft_kv_cache_layer_names: each draft layer's sliding-window cache a layer); vllm/config/"
    "speculative.py @b12eeaa2 (yhfgyyf/vllm-deepseek-v4-sm89's history): the draft config is the target's "
    "(model_type deepseek_v4, architectures DSparkDraftModel), its weights in the target checkpoint"
)
# vLLM's MTPModelTypes (vllm/config/speculative.py @002e77c1): every name is replaced with "mtp"
MTP_NAMES = frozenset(
    {
        "mtp",
        "deepseek_mtp",
        "mimo_mtp",
        "glm4_moe_mtp",
        "ernie_mtp",
        "qwen3_next_mtp",
        "longcat_flash_mtp",
        "pangu_ultra_moe_mtp",
        "kimi_k3_mtp",
    }
)
NGRAM_NAMES = frozenset({"ngram", "[ngram]"})
# methods vLLM takes that load a draft model or keep device buffers k3plan does not price
UNPRICED = frozenset(
    {
        "eagle",
        "eagle3",
        "draft_model",
        "medusa",
        "mlp_speculator",
        "dflash",
        "suffix",
        "ngram_gpu",
        "custom_class",
        "extract_hidden_states",
    }
)
# --speculative-config keys with no memory effect k3plan prices (sampling, acceptance, the proposer's host-side knobs)
HARMLESS_KEYS = frozenset(
    {
        "method",
        "num_speculative_tokens",
        "model",
        "rejection_sample_method",
        "draft_sample_method",
        "prompt_lookup_min",
        "prompt_lookup_max",
        "enforce_eager",
        "disable_padded_drafter_batch",
        "use_local_argmax_reduction",
        "disable_by_batch_size",
        "attention_backend",  # the drafter's attention kernel (SpeculativeConfig.attention_backend)
        # DSpark's acceptance and verification policy: which drafted tokens are kept, not what is held (the
        # InferenceX V4.1 nightly's and NVIDIA Dynamo's V4.1 recipe's keys)
        "synthetic_acceptance_length",
        "enable_adaptive_verification",
        # FLy loose acceptance (rejection_sample_method "fly") and how the prefix cache hashes the blocks an EAGLE-like
        # drafter reads ahead: which drafted tokens are kept and how cached blocks are named, not what is held (vllm
        # 0.33.0 wheel (PyPI), vllm/config/speculative.py SpeculativeConfig.fly_window_size / fly_entropy_threshold /
        # fly_entropy_top_k / disable_lookahead_block_hashes)
        "fly_window_size",
        "fly_entropy_threshold",
        "fly_entropy_top_k",
        "disable_lookahead_block_hashes",
        # the draft's maximum length: SpeculativeConfig._maybe_override_draft_max_model_len writes it into
        # draft_model_config.max_model_len ('used when testing the ability to skip speculation for some sequences'),
        # which no other module reads: the drafter is built with the target's VllmConfig (get_model(vllm_config=...,
        # model_config=draft_model_config) for its dtype and weights only, model_loader/utils.py initialize_model),
        # so its layers' KV specs take the target's max_model_len (vllm 0.20.0 and 0.26.0 wheels (PyPI),
        # vllm/config/speculative.py, v1/spec_decode/llm_base_proposer.py _get_model; the 0.34.0 wheel's
        # v1/worker/gpu/spec_decode/speculator_config.py sets it and nothing reads it)
        "max_model_len",
    }
)
# the drafter's KV cache dtype (vllm 0.31.0 wheel (PyPI), vllm/config/speculative.py SpeculativeConfig.kv_cache_dtype:
# 'When None, the draft inherits the target model's --kv-cache-dtype'; _DRAFT_VLLM_CONFIG_OVERRIDES writes a value
# into the draft's CacheConfig.cache_dtype, the same in the 0.32.0-0.34.0 wheels): read where it names the target's
# own dtype (no change), refused where it names another (the drafter's layers at another dtype are not priced)
KV_KEY = "kv_cache_dtype"
KV_SOURCE = "vllm/config/speculative.py SpeculativeConfig.kv_cache_dtype (vllm 0.31.0-0.34.0 wheels)"
# vLLM's spellings of one KV dtype (CacheDType): bf16 is bfloat16's, fp8 e4m3's
_KV_ALIASES = {"bf16": "bfloat16", "fp8_e4m3": "fp8"}
# A key spelled with dashes (``--speculative-config.num-speculative-tokens=7``: the dotted flag keeps the nested key as
# written, vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args) is read as its underscore spelling from
# 0.26.0: EngineArgs.create_speculative_config rewrites ``{k.replace("-", "_"): v for k, v in
# self.speculative_config.items()}`` before SpeculativeConfig(**...) (vllm 0.26.0-0.31.0, 0.33.0 and 0.34.0 wheels
# (PyPI), vllm/engine/arg_utils.py); the 0.11.1-0.25.0 wheels pass the keys as given, so a dashed key stays unknown
DASHED_KEYS_FROM = (0, 26, 0)
DASHED_KEYS_SOURCE = "vllm 0.26.0-0.34.0 wheels (PyPI), vllm/engine/arg_utils.py EngineArgs.create_speculative_config"


def _same_kv(draft: str, target: str, *, ds_mla: bool = False) -> bool:
    """Whether the drafter's kv_cache_dtype is the target's --kv-cache-dtype (its spelling or an alias): "auto" is
    the target's only where the target's is "auto" too (vLLM resolves a draft's "auto" from the model's dtype, not
    from the target's --kv-cache-dtype). ``ds_mla``: a DeepSeek-V4 target, whose fp8_ds_mla layout takes "auto" and
    every fp8 spelling as fp8_ds_mla (vllm/models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype, the 0.31.0
    wheel), so they are one dtype there (nvfp4_ds_mla stays its own)."""

    def norm(text: str) -> str:
        v = _KV_ALIASES.get(text.strip().lower(), text.strip().lower())
        return "fp8_ds_mla" if ds_mla and (v == "auto" or v.startswith("fp8")) else v

    return norm(draft) == norm(target)


class SpecServe(Frozen):
    """A serve command's speculative decoding as vLLM reads it."""

    method: str  # "mtp", "dspark" or "ngram" (the names vLLM normalizes to)
    num_speculative_tokens: int | None  # None: the engine's default (mtp: the checkpoint's n_predict)
    given: str  # the flags as written, for the source line


class DraftPricing(Frozen):
    """What the engine holds for the drafter a device: its weights, and the attention layers it adds to the pool."""

    bytes_per_device: int
    source: str
    extra_mla_layers: int = 0  # an MLA model's MTP layers: one more MLA layer each in the pool
    dsv4_mtp_ratios: tuple[int, ...] = ()  # DeepSeek-V4: the MTP layers' compress ratios (their KV caches)
    num_speculative_tokens: int = 0
    # the drafter's routed experts a device (in bytes_per_device), which a TP split pads as the target's
    # (engines/vllm/moe_padding.py MOE_SHARD_RULES)
    expert_bytes_per_device: int = 0
    # a drafter that reads the target's hidden states (vLLM SpeculativeConfig.use_eagle(): eagle, eagle3, mtp,
    # dflash, dspark; vllm/config/speculative.py @002e77c1): one token's pre-hc_head hidden state of a DeepSeek-V4
    # target, hc_mult x hidden in the model dtype, the row of the buffer the target keeps for it
    # (engines/vllm/dsv4_workspace.py dsv41_model_buffers); 0: none kept
    target_hidden_row_bytes: int = 0


def read_speculative(
    get, model_text: str, *, kv_cache_dtype: str = "auto", ds_mla: bool = False, release: tuple[int, ...] | None = None
) -> SpecServe | None:
    """``--speculative-config`` (JSON), ``--num-speculative-tokens`` and ``--speculative-model`` (vLLM < 0.10's
    flags) -> the method and token count; a method or key k3plan cannot price is refused by name (one line).
    ``kv_cache_dtype``: the command's --kv-cache-dtype, which the drafter's own ``kv_cache_dtype`` is read against;
    ``ds_mla``: the target is DeepSeek-V4's (its fp8_ds_mla layout, ``_same_kv``); ``release``: the vLLM release
    (None: the newest), whose dashed keys read as underscores from DASHED_KEYS_FROM."""
    raw = get("--speculative-config", None)
    old_n = get("--num-speculative-tokens", None)
    old_model = get("--speculative-model", None)
    if raw is None and old_n is None and old_model is None:
        return None
    if raw is not None:
        if old_n is not None or old_model is not None:
            raise K3PlanError(
                "--serve: --speculative-config with --num-speculative-tokens / --speculative-model: vLLM takes one "
                "form; expected --speculative-config alone"
            )
        try:
            cfg = json.loads(raw)
        except ValueError:
            raise K3PlanError(
                f"--serve: --speculative-config {raw!r}: expected a JSON object such as "
                '\'{"method": "mtp", "num_speculative_tokens": 1}\''
            ) from None
        if not isinstance(cfg, dict):
            raise K3PlanError(f"--serve: --speculative-config {raw!r}: expected a JSON object")
        if release is None or release >= DASHED_KEYS_FROM:  # DASHED_KEYS_SOURCE
            cfg = {k.replace("-", "_"): v for k, v in cfg.items()}
        given = f"--speculative-config {raw}"
    else:
        cfg = {"model": old_model} if old_model is not None else {}
        if old_n is not None:
            cfg["num_speculative_tokens"] = old_n
        given = " ".join(
            f
            for f in (old_model and f"--speculative-model {old_model}", old_n and f"--num-speculative-tokens {old_n}")
            if f
        )
    draft_kv = cfg.get(KV_KEY)
    if draft_kv is not None and not (isinstance(draft_kv, str) and _same_kv(draft_kv, kv_cache_dtype, ds_mla=ds_mla)):
        raise K3PlanError(
            f"--serve: --speculative-config {KV_KEY} {draft_kv!r}: the drafter's KV cache at a dtype other than the "
            f"target's --kv-cache-dtype {kv_cache_dtype} ({KV_SOURCE}) is not priced by k3plan; leave it out (the "
            "drafter then inherits the target's) or give the target's"
        )
    unknown = sorted(set(cfg) - HARMLESS_KEYS - {KV_KEY})
    if unknown:
        raise K3PlanError(
            f"--serve: --speculative-config key {unknown[0]!r} is not one k3plan reads (it may change the draft's "
            f"memory); k3plan reads {', '.join(sorted(HARMLESS_KEYS))}"
        )
    n = cfg.get("num_speculative_tokens")
    n = None if n is None else whole_number("num_speculative_tokens", n)
    method = cfg.get("method")
    model = cfg.get("model")
    if method is None:  # SpeculativeConfig.__post_init__: inferred from model
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = str(method)
    if method in MTP_NAMES:
        if model is not None and not same_checkpoint(str(model), model_text):
            raise K3PlanError(
                f"--serve: --speculative-config method {method} with model {model!r}: a separate MTP checkpoint is not "
                "priced; k3plan prices the target checkpoint's own MTP layers (leave model out)"
            )
        return SpecServe(method="mtp", num_speculative_tokens=n, given=given)
    if method == "dspark":
        if model is not None and not same_checkpoint(str(model), model_text):
            raise K3PlanError(
                f"--serve: --speculative-config method dspark with model {model!r}: a separate DSpark checkpoint is "
                "not priced; k3plan prices the DSpark stages a target checkpoint ships (leave model out)"
            )
        if n is None:
            raise K3PlanError(
                "--serve: --speculative-config method dspark without num_speculative_tokens: the engine's count for "
                "it was not read; add num_speculative_tokens"
            )
        return SpecServe(method="dspark", num_speculative_tokens=n, given=given)
    if method in NGRAM_NAMES:
        if n is None:
            raise K3PlanError(
                "--serve: --speculative-config method ngram without num_speculative_tokens: the engine's count for "
                "it was not read; add num_speculative_tokens"
            )
        return SpecServe(method="ngram", num_speculative_tokens=n, given=given)
    if method in UNPRICED or method not in MTP_NAMES | NGRAM_NAMES:
        raise K3PlanError(
            f"--serve: speculative method {method!r}: its draft's weights and KV are not priced by k3plan (a draft "
            "checkpoint or device buffers it does not read); k3plan prices method mtp (the checkpoint's own MTP "
            "layers), dspark (a checkpoint's own DSpark stages) and ngram"
        )
    return None  # unreachable: every method is one of the above


def draft_pricing(spec: SpecServe, model, *, tp: int, ep: int, max_num_batched_tokens: int = 0) -> DraftPricing:
    """The drafter's weights a device and the KV layers it adds, as vLLM builds it (module docstring). ``model``:
    the loaded k3plan Model; ``ep``: the ranks the target's experts spread over; ``max_num_batched_tokens``: the
    scheduler's (DSpark's index buffer)."""
    if spec.method == "ngram" and model.spec.n_kda:
        raise K3PlanError(
            f"--serve: --speculative-config method ngram on {model.spec.name}: with speculative decoding vLLM's KDA "
            "state groups hold 1 + num_speculative_tokens blocks a request (MambaSpec.num_speculative_blocks), not "
            "in k3plan's engine sizing; not priced"
        )
    if spec.method == "ngram":
        return DraftPricing(
            bytes_per_device=0,
            source=f"{spec.given}: the n-gram proposer holds no draft weights ({SPEC_SOURCE})",
            num_speculative_tokens=spec.num_speculative_tokens or 0,
        )
    inv, s = model.inventory, model.spec
    mtp = inv.of_kind("mtp")
    if spec.method == "dspark":
        return _dspark_pricing(spec, model, tp=tp, ep=ep, max_num_batched_tokens=max_num_batched_tokens)
    if not mtp or not s.mtp_layers:
        raise K3PlanError(
            f"--serve: --speculative-config method mtp: {s.name} ships no MTP layers (num_nextn_predict_layers "
            f"{s.mtp_layers}, no mtp tensors in its checkpoint index); vLLM has no draft to build"
        )
    nextn = s.mtp_layers
    if s.dsv4 is not None and s.dsv4.dspark is not None and s.dsv4.csa2 is None:
        # DeepSeek-V4's DSpark checkpoint (0731): vLLM builds num_nextn_predict_layers MTP layers of V4's own shape
        # from the config whatever its mtp.* hold (VLLM_V4_MTP; vllm-project/vllm#51041 served 0731 so on 0.26.0)
        mtp, nextn = nextn_block(s, inv), s.dsv4.dspark.nextn_layers
    elif s.dsv4 is not None and s.dsv4.dspark is not None:
        raise K3PlanError(
            f"--serve: --speculative-config method mtp: {s.name}'s MTP tensors are DSpark stages; vLLM refuses mtp "
            'for them (vllm 0.31.0 wheel, vllm/config/speculative.py SpeculativeConfig.__post_init__: "Use '
            "speculative method 'dspark' instead of 'mtp'.\"); expected method dspark"
        )
    how = "from its checkpoint index" if nextn == s.mtp_layers else f"as vLLM builds them ({VLLM_V4_MTP})"
    n = spec.num_speculative_tokens or nextn  # SPEC_SOURCE: the default is n_predict
    whole, split_tp, split_ep = _draft_split(mtp, _MTP_WHOLE, _MTP_WHOLE_SEGMENTS)
    per_device = whole + -(-split_tp // tp) + -(-split_ep // ep)
    gib = GiB
    source = (
        f"{spec.given}: {s.name}'s {nextn} MTP layer(s) {how} ({len(mtp)} tensors), "
        f"{n} speculative token(s) a step: experts {split_ep / gib:.2f} GiB over {ep} rank(s), attention, shared "
        f"experts and head {split_tp / gib:.2f} GiB over TP {tp}, projections, norms and hyper-connection "
        f"parameters {whole / gib:.3f} GiB whole ({MTP_SOURCE}; {SPEC_SOURCE})"
    )
    if s.dsv4 is not None:
        return DraftPricing(
            bytes_per_device=per_device,
            source=source,
            dsv4_mtp_ratios=tuple(s.dsv4.mtp_compress_ratios[:nextn]),
            num_speculative_tokens=n,
            expert_bytes_per_device=-(-split_ep // ep),
            target_hidden_row_bytes=_hidden_row(s),
        )
    mla = len({t.layer for t in mtp if "kv_a_proj_with_mqa" in t.name})
    if mla != s.mtp_layers:
        raise K3PlanError(
            f"--serve: --speculative-config method mtp: {s.name}'s MTP layers are not MLA layers k3plan lays out "
            "in vLLM's pool; not priced"
        )
    return DraftPricing(bytes_per_device=per_device, source=source, extra_mla_layers=mla, num_speculative_tokens=n)


# what a drafter's layers hold whole on every rank (MTP_SOURCE: e_proj / h_proj ReplicatedLinear, V3's eh_proj an
# nn.Linear, norms, hyper-connection parameters, the router); the rest of a layer is split over TP, its routed experts
# over the EP group. The projections match a whole name segment: as a substring "e_proj" also matched the shared
# expert's gate_proj (V3's 14 MB MTP shared gate_proj counted whole, not over TP)
_MTP_WHOLE = ("norm", ".hc_", ".gate.")
_MTP_WHOLE_SEGMENTS = frozenset({"e_proj", "h_proj", "eh_proj"})


def _draft_split(
    tensors, whole_keys: tuple[str, ...], whole_segments: frozenset[str] = frozenset()
) -> tuple[int, int, int]:
    """(bytes whole on every rank, bytes over TP, routed-expert bytes over the EP group) of a drafter's tensors:
    whole where a name holds one of ``whole_keys`` or has a segment in ``whole_segments``."""
    whole = split_tp = split_ep = 0
    for t in tensors:
        if ".experts." in t.name and "shared_experts" not in t.name:
            split_ep += t.nbytes
        elif any(k in t.name for k in whole_keys) or whole_segments.intersection(t.name.split(".")):
            whole += t.nbytes
        else:
            split_tp += t.nbytes
    return whole, split_tp, split_ep


# DSpark's head stack (DSPARK_SOURCE): held whole on every rank (ReplicatedLinear, RMSNorm, hyper-connection
# parameters, the router); the Markov head's vocab tables are over TP (VocabParallelEmbedding, ParallelLMHead)
_DSPARK_WHOLE = ("main_proj", "main_norm", "confidence_head", "norm", ".hc_", "hc_head", ".gate.")
_INT32 = 4
_BF16 = 2


def _dspark_pricing(spec: SpecServe, model, *, tp: int, ep: int, max_num_batched_tokens: int) -> DraftPricing:
    """DeepSeek-V4.1's DSpark drafter as vLLM builds it (DSPARK_SOURCE)."""
    s = model.spec
    dims = s.dsv4.dspark if s.dsv4 is not None else None
    mtp = model.inventory.of_kind("mtp")
    if dims is None or not mtp or not s.mtp_layers:
        raise K3PlanError(
            f"--serve: --speculative-config method dspark: {s.name} ships no DSpark stages (no dspark_* keys in its "
            "config, no mtp.* DSpark tensors in its checkpoint index); vLLM has no draft to build"
        )
    whole, split_tp, split_ep = _draft_split(mtp, _DSPARK_WHOLE)
    index = max_num_batched_tokens * s.dsv4.index_topk * _INT32  # topk_indices_buffer, at init
    per_device = whole + -(-split_tp // tp) + -(-split_ep // ep) + index
    gib = GiB
    ratios = tuple(s.dsv4.mtp_compress_ratios[: s.mtp_layers])
    source = (
        f"{spec.given}: {s.name}'s {s.mtp_layers} DSpark stages from its checkpoint index ({len(mtp)} tensors, "
        f"{dims.n_routed_experts} experts top-{dims.num_experts_per_tok}), {spec.num_speculative_tokens} speculative "
        f"token(s) a step: experts {split_ep / gib:.2f} GiB over {ep} rank(s), attention, shared experts and the "
        f"Markov head {split_tp / gib:.2f} GiB over TP {tp}, main_proj, norms, hyper-connection and confidence heads "
        f"{whole / gib:.3f} GiB whole, topk_indices_buffer {max_num_batched_tokens:,} x {s.dsv4.index_topk} int32 "
        f"{index / gib:.3f} GiB; its layers' caches: compress ratios {list(ratios)} (0: a sliding window only) "
        f"({DSPARK_SOURCE}; {SPEC_SOURCE})"
    )
    return DraftPricing(
        bytes_per_device=per_device,
        source=source,
        dsv4_mtp_ratios=ratios,
        num_speculative_tokens=spec.num_speculative_tokens or 0,
        expert_bytes_per_device=-(-split_ep // ep),
        target_hidden_row_bytes=_hidden_row(s),
    )


def _hidden_row(s) -> int:
    """One token's mHC hidden state of a DeepSeek-V4 target (hc_mult x hidden, bf16: the model dtype of the V4
    checkpoints' configs): what DraftPricing.target_hidden_row_bytes holds for mtp and dspark, both use_eagle()."""
    return s.dsv4.hc_mult * s.hidden_size * _BF16
