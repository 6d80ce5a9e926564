"""Public serve commands k3plan had not been shown (issue 47 item 2: every flag of a real engine command is priced,
named as having no memory effect, or refused with the reason), each from the source it was met in:

- vLLM's API-server flags (FrontendArgs: --api-key, --ssl-*, CORS, --root-path, ...): DeepSeek-R1 issue #507 passes
  --api_key, vllm-project/vllm#42426 passes --ssl-* and five --served-model-name names and --allowed-local-media-path;
- SGLang 0.4.x's --enable-ep-moe and --enable-flashinfer-mla (sgl-project/sglang#4161, #7691), --dist-timeout
  (sgl-project/sglang#34822), --disaggregation-ib-device (the LMSYS / Ant Group H20 blog), fp8_e5m2 KV;
- --moe-runner-backend under --enable-dp-attention (SemiAnalysisAI/InferenceX#2226's DeepSeek-V4-Pro DEP4 lines);
- tpu-inference's own --additional-config keys (its daily CI's run_jax_deepseek_v3_1k_8k.json)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

R1 = "vllm serve deepseek-ai/DeepSeek-R1 -tp 8"
SG_R1 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8"


def _h200(cmd: str):
    return parse_serve(cmd, platform="gpu", device_gib=139.8, device_name="nvidia-h200")


def test_vllm_s_api_server_flags_are_read_and_listed_as_no_memory_effect():
    plain = _h200(R1)
    q = _h200(
        R1 + " --api_key sk-a sk-b --ssl-keyfile k.pem --ssl-certfile c.pem --ssl-ca-certs ca.pem --enable-ssl-refresh"
        " --allowed-origins '[\"*\"]' --middleware m.mw --root-path /v --disable-fastapi-docs"
        " --return-tokens-as-token-ids --no-enable-log-deltas --served-model-name a b c d e"
        " --allowed-local-media-path / --cpu-offload-gb 0 --max-num-seqs 8"
    )
    assert (q.model, q.tp, q.batch) == ("deepseek-v3", 8, 8)  # the nargs flags took their values, no more
    # (--swap-space: listed before 0.18.0, refused from it: tests/engines/test_vllm_dbo.py)
    for flag in ("--api-key", "--ssl-certfile", "--enable-ssl-refresh", "--served-model-name"):
        assert flag in q.ignored
    assert "--cpu-offload-gb" in q.ignored  # 0, vLLM's default: nothing offloaded
    assert (q.context, q.stack) == (plain.context, plain.stack)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("--cpu-offload-gb 10", "--cpu-offload-gb 10: weights offloaded to host memory over UVA"),
        ("--cpu-offload-gb lots", "expected a number of GiB"),
        ("--cpu-offload-gb -1", "expected a number of GiB"),
    ],
)
def test_vllm_s_weight_offload_is_refused_with_what_it_does(extra, says):
    with pytest.raises(K3PlanError, match=says):
        _h200(f"{R1} {extra}")


def test_sglang_0_4_s_flags_read_as_those_releases_did():
    """Read as 0.4.7, a release whose parser registers all four (engines/sglang/server_flags.py: --enable-flashinfer-mla
    0.4.3-0.4.7, --dist-timeout from 0.4.3.post3, --disaggregation-ib-device from 0.4.5.post2, --enable-ep-moe
    0.4.0.post1-0.5.4)."""
    from k3plan.engines.release import parse_release

    q = parse_serve(
        SG_R1 + " --enable-ep-moe --enable-flashinfer-mla --dist-timeout 3600 --disaggregation-ib-device mlx5_0",
        platform="gpu",
        device_gib=139.8,
        device_name="nvidia-h200",
        release=parse_release("0.4.7"),
    )
    assert q.ep == 8  # --enable-ep-moe: ep_size = tp_size (ServerArgs.__post_init__ in the 0.4.x wheels)
    assert {"--enable-flashinfer-mla", "--dist-timeout", "--disaggregation-ib-device"} <= set(q.ignored)
    e5m2, e4m3 = (_h200(f"{SG_R1} --kv-cache-dtype {dt}").kv_dtype for dt in ("fp8_e5m2", "fp8_e4m3"))
    assert e5m2 == e4m3 == "fp8"


def test_sglang_s_runner_is_read_under_dp_attention_too(cli):
    cmd = (
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 4 --dp 4 --enable-dp-attention"
        " --mem-fraction-static 0.90 --moe-runner-backend "
    )
    auto, marlin = (
        json.loads(cli("fit", "-H", "nvidia-b300", "-t", "4", "--serve", cmd + runner, "--json").stdout)["engine"]
        for runner in ("auto", "marlin")
    )
    # Marlin keeps DeepSeek-V4's fp32 scales beside its own (engines/sglang/stack.yaml moe_runner_backend)
    assert marlin["weights_bytes"] > auto["weights_bytes"]


def test_sglang_s_start_check_runs_at_the_fraction_it_derives(cli):
    """Without --mem-fraction-static SGLang derives its fraction from the GPU, the split and the chunk; the start
    check reads the fraction the budget's reserve row prints, not a fixed 0.88: 0.886 on eight H200s in 0.5.23, the
    newest read (512 + 8,192 x 1.5 + 512 x 2 + 8 / 8 x 1,024 + DeepSeek-R1's breakable prefill graph, 1.5 x 1,024 for
    an MLA model: 16,384 of 143,771 MiB; engines/sglang/prefill_graph.py), 0.897 in 0.5.17, whose breakable graph is
    off for an MLA model."""
    derived, given = (
        json.loads(cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--json").stdout)["engine"]
        for cmd in (SG_R1, SG_R1 + " --mem-fraction-static 0.886")
    )
    assert derived["kv_pool_tokens"] == given["kv_pool_tokens"]
    derived, given = (
        json.loads(
            cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", "0.5.17", "--json").stdout
        )["engine"]
        for cmd in (SG_R1, SG_R1 + " --mem-fraction-static 0.897")
    )
    assert derived["kv_pool_tokens"] == given["kv_pool_tokens"]


def test_dp_attention_s_default_chunk_is_divided_like_a_given_one():
    """ServerArgs sets chunked_prefill_size's default by GPU memory before dividing it by dp_size (the 0.5.15
    wheel's __post_init__ order), so a command without the flag prefills 8,192 // 4 a DP rank on an H200."""
    base = (
        "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2-Instruct --tp 8 --dp 4 --enable-dp-attention"
    )
    assert _h200(base).chunk == _h200(base + " --chunked-prefill-size 8192").chunk == 2048


