"""vLLM's speculative decoding through --serve (issue 47 item 1, k3plan.engines.vllm.spec): the method and token
count as vllm/config/speculative.py reads them, the MTP drafter's weights a device from the checkpoint index and its
attention layers in the pool; a method k3plan cannot price is refused by name in one line."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

FLASH = (
    "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 2 --kv-cache-dtype fp8 --block-size 256 "
    "--gpu-memory-utilization 0.95 --max-model-len 131072"
)
R1 = "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --max-model-len 32768"


def _engine(cli, hardware: str, topology: str, serve: str) -> dict:
    r = cli("fit", "-H", hardware, "-t", topology, "--serve", serve, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


@pytest.mark.parametrize(
    ("flags", "method", "tokens"),
    [
        ("""--speculative-config '{"method":"mtp"}'""", "mtp", None),
        # vLLM replaces every MTPModelTypes name with mtp (SpeculativeConfig.__post_init__)
        ("""--speculative-config '{"method":"deepseek_mtp","num_speculative_tokens":2}'""", "mtp", 2),
        ("""--speculative_config '{"method":"ngram","num_speculative_tokens":3}'""", "ngram", 3),
        ("--speculative-model [ngram] --num-speculative-tokens 4", "ngram", 4),  # vLLM < 0.10's flags
    ],
)
def test_the_speculative_config_is_read_as_vllm_reads_it(flags, method, tokens):
    q = parse_serve(f"{FLASH} {flags}", platform="gpu")
    assert (q.speculative.method, q.speculative.num_speculative_tokens) == (method, tokens)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ("""--speculative-config '{"method":"eagle3","model":"x/y"}'""", "'eagle3'"),
        # Kimi-K3's DSpark ships as its own checkpoint (InferenceX's K3 B300 line): not priced
        (
            """--speculative-config '{"method":"dspark","model":"Inferact/Kimi-K3-DSpark","num_speculative_tokens":7}'""",
            "separate DSpark checkpoint",
        ),
        ("""--speculative-config '{"method":"dspark"}'""", "dspark without num_speculative_tokens"),
        ("""--speculative-config '{"model":"some/draft","num_speculative_tokens":3}'""", "'draft_model'"),
        ("""--speculative-config '{"method":"mtp","draft_tensor_parallel_size":1}'""", "draft_tensor_parallel_size"),
        ("--speculative-config '{method: mtp}'", "JSON"),
        ("""--speculative-config '{"method":"mtp","num_speculative_tokens":0}'""", "positive"),
        ("""--speculative-config '{"method":"ngram"}'""", "num_speculative_tokens"),
    ],
)
def test_a_speculative_method_k3plan_cannot_price_is_refused_by_name(flags, says):
    with pytest.raises(K3PlanError, match=says) as err:
        parse_serve(f"{FLASH} {flags}", platform="gpu")
    assert "\n" not in str(err.value)


def test_the_mtp_drafter_adds_its_checkpoint_layer_to_the_weights(cli):
    """DeepSeek-V4-Flash's MTP layer (32 tensors, 3.35 GiB whole): its experts over the 2 ranks, the rest over TP or
    whole; ngram adds nothing. From 0.27.0 (the newest read here) the target model holds its _mtp_hidden_buffer
    [max_num_batched_tokens, hc_mult x hidden] bf16 only for a drafter that reads the hidden states
    (engines/vllm/dsv4_workspace.py MTP_HIDDEN_GATED_FROM): MTP's weights carry it, the plain start's do not."""
    from k3plan.models.loader import load_model

    plain = _engine(cli, "nvidia-h20", "2", FLASH)
    mtp = _engine(cli, "nvidia-h20", "2", FLASH + """ --speculative-config '{"method":"mtp"}'""")
    ngram = _engine(
        cli, "nvidia-h20", "2", FLASH + """ --speculative-config '{"method":"ngram","num_speculative_tokens":3}'"""
    )
    model = load_model("deepseek-v4-flash")
    whole = sum(t.nbytes for t in model.inventory.of_kind("mtp"))
    assert model.spec.dsv4 is not None
    hidden_buffer = 8192 * model.spec.dsv4.hc_mult * model.spec.hidden_size * 2  # H20: 8,192 batched tokens by default
    assert "_mtp_hidden_buffer" in mtp["sources"]["weights"] and "no _mtp_hidden_buffer" in plain["sources"]["weights"]
    extra = mtp["weights_bytes"] - plain["weights_bytes"] - hidden_buffer
    assert (
        whole / 2 <= extra <= whole / 2 + 0.05 * 2**30
    )  # about half: split over 2 ranks but for the small whole parts
    assert "MTP layer" in mtp["sources"]["weights"] and "speculative.py" in mtp["sources"]["weights"]
    # the pool loses the drafter's weights and the hidden buffer, the graphs' change (one speculative token: the capture sizes of
    # (1 + 1) x max_num_seqs x 2, engines/vllm/cudagraph.py) and the drafter's dummy layer where it outgrows the
    # target's (engines/vllm/dsv4_workspace.py dsv4_forward_live: 47 MiB more at 8,192 tokens), nothing else; here
    # the indexer's logits with their CSA layer's live tensors (dsv4_indexer_live: 1,859 + 512 MiB) outgrow both
    graphs = mtp["non_torch_bytes"] - plain["non_torch_bytes"]
    drafted = mtp["activation_bytes"] - plain["activation_bytes"]
    assert drafted == 0
    assert mtp["kv_pool_bytes"] == plain["kv_pool_bytes"] - extra - hidden_buffer - graphs - drafted
    # ngram holds no weights; its 3 tokens change only the graphs' capture sizes (rounded to multiples of 4)
    ngram_graphs = ngram["non_torch_bytes"] - plain["non_torch_bytes"]
    assert ngram["weights_bytes"] == plain["weights_bytes"]
    assert ngram["kv_pool_bytes"] == plain["kv_pool_bytes"] - ngram_graphs


def test_an_mla_model_s_mtp_layer_takes_a_layer_s_share_of_the_pool(cli):
    """DeepSeek-R1's MTP layer is an MLA decoder layer: one more layer in vLLM's pool, 61 -> 62 layers a token."""
    plain = _engine(cli, "nvidia-h200", "1x8", R1)
    mtp = _engine(
        cli,
        "nvidia-h200",
        "1x8",
        R1 + """ --speculative-config '{"method":"deepseek_mtp","num_speculative_tokens":1}'""",
    )
    assert mtp["weights_bytes"] > plain["weights_bytes"]
    per_token_plain = plain["kv_pool_bytes"] / plain["kv_pool_tokens"]
    per_token_mtp = mtp["kv_pool_bytes"] / mtp["kv_pool_tokens"]
    assert per_token_mtp / per_token_plain == pytest.approx(62 / 61, rel=0.01)


def test_mtp_on_a_model_without_mtp_layers_is_refused_in_one_line(cli):
    r = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "-t",
        "4x8",
        "--serve",
        "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --enable-expert-parallel "
        """--speculative-config '{"method":"mtp","num_speculative_tokens":1}'""",
    )
    assert r.exit_code == 2 and "ships no MTP layers" in r.output and len(r.output.strip().splitlines()) == 1


def test_speculative_decoding_on_a_tpu_is_refused_by_name():
    with pytest.raises(K3PlanError, match="torch_tpu plugin's drafter"):
        parse_serve(
            'vllm serve moonshotai/Kimi-K3 --enable-expert-parallel --speculative-config \'{"method":"ngram",'
            '"num_speculative_tokens":2}\'',
            platform="tpu",
        )


def test_the_mtp_weights_match_a_logged_tp2_load(cli):
    """A public startup log of DeepSeek-V4-Flash at TP 2 with MTP (vllm-project/vllm#41834, DerAndereAndi's log of
    2026-06-27, an SM12x build): "[mtp.py:484] MTP draft model loaded: 39 params", "Sharing target model embedding
    weights with the draft model", "Shared target model lm_head with MTP shared_head.head", "[gpu_model_runner.py:5255]
    Model loading took 75.79 GiB memory". The checkpoint index k3plan bundles has no MTP embedding or head, so nothing
    is counted twice; the weights a GPU do not depend on which 96 GB GPU loads them (its GPU is not bundled: H20 here)."""
    e = _engine(
        cli,
        "nvidia-h20",
        "2",
        "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 2 --kv-cache-dtype fp8 --max-model-len 65536 "
        """--speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'""",
    )
    logged = 75.79
    # within 0.1% since the model's buffers and RoPE tables are priced (engines/vllm/dsv4_workspace.py
    # dsv4_model_buffers: 0.78 GiB; -1.1% before)
    assert abs(e["weights_bytes"] / 2**30 - logged) <= 0.001 * logged


