"""SGLang's speculative decoding as ``sglang.launch_server`` takes it at start, read in the sglang 0.5.15 wheel (PyPI):
its flags, the values it picks for those left out, and what the draft holds on the device before the KV pool is sized.

What the engine does (each rule's code named where it is applied, all of the 0.5.15 wheel):

- the flags: ``--speculative-algorithm`` (argparse's prefix ``--speculative-algo`` is the same flag: the parser is
  built with allow_abbrev left on, server_args.py prepare_server_args), upper-cased, NEXTN and EAGLE resolved to EAGLE
  (arg_groups/speculative_hook.py handle_speculative_decoding, _resolve_speculative_algorithm_alias); a name that is
  not one of SpeculativeAlgorithm's (DFLASH, EAGLE, EAGLE3, FROZEN_KV_MTP, STANDALONE, NGRAM) nor a plugin's is a
  ValueError (speculative/spec_info.py SpeculativeAlgorithm.from_string: 'Unknown speculative algorithm name');
- EAGLE (_handle_eagle_family): max_running_requests 48 where the command sets none; for DeepseekV3ForCausalLM,
  DeepseekV32ForCausalLM and DeepseekV4ForCausalLM (among others) the draft checkpoint is the target's own
  (speculative_draft_model_path = model_path); with --speculative-num-steps left out, --speculative-eagle-topk and
  --speculative-num-draft-tokens must be left out too (an assert) and (steps, topk, draft tokens) = (3, 1, 4) for
  every architecture k3plan bundles (_auto_choose_speculative_params); with topk 1 the draft tokens are steps + 1
  (given or not);
- DeepSeek-V4 (arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults, run from _handle_model_specific_adjustments
  before the speculative hook, so on the flags as written): max_running_requests 256 where unset (before the
  speculative default), and it asserts speculative_algorithm == "EAGLE" and speculative_eagle_topk == 1 as given;
- pipeline parallelism with speculative decoding is refused (server_args.py check_server_args: 'Pipeline parallelism
  is not compatible with overlap schedule, speculative decoding');
- the draft worker loads after the target and before the target's KV pool is sized (managers/scheduler.py
  Scheduler.init_model_worker: init_tp_model_worker, maybe_init_draft_worker, then init_memory_pools), so the
  target's profile of free memory holds the draft's weights (model_runner_kv_cache_mixin.py _profile_available_bytes:
  'Loaded weights (target + draft) can exceed the static budget');
- the draft model (models/deepseek_nextn.py DeepseekV3ForCausalLMNextN, models/deepseek_v4_nextn.py
  DeepseekV4ForCausalLMNextN) is the checkpoint's MTP layer built as the target's decoder layer (attention over the
  attention-TP group, experts as the target's, held in the form the target's MoE runner holds them: DRAFT_RUNNER),
  its projections and norms whole, and its OWN embed_tokens
  (VocabParallelEmbedding, over the attention-TP group: vocab_parallel_embedding.py get_embedding_tp_kwargs; V4's over
  TP, whole under DP attention) and lm_head (ParallelLMHead over the TP group): both are handed the target's tensors
  only in EAGLEWorkerV2.alloc_memory_pool -> init_lm_head -> set_embed_and_head, after the target's pool is sized
  (speculative/eagle_worker_v2.py; sgl-project/sglang#36452 reports the same order), so they count at the profile;
- the draft's KV: the target's configurator scales its bytes a token by (target layers + draft layers) / target
  layers, the draft layers the draft config's num_nextn_predict_layers (model_runner.py ModelRunner.__init__
  eagle_draft_num_layers; pool_configurator.py DefaultPoolConfigurator.__init__: cell_size = int(cell_size x (1 +
  draft / target))), and the draft worker takes the target's max_total_num_tokens (model_runner_kv_cache_mixin.py
  init_memory_pool: the draft requires memory_pool_config; scheduler.py init_memory_pools passes the target's);
  DeepSeek-V4's configurator scales bytes_per_full_token by (T + 1) / T and its compressor rings are 16 / 256 rows
  under speculative decoding (pool_configurator.py DSV4PoolConfigurator.__init__; mem_cache/deepseek_v4_memory_pool.py
  get_compress_state_ring_size);
- mem_fraction_static's default is computed before the speculative hook runs (server_args.py __post_init__:
  _handle_gpu_memory_settings, then handle_speculative_decoding) and, outside a disaggregated decode node, reads no
  speculative setting: speculative decoding leaves it, chunked_prefill_size and the decode CUDA-graph max_bs as they are.

Re-read in the 0.5.16-0.5.23 wheels: the EAGLE family's defaults (48 running requests, (3, 1, 4)), the draft's KV
scaling for a non-DSA model and DeepSeek-V4's (T + 1) / T and 16 / 256-row rings are the same; SpeculativeAlgorithm
gains DSPARK, UNO and PP_SPEC_RELAY (``KNOWN_FROM``), and DeepSeek-V4's hook allows DSPARK beside EAGLE from 0.5.19.

DSPARK (read in the sglang 0.5.21 wheel, the first release that serves DeepSeek-V4.1; the same in 0.5.22 and 0.5.23):
_handle_dspark forces one step and topk 1, takes gamma from --speculative-dspark-block-size or the checkpoint's
dspark_block_size and verifies gamma + 1 draft tokens a step (DSPARK_HOOK); the draft is the checkpoint's bundled
DSpark stages, built as DeepseekV4ForCausalLMDSpark and held as DSPARK_MODEL says (experts in the target runner's
form over EP, wo_a in bf16, the Markov and confidence heads whole, the target's embedding and LM head shared), loaded
before the target's pool is sized; the pool counts one draft layer whatever the stage count (DSPARK_WORKER), and the
request cap its verify width (engines/sglang/dsv4_pool.py V41_SPEC_SOURCE).

What k3plan prices: EAGLE (NEXTN, EAGLE) with the target checkpoint's own MTP layers, as above, and DSPARK with the
checkpoint's bundled DSpark stages. Refused, each by name: a separate draft checkpoint (EAGLE or DSPARK with another
--speculative-draft-model-path, EAGLE3, STANDALONE, DFLASH, FROZEN_KV_MTP: k3plan has no inventory for it), NGRAM
(its worker was not read), a model without MTP layers or one whose MTP tensors are not a NextN layer SGLang builds
(DeepSeek-V4.1's DSpark stages under EAGLE), DSPARK on a checkpoint without DSpark stages (SGLang refuses it) or under
DP attention (its rules there not read), pipeline parallelism, and what the engine itself refuses at start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3plan.engines.serve_values import flag_int, same_checkpoint
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen
from k3plan.units import GiB

WHEEL = "sglang 0.5.15 wheel (PyPI)"
HOOK = f"{WHEEL} python/sglang/srt/arg_groups/speculative_hook.py"
ALIAS_SOURCE = f"{HOOK} handle_speculative_decoding, _resolve_speculative_algorithm_alias (NEXTN and EAGLE -> EAGLE)"
AUTO_SOURCE = f"{HOOK} _handle_eagle_family, _auto_choose_speculative_params"
RUNNING_SOURCE = f"{HOOK} _handle_eagle_family ('Max running requests is reset to 48 for speculative decoding')"
DRAFT_LOAD_SOURCE = (
    f"{WHEEL}: managers/scheduler.py Scheduler.init_model_worker (the draft worker loads before init_memory_pools), "
    "model_runner_kv_cache_mixin.py _profile_available_bytes ('Loaded weights (target + draft)'), "
    "speculative/eagle_worker_v2.py alloc_memory_pool -> init_lm_head -> set_embed_and_head (the draft's own "
    "embed_tokens and lm_head given back only after the target's pool is sized; sgl-project/sglang#36452)"
)
# the draft's MoE runs the target's runner: the speculative hook defaults speculative_moe_runner_backend to the
# resolved moe_runner_backend (a HIP-only ModelOpt-FP4 override aside), so its experts are held as the target's are
# (DeepSeek-V4's FP4 experts under --moe-runner-backend marlin: the fp32 scale Parameters kept, models/formats.py
# mxfp4_e8m0_f32kept)
DRAFT_RUNNER = (
    f"{WHEEL} python/sglang/srt/arg_groups/overrides.py _speculative_moe_runner_default ('Default the speculative "
    "(draft) MoE runner backend to the resolved target-model backend'; _deepseek_spec_moe_resolution sets triton "
    "or deep_gemm instead only on HIP for modelopt_fp4 DeepSeek checkpoints)"
)
DRAFT_KV_SOURCE = (
    f"{WHEEL}: model_runner.py ModelRunner.__init__ (eagle_draft_num_layers = the draft config's "
    "num_nextn_predict_layers), pool_configurator.py DefaultPoolConfigurator.__init__ (cell_size = int(cell_size x "
    "(1 + draft layers / target layers))); the draft worker's pool takes the target's max_total_num_tokens "
    "(model_runner_kv_cache_mixin.py init_memory_pool, scheduler.py init_memory_pools)"
)
DSV4_SPEC_SOURCE = (
    f"{WHEEL}: pool_configurator.py DSV4PoolConfigurator.__init__ (bytes_per_full_token x (T + 1) / T, one draft layer) "
    "and mem_cache/deepseek_v4_memory_pool.py get_compress_state_ring_size (16 / 256 rows under speculative decoding)"
)
# SpeculativeAlgorithm's members (speculative/spec_info.py) after the alias: the names SGLang starts with
KNOWN = frozenset({"DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"})
ALIASES = {"NEXTN": "EAGLE", "EAGLE": "EAGLE"}
# what each refused algorithm loads that k3plan does not price
UNPRICED = {
    "EAGLE3": "an EAGLE-3 draft checkpoint (--speculative-draft-model-path) k3plan has no inventory for",
    "STANDALONE": "a separate draft model (--speculative-draft-model-path) k3plan has no inventory for",
    "DFLASH": "a DFlash draft checkpoint (--speculative-draft-model-path) k3plan has no inventory for",
    "FROZEN_KV_MTP": "a Gemma-4 assistant draft checkpoint k3plan has no inventory for",
    "NGRAM": "the n-gram worker's device buffers (speculative/ngram_worker.py), which were not read",
    "UNO": "the UNO speculative worker and its state pool (speculative/uno*), not read",
    "PP_SPEC_RELAY": "the pipeline-parallel speculative relay, not read",
}
# SpeculativeAlgorithm's members added after 0.5.15, with the release each first ships in (the sglang 0.5.16,
# 0.5.20 and 0.5.21 wheels, speculative/spec_info.py): a command read as an earlier release is refused as unknown
KNOWN_FROM: dict[str, tuple[int, int, int]] = {"DSPARK": (0, 5, 16), "UNO": (0, 5, 20), "PP_SPEC_RELAY": (0, 5, 21)}
# _handle_eagle_family: the architectures whose draft is the target checkpoint when no draft path is given (those
# k3plan bundles of its list), by the config's model_type k3plan reads them under
SELF_DRAFT = {"deepseek_v3": "DeepseekV3ForCausalLM", "deepseek_v4": "DeepseekV4ForCausalLM"}
# _auto_choose_speculative_params: (steps, topk, draft tokens) for the DeepSeek family and the fallback alike
AUTO = (3, 1, 4)
SPEC_RUNNING = 48  # _handle_eagle_family's max_running_requests where the command sets none
# the first release whose start these rules describe (fit --engine-version): the 0.5.14 wheel already profiles the
# target's free memory with the draft loaded (model_runner_kv_cache_mixin.py _profile_available_bytes, 'Loaded weights
# (target + draft)'); the 0.5.12 wheel's has no draft in that profile (the target's pool is sized in its own worker's
# start, managers/scheduler.py init_model_worker), a start not read
SPEC_FROM = (0, 5, 14)
# the flags read here (the companions of --speculative-algorithm; server_args.py ServerArgs)
FLAGS = (
    "--speculative-algorithm",
    "--speculative-algo",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
    "--speculative-attention-mode",
    "--speculative-dspark-block-size",
)
# DSpark's scheduling and acceptance inputs (ServerArgs speculative_dspark_*): which drafted tokens are verified and
# kept, read from files or switched on the host, nothing held on the device when the pool is sized (DSPARK_HOOK
# _handle_dspark reads them only to warn when they are no-ops)
DSPARK_HARMLESS = (
    "--speculative-dspark-sps-table-path",
    "--speculative-dspark-confidence-sts-path",
    "--speculative-dspark-align-verify-tokens-to-graph-tier",
)


class SglangSpec(Frozen):
    """A serve command's speculative decoding as SGLang resolves it at start (module docstring)."""

    algorithm: str  # as resolved: EAGLE
    written: str  # --speculative-algorithm as written
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    draft_model: str | None  # --speculative-draft-model-path as given (None: the target's, for its architectures)
    given: str  # the flags as written, for the source line
    topk_given: bool  # --speculative-eagle-topk was on the command (DeepSeek-V4's assert reads it as written)
    source: str  # where the steps, topk and draft tokens came from
    # DSPARK: --speculative-dspark-block-size (gamma) as given, and --speculative-num-draft-tokens as given; the
    # checkpoint's block decides where neither is (draft_pricing, DSPARK_HOOK)
    dspark_block_size: int | None = None
    draft_tokens_given: int | None = None