def test_under_serve_the_budget_s_unverified_temp_does_not_claim_exit_3(cli):
    out = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", R1)
    assert out.exit_code == 0 and "exit 3" not in out.stdout


def test_a_release_caveat_names_only_what_concerns_the_model():
    from k3plan.app.fit import _from_serve

    *_, sg = _from_serve(SG_R1, {"hardware": "nvidia-h200"}, 8192, None, engine_version="0.4.8")
    text = " ".join(sg.caveats)
    # only the rules that concern DeepSeek-R1: the derived fraction's graph cap, SGLang's for every model
    assert "DeepSeek-V4's pool form" not in text and "state (mamba) pool" not in text
    assert "default decode graph batch capped at --max-running-requests from 0.5.22" in text
    # 0.4.8 is read (engines/sglang/fraction_eras.py): its own default fraction, no "read no" caveat; 0.4.1 is not
    assert "SGLang 0.4.8's default" in text and "read no sglang release" not in text
    *_, older = _from_serve(SG_R1, {"hardware": "nvidia-h200"}, 8192, None, engine_version="0.4.1")
    assert "read no sglang release before 0.4.2" in " ".join(older.caveats)
    *_, v4 = _from_serve(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4",
        {"hardware": "nvidia-h200"},
        8192,
        None,
        engine_version="0.5.15",
    )
    assert "DeepSeek-V4's pool form" in " ".join(v4.caveats) and "read no" not in " ".join(v4.caveats)