def test_only_the_mtp_layer_s_own_projections_are_whole_not_its_shared_expert(cli):
    """vLLM holds the MTP layer's e_proj / h_proj (V3: eh_proj) whole on every rank; the shared expert's gate_proj is
    split over TP like the rest of the layer. A substring match on "e_proj" once took gate_proj whole (14.7 MB for
    DeepSeek-V3's MTP layer)."""
    from k3plan.engines.vllm.spec import _MTP_WHOLE, _MTP_WHOLE_SEGMENTS, _draft_split
    from k3plan.models.loader import load_model

    mtp = load_model("deepseek-v3").inventory.of_kind("mtp")
    whole, _, _ = _draft_split(mtp, _MTP_WHOLE, _MTP_WHOLE_SEGMENTS)
    gate = sum(t.nbytes for t in mtp if t.name.endswith("shared_experts.gate_proj.weight"))
    eh = sum(t.nbytes for t in mtp if ".eh_proj." in t.name)
    assert gate and eh and whole - eh < gate  # eh_proj whole, the shared gate_proj not


# the drafter's own KV dtype (vllm 0.31.0 wheel (PyPI), vllm/config/speculative.py SpeculativeConfig.kv_cache_dtype:
# 'When None, the draft inherits the target model's --kv-cache-dtype', the same field in the 0.32.0-0.34.0 wheels)
@pytest.mark.parametrize(
    ("target", "draft"),
    [
        ("", "auto"),
        ("--kv-cache-dtype auto", "auto"),
        ("--kv-cache-dtype fp8", "fp8"),
        ("--kv-cache-dtype fp8", "fp8_e4m3"),
    ],
)
def test_a_drafter_kv_cache_dtype_that_is_the_target_s_is_read_as_no_change(target, draft):
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 1, "kv_cache_dtype": draft})
    base = parse_serve(
        f"{R1} {target} --speculative-config '{json.dumps({'method': 'mtp', 'num_speculative_tokens': 1})}'",
        platform="gpu",
    )
    q = parse_serve(f"{R1} {target} --speculative-config '{spec}'", platform="gpu")
    assert (q.speculative.method, q.speculative.num_speculative_tokens) == (base.speculative.method, 1)