class SglangDraft(Frozen):
    """What SGLang's draft holds a device when the target's pool is sized, and the layers its KV adds."""

    bytes_per_device: int
    source: str
    draft_layers: int  # the draft config's num_nextn_predict_layers: its KV layers
    num_draft_tokens: int  # speculative_num_draft_tokens (DeepSeek-V4's compressor rings)
    algorithm: str = "EAGLE"


def _int(name: str, raw: str) -> int:
    n = flag_int(name, raw, lo=0)  # a text int() cannot read, or past MAX_FLAG_INT: one line
    if n < 1:
        raise K3PlanError(f"--serve: {name} {raw!r}: expected a positive whole number")
    return n


def read_speculative(
    get, ignored: list[str], model_text: str, release: tuple[int, int, int] | None = None
) -> SglangSpec | None:
    """The speculative flags of an SGLang command -> the algorithm and its steps, top-k and draft tokens as SGLang
    resolves them; what SGLang refuses at start, or k3plan cannot price, is refused in one line. ``get`` takes a flag
    off the command (serve_values.Reading.get); ``release``: the one the command is read as, for the algorithms it
    knows (``KNOWN_FROM``; None: every release read)."""
    raw = {f: get(f, None) for f in FLAGS}
    block = raw.pop("--speculative-dspark-block-size")
    for flag in DSPARK_HARMLESS:
        if get(flag, None) is not None:
            ignored.append(flag)
    mode = raw.pop("--speculative-attention-mode")
    if mode is not None:  # the verify / draft-extend attention kernel (ServerArgs.speculative_attention_mode)
        if mode not in ("prefill", "decode"):
            raise K3PlanError(f"--serve: --speculative-attention-mode {mode!r}: expected prefill or decode")
        ignored.append("--speculative-attention-mode")
    algo = raw["--speculative-algorithm"] if raw["--speculative-algorithm"] is not None else raw["--speculative-algo"]
    path = raw["--speculative-draft-model-path"] or raw["--speculative-draft-model"]
    steps, topk, draft = (raw[f"--speculative-{k}"] for k in ("num-steps", "eagle-topk", "num-draft-tokens"))
    if algo is None:
        named = next((f for f, v in raw.items() if v is not None), None) or (
            "--speculative-dspark-block-size" if block is not None else None
        )
        if named is not None:
            raise K3PlanError(
                f"--serve: {named} without --speculative-algorithm: SGLang runs no speculative decoding then; give the "
                "algorithm or drop the flag"
            )
        return None
    written = algo
    name = ALIASES.get(algo.upper(), algo.upper())
    known = KNOWN | {a for a, first in KNOWN_FROM.items() if release is None or release >= first}
    if name not in known:
        raise K3PlanError(
            f"--serve: --speculative-algorithm {algo}: SGLang refuses it at start (speculative/spec_info.py "
            f"SpeculativeAlgorithm.from_string: 'Unknown speculative algorithm name'); expected NEXTN or EAGLE "
            f"({WHEEL})"
        )
    if name == "DSPARK":
        return _read_dspark(raw, written, block, path, model_text)
    if block is not None:
        raise K3PlanError(
            f"--serve: --speculative-dspark-block-size with --speculative-algorithm {algo}: DSpark's block, read only "
            "under --speculative-algorithm DSPARK; drop it"
        )
    if name != "EAGLE":
        raise K3PlanError(
            f"--serve: --speculative-algorithm {algo}: its draft is {UNPRICED[name]}, not priced; k3plan prices "
            "NEXTN / EAGLE with the checkpoint's own MTP layers"
        )
    n_steps, n_topk, n_draft = (None if v is None else _int(f, v) for f, v in (
        ("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
        ("--speculative-num-draft-tokens", draft)))  # fmt: skip
    if n_steps is None:
        if n_topk is not None or n_draft is not None:
            raise K3PlanError(
                "--serve: --speculative-eagle-topk / --speculative-num-draft-tokens without --speculative-num-steps: "
                f"SGLang asserts all three are left out before it picks them ({AUTO_SOURCE}); give "
                "--speculative-num-steps too"
            )
        n_steps, n_topk, n_draft = AUTO
        source = f"SGLang's choice (steps, topk, draft tokens) = {AUTO} ({AUTO_SOURCE})"
    else:
        if n_topk is None:  # _handle_eagle_family compares speculative_eagle_topk > 1: None fails there
            raise K3PlanError(
                "--serve: --speculative-num-steps without --speculative-eagle-topk: SGLang fails at start comparing "
                f"the unset top-k ({HOOK} _handle_eagle_family: 'speculative_eagle_topk > 1'); give "
                "--speculative-eagle-topk"
            )
        if n_draft is None and n_topk != 1:
            raise K3PlanError(
                f"--serve: --speculative-eagle-topk {n_topk} without --speculative-num-draft-tokens: SGLang sets the "
                "draft tokens itself only with topk 1 (steps + 1); give --speculative-num-draft-tokens"
            )
        source = "the command's flags"
        if n_topk == 1 and n_draft != n_steps + 1:
            n_draft = n_steps + 1
            source += (
                f"; draft tokens set to steps + 1 = {n_draft} with topk 1 ('speculative_num_draft_tokens is adjusted "
                f"to speculative_num_steps + 1', {HOOK} _handle_eagle_family)"
            )
    if path is not None and not same_checkpoint(path, model_text):
        raise K3PlanError(
            f"--serve: --speculative-draft-model-path {path}: a separate draft checkpoint is not priced (k3plan has no "
            "inventory for it); leave it out and SGLang drafts with the target checkpoint's own MTP layers "
            f"({HOOK} _handle_eagle_family)"
        )
    assert n_draft is not None  # set above: given, SGLang's choice, or steps + 1 with topk 1
    given = " ".join(f"{f} {v}" for f, v in raw.items() if v is not None)
    return SglangSpec(
        algorithm=name,
        written=written,
        num_steps=n_steps,
        eagle_topk=n_topk,
        num_draft_tokens=n_draft,
        draft_model=path,
        given=given,
        topk_given=topk is not None,
        source=f"{given}: {written} -> {name} ({ALIAS_SOURCE}); steps {n_steps}, topk {n_topk}, draft tokens "
        f"{n_draft}: {source}",
    )


DSPARK_WHEEL = "sglang 0.5.21 wheel (PyPI)"
DSPARK_HOOK = (
    f"{DSPARK_WHEEL} sglang/srt/arg_groups/speculative_hook.py _handle_dspark (speculative_num_steps and "
    "speculative_eagle_topk forced to 1; gamma = --speculative-dspark-block-size, else the draft config's "
    "(speculative/dspark_components/dspark_config.py parse_dspark_draft_config: the checkpoint's dspark_block_size), "
    "else DEFAULT_DSPARK_GAMMA 7; speculative_num_draft_tokens = gamma + 1, a different one a ValueError; the draft "
    "path defaults to --model-path where the checkpoint bundles the draft (checkpoint_bundles_dspark_draft: the "
    "dspark_* config keys); max_running_requests 48 where unset, after DeepSeek-V4's 256); the same in the 0.5.22 and "
    "0.5.23 wheels"
)


def _read_dspark(raw: dict, written: str, block: str | None, path: str | None, model_text: str) -> SglangSpec:
    """DSPARK's flags as _handle_dspark resolves them (DSPARK_HOOK); the checkpoint's block is read in
    ``draft_pricing``."""
    gamma = None if block is None else _int("--speculative-dspark-block-size", block)
    draft = raw["--speculative-num-draft-tokens"]
    n_draft = None if draft is None else _int("--speculative-num-draft-tokens", draft)
    if gamma is not None and n_draft is not None and n_draft != gamma + 1:
        raise K3PlanError(
            f"--serve: --speculative-num-draft-tokens {n_draft} with --speculative-dspark-block-size {gamma}: SGLang "
            f"refuses it at start ('DSpark speculative_num_draft_tokens must equal gamma + 1 (= {gamma + 1} for "
            f"gamma={gamma})', {DSPARK_HOOK}); give gamma + 1 or drop one"
        )
    if n_draft is not None and n_draft < 2:
        raise K3PlanError(
            f"--serve: --speculative-num-draft-tokens {n_draft}: SGLang refuses it at start ('DSpark "
            f"speculative_num_draft_tokens must be >= 2 (= gamma + 1)', {DSPARK_HOOK})"
        )
    if path is not None and not same_checkpoint(path, model_text):
        raise K3PlanError(
            f"--serve: --speculative-draft-model-path {path}: a separate DSpark draft checkpoint is not priced (k3plan "
            "has no inventory for it); leave it out and SGLang drafts with the target checkpoint's bundled DSpark "
            f"stages ({DSPARK_HOOK})"
        )
    given = " ".join(f"{f} {v}" for f, v in raw.items() if v is not None) + (
        f" --speculative-dspark-block-size {block}" if block is not None else ""
    )
    tokens = gamma + 1 if gamma is not None else (n_draft or 0)
    return SglangSpec(
        algorithm="DSPARK",
        written=written,
        num_steps=1,
        eagle_topk=1,
        num_draft_tokens=tokens,
        draft_model=path,
        given=given,
        topk_given=raw["--speculative-eagle-topk"] is not None,
        source=f"{given}: DSPARK, steps 1 and topk 1 whatever the flags say ({DSPARK_HOOK})",
        dspark_block_size=gamma,
        draft_tokens_given=n_draft,
    )


# what a NextN draft layer holds whole on every rank (DeepseekModelNextN: eh_proj nn.Linear, enorm / hnorm /
# shared_head.norm RMSNorm; DeepseekV4ModelNextN: e_proj / h_proj ReplicatedLinear, hc_head_* parameters; the
# decoder layer's norms, hyper-connection parameters and router gate as the target's): whole name segments, so that
# gate_proj is not e_proj
_WHOLE_SEGMENTS = frozenset({"eh_proj", "e_proj", "h_proj", "gate"})


def _whole(name: str) -> bool:
    segments = name.split(".")
    return bool(_WHOLE_SEGMENTS.intersection(segments)) or "norm" in name or any(g.startswith("hc_") for g in segments)


_EMBED = ("embed_tokens", "embed.")
_HEAD = ("shared_head.head", "lm_head", "head.weight")


def draft_pricing(
    spec: SglangSpec,
    model,
    *,
    tp: int,
    ep: int,
    lm_head_tp: int,
    dp_attention: bool,
    pp: int,
    held: Callable[[Any, str], int] | None = None,
    shared_tp: int | None = None,
) -> SglangDraft:
    """The draft's bytes a device at the target's profile and its KV layers (module docstring). ``model``: the loaded
    k3plan Model; ``tp``: the attention-TP size (tp_size, or tp_size / dp_size under DP attention); ``ep``: the
    ranks the experts spread over (the expert bytes a device are the same split over TP); ``lm_head_tp``: the TP
    group the LM head is cut over (tp_size); ``held(t, role)``: the bytes the engine holds of inventory tensor ``t``
    in the form the target's stack holds a tensor of ``role`` (its runtime format): the draft's routed experts as the
    target's experts, its MoE running the target's runner (DRAFT_RUNNER); None: the checkpoint's bytes;
    ``shared_tp``: the group its shared experts split over where not ``tp`` (the target's DeepseekV2MoE rule: the
    whole TP group under DP attention, engines/sglang/serve.py mlp_whole_tp; deepseek_nextn.py and
    deepseek_v4_nextn.py build the same decoder layer with is_nextn, sglang 0.5.15 wheel)."""

    def nbytes(t, role: str | None = None) -> int:
        return t.nbytes if held is None else held(t, role or t.role)

    s = model.spec
    arch = SELF_DRAFT.get(s.architecture)
    if pp > 1:
        raise K3PlanError(
            f"--serve: --speculative-algorithm {spec.written} with --pp-size {pp}: SGLang refuses it at start "
            "('Pipeline parallelism is not compatible with overlap schedule, speculative decoding', server_args.py "
            f"check_server_args, {WHEEL})"
        )
    mtp = model.inventory.of_kind("mtp")
    if spec.algorithm == "DSPARK":
        return _dspark_pricing(spec, model, tp=tp, ep=ep, dp_attention=dp_attention, nbytes=nbytes)
    if arch is None and s.dsv4 is not None and s.dsv4.dspark is not None:
        raise K3PlanError(
            f"--serve: --speculative-algorithm {spec.written} on {s.name}: its MTP tensors are DSpark stages, not "
            "a NextN layer SGLang's EAGLE worker builds; k3plan prices them under --speculative-algorithm DSPARK"
        )
    if arch is None or not mtp or not s.mtp_layers:
        why = (
            f"{s.name} ships no MTP layers (num_nextn_predict_layers {s.mtp_layers}, no mtp tensors in its checkpoint "
            "index), so SGLang's NextN draft has nothing to load"
            if not mtp or not s.mtp_layers
            else f"SGLang drafts with the target checkpoint only for its DeepSeek architectures ({HOOK} "
            f"_handle_eagle_family), not {s.architecture}"
        )
        raise K3PlanError(f"--serve: --speculative-algorithm {spec.written}: {why}; not priced")
    if s.dsv4 is not None and (spec.written != "EAGLE" or not spec.topk_given or spec.eagle_topk != 1):
        raise K3PlanError(
            f"--serve: --speculative-algorithm {spec.written}"
            + (
                f" --speculative-eagle-topk {spec.eagle_topk}"
                if spec.topk_given
                else " without --speculative-eagle-topk"
            )
            + f" on {s.name}: SGLang refuses it at start (AssertionError: 'Only EAGLE speculative algorithm with topk "
            f"== 1 is supported for DeepseekV4ForCausalLM', arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults, "
            f"{WHEEL}: it reads the flags as written, before NEXTN is resolved); expected --speculative-algorithm "
            "EAGLE --speculative-eagle-topk 1"
        )
    whole = split_tp = split_ep = embed = head = shared = 0
    for t in mtp:
        if ".experts." in t.name and "shared_experts" not in t.name:
            split_ep += nbytes(t, "expert")
        elif shared_tp is not None and "shared_experts" in t.name:
            shared += nbytes(t)
        elif any(k in t.name for k in _EMBED):
            embed += nbytes(t)
        elif any(k in t.name for k in _HEAD):
            head += nbytes(t)
        elif _whole(t.name):
            whole += nbytes(t)
        else:
            split_tp += nbytes(t)
    own = "in its MTP layer's tensors"
    if not embed or not head:  # the checkpoint's MTP layer carries none: the draft builds its own, the target's shape
        glob = model.inventory.of_kind("global")
        embed = embed or sum(nbytes(t) for t in glob if any(k in t.name for k in _EMBED))
        head = head or sum(nbytes(t) for t in glob if any(k in t.name for k in _HEAD) and "hc_head" not in t.name)
        own = "allocated as the target's embedding and LM head (the checkpoint's MTP layer carries none)"
    # the embedding over the attention-TP group (get_embedding_tp_kwargs); V4's NextN over TP, whole under DP attention
    embed_tp = 1 if (s.dsv4 is not None and dp_attention) else tp
    per_device = whole + -(-split_tp // tp) + -(-split_ep // ep) + -(-embed // embed_tp) + -(-head // lm_head_tp)
    per_device += -(-shared // shared_tp) if shared_tp else 0
    shared_text = f", shared experts {shared / GiB:.3f} GiB over {shared_tp}" if shared_tp else ""
    source = (
        f"{spec.source}; the draft: {s.name}'s {s.mtp_layers} MTP layer(s) from its checkpoint index ({len(mtp)} "
        f"tensors) built as {arch}NextN{' in the forms the target holds them (' + DRAFT_RUNNER + ')' if held else ''}: "
        f"experts {split_ep / GiB:.2f} GiB over {ep} rank(s), attention{'' if shared_tp else ' and shared experts'} "
        f"{split_tp / GiB:.2f} GiB over TP {tp}{shared_text}, projections and norms {whole / GiB:.3f} GiB whole, its "
        "own "
        f"embed_tokens {embed / GiB:.2f} GiB over {embed_tp} and lm_head {head / GiB:.2f} GiB over {lm_head_tp} ({own}), "
        f"all resident when the target's pool is sized ({DRAFT_LOAD_SOURCE})"
    )
    return SglangDraft(
        bytes_per_device=per_device,
        source=source,
        draft_layers=s.mtp_layers,
        num_draft_tokens=spec.num_draft_tokens,
    )


def draft_cell_bytes(cell: int, *, target_layers: int, draft_layers: int) -> int:
    """SGLang's bytes a token with the draft's KV layers budgeted in (DRAFT_KV_SOURCE), its own float arithmetic."""
    if draft_layers <= 0 or target_layers <= 0:
        return cell
    return int(cell * (1 + int(draft_layers) / int(target_layers)))


# DeepSeek-V4.1's DSpark draft as SGLang builds and holds it on a CUDA GPU (DSPARK_MODEL): the checkpoint's mtp.{i}.*
# stages, one DSparkV4Stage a dspark_target_layer_ids entry, each the target's DeepseekV4DecoderLayer (is_nextn) over
# a config with dspark_n_routed_experts / dspark_num_experts_per_tok, its attention DSparkAttention (compress ratio 0:
# the window alone); the target's embedding and LM head attached, not loaded (uses_own_vocab_modules only on NPU)
DSPARK_MODEL = (
    f"{DSPARK_WHEEL} sglang/srt/models/deepseek_v4_dspark.py: DeepseekV4ForCausalLMDSpark.__init__ (num_stages = "
    "len(dspark_target_layer_ids); embed_tokens / lm_head None on CUDA, attach_shared_modules hands it the target's), "
    "DSparkV4Stage (DeepseekV4DecoderLayer over _dspark_stage_config: n_routed_experts = dspark_n_routed_experts; "
    "stage 0's main_proj ReplicatedLinear(hidden x stages, hidden, quant_config) and main_norm; the last stage's norm, "
    "no hc_head under hc_pre_from_prev_sublayer), DSparkAttention (MqaAttentionBase: wq_a / wkv ReplicatedLinear, "
    "wq_b ColumnParallelLinear and wo_b RowParallelLinear over the attention TP group, wo_a ColumnParallelLinear with "
    "wo_a_fp8=False and wo_a_keeps_quant_config=False: bf16), DSparkV4MarkovHead (markov_w1 VocabParallelEmbedding "
    "enable_tp=False, markov_w2 nn.Linear(rank, vocab) in bf16 under SGLANG_DSPARK_OPT_MARKOV_W2_BF16's default True "
    "(environ.py), whole: its TP shard is a view), build_dspark_v4_confidence_head (nn.Linear in f32), load_weights "
    "(_remap_dspark_weight_name: embed / head / gate.bias_vl skipped); the same in the 0.5.22 and 0.5.23 wheels"
)
SGLANG_DSPARK_DP = (
    "sglang 0.5.17 wheel (PyPI) sglang/srt/models/deepseek_v4_dspark.py DSparkAttention (attn_tp_rank / attn_tp_size "
    "= get_parallel().attn_tp_*), DSparkV4MarkovHead (markov_w1 VocabParallelEmbedding enable_tp=False, markov_w2 "
    "nn.Linear), build_dspark_v4_confidence_head (DSparkConfidenceHead), DeepseekV4ForCausalLMDSpark (no lm_head of "
    "its own)"
)
DSPARK_WORKER = (
    f"{DSPARK_WHEEL} sglang/srt/speculative/dspark_components/dspark_worker_v2.py DSparkWorkerV2.__init__ (the "
    "draft's TpModelWorker built before the pools) and managers/scheduler.py Scheduler.init_target_memory_pool "
    "(preloaded_weights_bytes += draft_worker.preloaded_weights_bytes before the target's pool is sized); "
    "model_executor/pool_configurator.py DSV4PoolConfigurator.__init__ ('draft_layers = 1': bytes_per_full_token and "
    "bytes_per_swa_token x (T + 1) / T for any speculative algorithm); mem_cache/kv_cache_configurator.py "
    "(the draft worker's DeepSeekV4TokenToKVPool: compression_ratios [COMPRESS_RATIO_NEXTN_LAYER = 0] x its layers, "
    "the target's swa tokens) -- allocated after the target's pool is sized, so its window layers past the one the "
    "configurator counts come out of the 1 - mem_fraction_static share, not priced; nor are the worker's per-batch "
    "buffers (DsparkVerifyEpilogue, DSparkVerifyPlanner: max_bs-sized) and the NVLink vocab gather's symmetric buffer "
    "(distributed/device_communicators/vocab_gather.py NVLinkVocabGather: world x max_running_requests x the LM head's "
    "vocabulary shard, f32, where the TP group has a multicast plane)"
)


def _dspark_pricing(spec: SglangSpec, model, *, tp: int, ep: int, dp_attention: bool, nbytes) -> SglangDraft:
    """DeepSeek-V4.1's DSpark draft a device as SGLang holds it (DSPARK_MODEL), its KV in the pool as the configurator
    counts it (DSPARK_WORKER), the verify width from the flags or the checkpoint's block (DSPARK_HOOK)."""
    from k3plan.models.formats import get_format

    s = model.spec
    dspark = None if s.dsv4 is None else s.dsv4.dspark
    if dspark is None:
        raise K3PlanError(
            f"--serve: --speculative-algorithm {spec.written} on {s.name}: SGLang refuses it at start ('DSpark dense "
            f"speculative decoding requires setting --speculative-draft-model-path', {DSPARK_HOOK}): the checkpoint "
            "bundles no DSpark draft (no dspark_* config keys), and a separate draft checkpoint is not priced"
        )
    if spec.written != "DSPARK":  # DeepSeek-V4's hook asserts on the flag as written, before it is upper-cased
        raise K3PlanError(
            f"--serve: --speculative-algorithm {spec.written} on {s.name}: SGLang refuses it at start (AssertionError: "
            "'Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM', "
            f"{DSPARK_WHEEL} sglang/srt/arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults, run from "
            "model_hook.py handle_model_specific_adjustments before speculative_hook.py upper-cases the name: "
            "arg_groups/pipeline.py run_resolution_pipeline); expected --speculative-algorithm DSPARK"
        )
    # under DP attention (SGLANG_DSPARK_DP, read in the 0.5.17 wheel) the draft's attention is cut over the
    # attention-TP group, tp_size / dp_size, which ``tp`` is here (as for the NextN draft); its Markov and confidence
    # heads and main_proj are whole either way and it holds no LM head of its own, so --enable-dp-lm-head cuts only
    # the target's; its MoE runs the target's runner (DRAFT_RUNNER)
    dp_note = f"; DP attention: the draft's attention over the attention-TP group of {tp} ({SGLANG_DSPARK_DP})"
    # the flag's gamma, else the draft config's (the checkpoint's dspark_block_size: V4.1's always carries one, so
    # neither DEFAULT_DSPARK_GAMMA nor a lone --speculative-num-draft-tokens sets it)
    if spec.dspark_block_size is not None:
        gamma, said = spec.dspark_block_size, "--speculative-dspark-block-size"
    else:
        gamma, said = dspark.block_size, f"the checkpoint's dspark_block_size ({s.name})"
    if spec.draft_tokens_given is not None and spec.draft_tokens_given != gamma + 1:
        raise K3PlanError(
            f"--serve: --speculative-num-draft-tokens {spec.draft_tokens_given} on {s.name}: SGLang refuses it at "
            f"start ('DSpark speculative_num_draft_tokens must equal gamma + 1 (= {gamma + 1} for gamma={gamma})', "
            f"gamma {said}: {DSPARK_HOOK})"
        )
    bf16 = get_format("bf16")
    f32 = get_format("f32")
    whole = split_tp = split_ep = shared = 0
    skipped = 0
    for t in model.inventory.of_kind("mtp"):
        name = t.name
        if name.endswith("gate.bias_vl"):  # not loaded (_remap_dspark_weight_name)
            skipped += t.nbytes
        elif ".experts." in name and "shared_experts" not in name:
            split_ep += nbytes(t, "expert")
        elif "shared_experts" in name:  # the target's shared-expert rule: over TP
            shared += nbytes(t, "shared_expert")
        elif name.endswith(("attn.wq_b", "attn.wo_b")):
            split_tp += nbytes(t, "attn")
        elif name.endswith("attn.wo_a"):  # bf16, over TP (wo_a_fp8=False, no quant_config)
            split_tp += bf16.nbytes(t.shape)
        elif name.endswith(("attn.wq_a", "attn.wkv", "main_proj")):  # ReplicatedLinear under the quant_config
            whole += nbytes(t, "attn")
        elif "confidence_head" in name:  # nn.Linear in f32
            whole += f32.nbytes(t.shape)
        else:  # norms, attn_sink, hyper-connection parameters, the router, the Markov head's two tables: whole
            whole += t.nbytes
    per_device = whole + -(-(split_tp + shared) // tp) + -(-split_ep // ep)
    stages = len(dspark.target_layer_ids)
    source = (
        f"{spec.source}; gamma {gamma} ({said}), so {gamma + 1} draft tokens verified a step; the draft: {s.name}'s "
        f"{stages} DSpark stages from its checkpoint index, held as SGLang builds them ({DSPARK_MODEL}): their "
        f"{dspark.n_routed_experts} experts a stage {split_ep / GiB:.2f} GiB over {ep} rank(s) in the target runner's "
        f"form ({DRAFT_RUNNER}), attention (wo_a in bf16) and shared experts {(split_tp + shared) / GiB:.2f} GiB over "
        f"TP {tp}, main_proj, wq_a / wkv, norms, router, hyper-connection and the Markov and confidence heads "
        f"{whole / GiB:.3f} GiB whole, the target's embedding and LM head shared; resident when the target's pool is "
        f"sized, its KV one draft layer in the pool's per-token figures ({DSPARK_WORKER})"
        f"{dp_note if dp_attention else ''}"
    )
    return SglangDraft(
        bytes_per_device=per_device,
        source=source,
        draft_layers=1,
        num_draft_tokens=gamma + 1,
        algorithm="DSPARK",
    )