def test_a_release_after_the_newest_read_says_it_is_priced_as_that_one(monkeypatch):
    """An engine ships releases after the newest k3plan read: a command naming one (and not refused by a rule of
    that release) is priced by the newest read's rules, and the answer says so, never silently. Here vLLM's newest
    read is taken back one minor release so the one after it is one k3plan reads."""
    import dataclasses

    import k3plan.app.fit as fit_app
    from k3plan.app.fit import _from_serve
    from k3plan.engines.registry import engine_rules
    from k3plan.engines.release import release_text

    real = engine_rules("vllm")
    assert real.newest_release_read is not None
    older = (real.newest_release_read[0], real.newest_release_read[1] - 1, 0)
    monkeypatch.setattr(
        fit_app,
        "engine_rules",
        lambda ref: dataclasses.replace(real, newest_release_read=older, latest_release_read=None),
    )
    *_, q = _from_serve(
        R1, {"hardware": "nvidia-h200"}, 8192, None, engine_version=release_text(real.newest_release_read)
    )
    text = " ".join(q.caveats)
    assert f"read no vllm release after {release_text(older)}, so this one is priced as {release_text(older)}" in text
    *_, same = _from_serve(R1, {"hardware": "nvidia-h200"}, 8192, None, engine_version=release_text(older))
    assert "read no vllm release after" not in " ".join(same.caveats)


def test_a_vllm_release_after_0_34_is_priced_as_0_34_the_newest_read_not_the_default(cli):
    """vLLM's default release (0.33.0, engines/vllm/releases.py NEWEST_RELEASE) is not the newest k3plan read: 0.34.0
    (NEWEST_READ) is read and priced under --engine-version. A later release is priced by 0.34.0's rules, and the
    caveat says 0.34.0, not the default (it said 'priced as 0.33.0' while pricing 0.34.0's extensible pool)."""
    from k3plan.engines.registry import engine_rules
    from k3plan.engines.vllm.releases import NEWEST_READ, NEWEST_RELEASE

    assert engine_rules("vllm").latest_release_read == NEWEST_READ > NEWEST_RELEASE
    cmd = "vllm serve deepseek-ai/DeepSeek-R1 -tp 8"

    def engine(version):
        r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", version, "--json")
        d = json.loads(r.stdout)
        return d["engine"], " ".join(d["engine"]["serve"]["caveats"])

    later, said = engine("0.35.0")
    at_034, said_034 = engine("0.34.0")
    assert later["kv_pool_bytes"] == at_034["kv_pool_bytes"] and later["starts"] is at_034["starts"]
    assert "read no vllm release after 0.34.0, so this one is priced as 0.34.0" in said
    assert "read no vllm release after" not in said_034
    default = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--json")
    assert "0.34.0, read too, is priced only under --engine-version 0.34.0" in " ".join(
        json.loads(default.stdout)["engine"]["serve"]["caveats"]
    )


def test_tpu_inference_s_additional_config_keys_are_read_or_refused_with_what_they_do():
    base = (
        "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=vllm vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 16 "
        '--max-model-len 5120 --max-num-batched-tokens 2048 --max-num-seqs 64 --additional-config \'{"sharding": {"sharding_strategy": {"enable_dp_attention": true}}%s}\''
    )
    q = parse_serve(base % ', "sparse_matmul": "True"', platform="tpu", device_gib=94.75, device_name="tpu-v7x")
    assert "--additional-config sparse_matmul" in q.ignored
    assert not any(i.startswith("NEW_MODEL_DESIGN") for i in q.ignored)  # read: the MLA models need it
    # nothing in tpu_inference reads it since #2135 (vllm-project/tpu-inference@350d3857): listed
    q = parse_serve(
        base % ', "replicate_attn_weights": "True"', platform="tpu", device_gib=94.75, device_name="tpu-v7x"
    )
    assert "--additional-config replicate_attn_weights" in q.ignored