@pytest.mark.parametrize(("target", "draft"), [("--kv-cache-dtype fp8", "auto"), ("", "fp8"), ("", 8)])
def test_a_drafter_kv_cache_dtype_other_than_the_target_s_is_refused_in_one_line(target, draft):
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 1, "kv_cache_dtype": draft})
    with pytest.raises(K3PlanError, match="kv_cache_dtype") as err:
        parse_serve(f"{R1} {target} --speculative-config '{spec}'", platform="gpu")
    assert "\n" not in str(err.value) and "not priced" in str(err.value)


def test_the_fly_acceptance_keys_change_nothing_held():
    spec = json.dumps(
        {
            "method": "mtp",
            "num_speculative_tokens": 3,
            "rejection_sample_method": "fly",
            "fly_window_size": 2,
            "fly_entropy_threshold": 0.3,
            "fly_entropy_top_k": 3,
            "disable_lookahead_block_hashes": True,
        }
    )
    q = parse_serve(f"{R1} --speculative-config '{spec}'", platform="gpu")
    assert (q.speculative.method, q.speculative.num_speculative_tokens) == ("mtp", 3)


def test_the_draft_s_max_model_len_changes_nothing_held(cli):
    """SpeculativeConfig.max_model_len only overrides draft_model_config.max_model_len, which nothing that sizes
    memory reads (engines/vllm/spec.py HARMLESS_KEYS): the same figures with and without it (Czyszka/nanoserve-mini's
    DeepSeek-V4-Flash MTP service gives it 8,192, tests/engines/cases/vllm-nanoserve-dsv4-flash-*)."""
    base = FLASH + """ --speculative-config '{"method":"mtp","num_speculative_tokens":1%s}'"""
    got = [_engine(cli, "nvidia-h200", "2", base % extra) for extra in ("", ',"max_model_len":8192')]
    keys = ("weights_bytes", "kv_pool_bytes", "kv_pool_tokens", "max_concurrency", "starts")
    assert tuple(got[0][k] for k in keys) == tuple(got[1][k] for k in keys)


# DeepSeek-V4's fp8_ds_mla layout takes "auto" and every fp8 spelling as fp8_ds_mla (vllm 0.31.0 wheel (PyPI),
# vllm/models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype): a drafter's "auto" beside --kv-cache-dtype fp8 is
# the target's dtype there
def test_a_deepseek_v4_drafter_s_auto_kv_dtype_is_the_target_s_fp8_ds_mla():
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 1, "kv_cache_dtype": "auto"})
    q = parse_serve(f"{FLASH} --speculative-config '{spec}'", platform="gpu")
    assert q.speculative.method == "mtp"
    with pytest.raises(K3PlanError, match="kv_cache_dtype"):
        parse_serve(f"{FLASH} --speculative-config '{spec.replace('auto', 'bfloat16')}'", platform="gpu")


DASHED = (
    "--speculative-config.method=mtp --speculative-config.num-speculative-tokens=2 "
    "--speculative-config.draft-sample-method=probabilistic --speculative-config.rejection-sample-method=block"
)


def test_dashed_speculative_keys_read_as_underscores_from_0_26_0():
    """The dotted flags keep a nested key as written; vLLM rewrites its dashes to underscores before
    SpeculativeConfig(**...) from 0.26.0 (vllm/engine/arg_utils.py EngineArgs.create_speculative_config, the 0.26.0
    wheel; not in 0.25.0's): the single-MI300X DeepSeek-V4-Flash-0731 stack's DSpark flags
    (tests/engines/cases/vllm-mi300x-stack-dsv4-flash-0731-tp1-kv20g-dspark7.yaml)."""
    from k3plan.engines.vllm.spec import DASHED_KEYS_FROM

    assert DASHED_KEYS_FROM == (0, 26, 0)
    for release in ((0, 26, 0), (0, 34, 0), None):
        q = parse_serve(f"{FLASH} {DASHED}", platform="gpu", release=release)
        assert (q.speculative.method, q.speculative.num_speculative_tokens) == ("mtp", 2)
    with pytest.raises(K3PlanError, match="'draft-sample-method' is not one k3plan reads") as err:
        parse_serve(f"{FLASH} {DASHED}", platform="gpu", release=(0, 25, 0))
    assert "\n" not in str(err.value)


def test_a_revision_is_read_only_where_the_bundled_config_was_read_at_it():
    """--revision picks the checkpoint's snapshot: read where it is one the bundle's provenance.json cites
    (revisions_cited), refused in one line otherwise (tests/engines/cases/vllm-dsserving-*.yaml pin 7872f01b /
    dba1be0a, the revisions models/bundled/deepseek-v4-flash-0731 and deepseek-v4.1-flash cite)."""
    base = "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --tensor-parallel-size 8 --revision "
    q = parse_serve(base + "7872f01b1d1fe23eabc4c98b48bffcef5a386062", platform="gpu")
    assert "--revision" in q.ignored
    with pytest.raises(K3PlanError, match="not a revision k3plan's deepseek-v4-flash-0731 config was read at") as err:
        parse_serve(base + "main", platform="gpu")
    assert "\n" not in str(err.value)