@pytest.mark.parametrize(("release", "chunk"), [(None, 16384), ((0, 27, 0), 8192), ((0, 28, 0), 16384)])
def test_vllm_0_28_s_default_token_budget_on_a_160_gib_gpu(release, chunk):
    """vllm-project/vllm#51726 (first in 0.28.0): a device of >= 160 GiB gets 16,384 batched tokens by default, an
    MI300X (191.98 GiB) among them (vllm-project/vllm#53961); an H200 keeps 8,192. A command that names no release is
    read as the newest k3plan read (engines/vllm/releases.py NEWEST_RELEASE, 0.31.0), which has the tier."""
    cmd = "vllm serve deepseek-ai/DeepSeek-V4-Pro -tp 8"
    q = parse_serve(cmd, platform="gpu", device_gib=191.98, device_name="amd-mi300x", release=release)
    assert (q.chunk, q.batch) == (chunk, 1024)
    assert parse_serve(cmd, platform="gpu", device_gib=139.8, device_name="nvidia-h200", release=release).chunk == 8192


# Public commands a sweep of 121 (InferenceX @843c6254 single-node scripts, vllm-project/recipes @8959cf64, issue
# threads) found refused for flags the engines accept (session 43)
def test_sglang_takes_an_unambiguous_prefix_of_its_flag_and_refuses_an_ambiguous_one():
    """SGLang's parser leaves argparse's allow_abbrev on (engines/sglang/server_flags.py, read from the 0.4.0-0.5.23
    wheels): sgl-project/sglang#15608 passes --context-len for --context-length; --tokenizer matches six flags."""
    q = _h200("python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2-Thinking --tp 8 --context-len 131072")
    assert (q.context, q.tp) == (131_072, 8)
    with_eq = _h200(
        "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2-Thinking --tp 8 --context-len=4096"
    )
    assert with_eq.context == 4096
    with pytest.raises(K3PlanError, match=r"ambiguous option: --tokenizer could match --tokenizer-backend"):
        _h200(SG_R1 + " --tokenizer deepseek-ai/DeepSeek-R1")


def test_vllm_takes_an_unambiguous_prefix_of_its_flag_and_refuses_an_ambiguous_one():
    """vLLM's FlexibleArgumentParser leaves argparse's allow_abbrev on (vllm/utils/argparse_utils.py of the 0.11.2-
    0.34.0 wheels (PyPI), none sets it; engines/vllm/serve_flags.py holds each release's options): the prefix is
    matched after the underscores are read as dashes and the dotted flags folded (parse_args, then argparse), with or
    without '='; a prefix of several options is argparse's 'ambiguous option' (exit 2), over the options of the
    release the command is read as: --cudag is --cudagraph-capture-sizes in 0.11.2, whose parser has no
    --cudagraph-metrics (first in the 0.13.0 wheel)."""
    from k3plan.engines.release import parse_release
    from k3plan.engines.vllm.serve import OPTIONS

    for extra in (" --max-model 4096", " --max_model=4096", " --max-model-l=4096"):
        assert _h200(R1 + extra).context == 4096, extra
    assert _h200(R1 + " --max-model-len 4096 --max-model 8192").context == 8192  # argparse keeps the last
    q = _h200(R1 + " --no-enable-prefix")  # --no-enable-prefix-caching, a switch: takes no value
    assert "--no-enable-prefix-caching" in q.ignored
    with pytest.raises(K3PlanError, match=r"ambiguous option: --max-num could match --max-num-active-seqs, "):
        _h200(R1 + " --max-num 64")
    with pytest.raises(K3PlanError, match=r"--cudag could match --cudagraph-capture-sizes, --cudagraph-metrics"):
        _h200(R1 + " --cudag 1 2 4")
    old = parse_release("0.11.2")
    assert "--cudagraph-metrics" not in OPTIONS.options(old)[0]
    assert "--cudagraph-metrics" in OPTIONS.options(parse_release("0.13.0"))[0]
    assert "--cudagraph-capture-sizes" in OPTIONS.options(old)[0]
    # every flag k3plan writes in a launch line is one of every release's options
    from k3plan.engines.flags import FLAG_SOURCES

    for release in OPTIONS.releases:
        assert set(FLAG_SOURCES["vllm"]) <= OPTIONS.options(parse_release(release))[0], release


def test_sglang_s_device_flag_is_its_default_on_a_gpu():
    """sgl-project/sglang#15784's CI command passes --device cuda, what SGLang detects on NVIDIA and ROCm GPUs."""
    assert _h200(SG_R1 + " --device cuda").tp == 8
    with pytest.raises(K3PlanError, match="--device npu: k3plan prices SGLang on CUDA / ROCm GPUs"):
        _h200(SG_R1 + " --device npu")


def test_deepseek_v4_s_shared_expert_fusion_is_off_by_default_in_sglang():
    """InferenceX's DeepSeek-V4-Pro SGLang lines (dsv4_fp4_mi355x_sglang.sh, agentic dsv4_fp4_b300_sglang_mtp.sh) pass
    --disable-shared-experts-fusion: DeepSeek-V4's model fuses only under --enforce-shared-experts-fusion (0.5.15
    models/deepseek_v4.py), so it has no memory effect there; DeepSeek-R1's fuses by default, one more expert TP-split
    like the routed ones on an NVIDIA GPU without EP: 1/tp of it a GPU, what the unfused MLP holds (engines/sglang/serve.py
    shared_fusion; tests/engines/test_sglang_large_ep_flags.py prices where it differs)."""
    v4 = _h200(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --disable-shared-experts-fusion"
    )
    assert "--disable-shared-experts-fusion" in v4.ignored
    assert "--disable-shared-experts-fusion" in _h200(SG_R1 + " --disable-shared-experts-fusion").ignored


def test_vllm_s_runner_and_host_address():
    """vllm-project/vllm#41027 passes --runner generate (what auto resolves to for a generation model);
    vllm-project/recipes#698's K3 command sets VLLM_HOST_IP (the address a node's workers advertise)."""
    assert _h200(R1 + " --runner generate").tp == 8
    assert _h200("VLLM_HOST_IP=10.0.0.1 " + R1).tp == 8
    with pytest.raises(K3PlanError, match="--runner pooling: k3plan prices vLLM's generate runner"):
        _h200(R1 + " --runner pooling")


@pytest.mark.parametrize(
    ("value", "got"), [("10000000000", 10_000_000_000), ("10g", 10_000_000_000), ("10G", 10 * 2**30), ("1T", 2**40)]
)
def test_vllm_s_kv_cache_memory_bytes_is_the_pool_as_given(value, got):
    """vllm-project/recipes' DeepSeek-V4-Flash MI325X command (models/deepseek-ai/DeepSeek-V4-Flash.yaml, validated on
    0.25.0) sets --kv-cache-memory-bytes 10000000000: the worker returns it as the available KV memory after a profile
    run, gpu_memory_utilization ignored (vllm 0.31.0 wheel CacheConfig, Worker.determine_available_memory)."""
    assert _h200(f"{R1} --kv-cache-memory-bytes {value}").kv_cache_memory_bytes == got


def test_the_engine_s_pool_is_the_bytes_given_and_too_many_do_not_start(cli):
    cmd = (
        "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 1 --kv-cache-dtype fp8_e4m3 --max-model-len 4096"
        " --max-num-batched-tokens 256 --kv-cache-memory-bytes 10000000000 --trust-remote-code"
        " --moe-backend triton_unfused --enforce-eager"
    )
    r = cli("fit", "-H", "amd-mi325x", "-t", "1", "--serve", cmd, "--engine-version", "0.25.0", "--json")
    eng = json.loads(r.stdout)["engine"]
    assert r.exit_code == 0 and eng["kv_pool_bytes"] == 10_000_000_000
    assert "--kv-cache-memory-bytes 10,000,000,000 B, the pool as given" in eng["sources"]["kv_pool"]
    over = cli("fit", "-H", "amd-mi325x", "-t", "1", "--serve", cmd.replace("10000000000", "200G"), "--json")
    assert over.exit_code == 1
    assert (
        "CUDA out of memory: the KV cache of --kv-cache-memory-bytes 200.00 GiB"
        in json.loads(over.stdout)["engine"]["message"]
    )
    for bad in ("10x", "-5", "2000T"):
        r = cli("fit", "-H", "amd-mi325x", "-t", "1", "--serve", cmd.replace("10000000000", bad))
        assert r.exit_code == 2 and "--kv-cache-memory-bytes" in r.output and len(r.output.strip().splitlines()) == 1


# InferenceX's DeepSeek-V4-Pro MTP nightlies on B300 (SemiAnalysisAI/InferenceX@843c6254
# benchmarks/single_node/fixed_seq_len/dsv4_fp4_b300_sglang_mtp.sh with configs/nvidia-master.yaml's first
# search-space row), the flag at the end
V4_FP4_INDEXER = (
    "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --tp 8 --ep-size 1"
    " --chunked-prefill-size 8192 --max-running-requests 12 --mem-fraction-static 0.90 --swa-full-tokens-ratio 0.1"
    " --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1"
    " --speculative-num-draft-tokens 4 --moe-runner-backend flashinfer_mxfp4 --disable-flashinfer-autotune"
    " --enable-deepseek-v4-fp4-indexer"
)


@pytest.mark.parametrize("hardware", ["nvidia-b200", "nvidia-b300", "nvidia-gb200-nvl72", "nvidia-gb300-nvl72"])
def test_sglang_s_fp4_indexer_on_sm100_leaves_the_pool_as_without_it(cli, hardware):
    """DSV4PoolConfigurator prices a c4 index key at FP8's 132 B on NVIDIA with or without
    --enable-deepseek-v4-fp4-indexer (sglang 0.5.15 / 0.5.17 wheels _get_bytes_per_full_token; 0.5.20-0.5.23 'The
    NVIDIA FP4 path keeps the FP8 estimate'): on an SM100 GPU the flag is listed as ignored and the engine's pool is
    the one without it."""
    with_flag, without = (
        cli("fit", "-H", hardware, "-t", "8", "--serve", cmd, "--json")
        for cmd in (V4_FP4_INDEXER, V4_FP4_INDEXER.replace(" --enable-deepseek-v4-fp4-indexer", ""))
    )
    assert with_flag.exit_code == without.exit_code == 0, with_flag.output
    eng, base = (json.loads(r.stdout)["engine"] for r in (with_flag, without))
    assert (eng["kv_pool_tokens"], eng["kv_pool_bytes"]) == (base["kv_pool_tokens"], base["kv_pool_bytes"])
    listed = [
        line
        for line in cli("fit", "-H", hardware, "-t", "8", "--serve", V4_FP4_INDEXER).output.splitlines()
        if line.startswith("serve flags ignored")
    ]
    assert listed and "--enable-deepseek-v4-fp4-indexer" in listed[0]


@pytest.mark.parametrize(
    ("hardware", "release", "says"),
    [
        ("nvidia-h200", "0.5.15", "'ValueError: --enable-deepseek-v4-fp4-indexer requires SM100 GPUs with DeepGEMM"),
        ("nvidia-h100-sxm", "0.5.16", "requires SM100 GPUs with DeepGEMM FP4 indexer support.' .sglang 0.5.15 wheel"),
        ("nvidia-h20", "0.5.17", "requires SM100 or SM120 GPUs with DeepGEMM .* ServerArgs._handle_environment_var"),
        ("nvidia-h200", "0.5.19", "requires SM100 or SM120 GPUs .*/arg_groups/serving_hook.py"),
        ("nvidia-h200", "0.5.23", "requires SM100, SM120, or gfx95 GPUs with FP4 indexer support"),
        ("amd-mi355x", "0.5.19", "requires SM100 or SM120 GPUs"),
        ("amd-mi325x", "0.5.23", "requires SM100, SM120, or gfx95 GPUs"),
        (
            "amd-mi355x",
            "0.5.23",
            "indexer's c4 keys at FP4's bytes on HIP .* is not priced by k3plan .SGLang 0.5.20 on",
        ),
    ],
)
def test_sglang_s_fp4_indexer_elsewhere_is_refused_as_sglang_refuses_it(hardware, release, says):
    """Off SM100 SGLang raises a ValueError at start (its text by release: sglang 0.5.15, 0.5.17, 0.5.19, 0.5.20
    wheels); on gfx95 from 0.5.20 it runs, the c4 index keys priced at FP4's bytes with HIP workspaces k3plan does not
    model."""
    from k3plan.engines.release import parse_release
    from k3plan.hardware import load_hardware
    from k3plan.units import GiB

    hw = load_hardware(hardware)
    with pytest.raises(K3PlanError, match=says):
        parse_serve(
            V4_FP4_INDEXER,
            platform=hw.kind,
            device_gib=hw.usable_bytes_per_device / GiB,
            device_name=hw.name,
            release=parse_release(release),
        )


def test_sglang_s_options_are_those_of_the_release_read():
    """engines/sglang/server_flags.py holds the options of the 0.4.0-0.5.23 parsers (the sglang wheels (PyPI),
    server_args.py and from 0.5.20 arg_groups/fields/*.py) with the releases of each not in all of them: 0.5.19
    registers --cuda-graph-max-bs as a deprecated alias of --cuda-graph-max-bs-decode (server_args.py add_cli_args,
    DeprecatedAliasStoreAction); 0.5.20 dropped it, and its argparse reads the old flag as an ambiguous prefix of
    --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill. A GPU command that names no release is read as the
    newest read, 0.5.23 (engines/sglang/releases.py NEWEST_RELEASE), whose parser refuses it, the refusal saying which
    release was read and how an older one is named; the union of the releases' options is read where no release is
    (release_options(None))."""
    from k3plan.engines.release import parse_release
    from k3plan.engines.sglang.serve import release_options, unabbreviated

    cmd = SG_R1 + " --cuda-graph-max-bs 10"
    for release in ("0.5.15", "0.5.19"):
        q = parse_serve(
            cmd,
            platform="gpu",
            device_gib=139.8,
            device_name="nvidia-h200",
            release=parse_release(release),
        )
        assert q.decode_graph_bs == 10  # read: without --mem-fraction-static the derived fraction reserves for it
    assert unabbreviated("--cuda-graph-max-bs", *release_options(None)) == "--cuda-graph-max-bs"
    for release in (None, "0.5.20", "0.5.23", "0.6.0"):
        with pytest.raises(
            K3PlanError,
            match=r"--cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ) as refused:
            parse_serve(
                cmd,
                platform="gpu",
                device_gib=139.8,
                device_name="nvidia-h200",
                release=None if release is None else parse_release(release),
            )
        said = "read as sglang 0.5.23, the newest release k3plan read: a command of an older release names it with"
        assert (said in str(refused.value)) is (release is None)


def test_sglang_s_dp_lm_head_is_what_k3plan_prices_under_dp_attention():
    """--enable-dp-lm-head (InferenceX's DeepSeek-R1 FP4 DP-attention nightlies) splits the LM head over the
    attention-TP group, as k3plan's dp-attention stack holds the vocabulary; without it under DP attention SGLang
    splits the head over the whole TP group, which the command sets on the stack (ServeQuestion.lm_head_whole_tp,
    cited: the bytes in tests/engines/test_sglang_dp_lm_head.py); with --dp-size > 1 and no DP attention SGLang's own
    assertion stops the start."""
    base = (
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 --dp 8 --enable-dp-attention"
        " --ep-size 8"
    )
    on, off = _h200(base + " --enable-dp-lm-head"), _h200(base)
    assert "--enable-dp-lm-head" not in on.ignored and on.lm_head_whole_tp is None
    assert off.lm_head_whole_tp is not None and "whole TP group" in off.lm_head_whole_tp.holds
    assert not any("LM head" in c for c in (*on.caveats, *off.caveats))
    assert on.stack == off.stack and on.stack_options == off.stack_options
    assert "--enable-dp-lm-head" in _h200(SG_R1 + " --enable-dp-lm-head").ignored  # dp 1: SGLang turns it off
    with pytest.raises(K3PlanError, match="Please enable dp attention when setting enable_dp_lm_head"):
        _h200(SG_R1.replace("--tp 8", "--tp 4 --dp 2") + " --enable-dp-lm-head")
