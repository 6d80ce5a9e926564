"""DeepSeek-V4.1's DSpark drafter through `vllm serve --speculative-config '{"method":"dspark",...}'` (issue 47 item 2:
the engines' own nightly lines read, k3plan.engines.vllm.spec DSPARK_SOURCE). The line is SemiAnalysisAI/InferenceX's
V4.1 AgentX arm (benchmarks/single_node/agentic/dsv41flash_fp4_vllm_mtp.sh, at concurrency 1: capture size 8)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.vllm.spec import draft_pricing, read_speculative
from k3plan.models.loader import load_model

SPEC = (
    '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic",'
    '"rejection_sample_method":"synthetic","synthetic_acceptance_length":3.51,"enable_adaptive_verification":false}'
)


def inferencex_v41(tp: int, *, dspark: bool = True) -> str:
    return (
        "vllm serve deepseek-ai/DeepSeek-V4.1-Flash --served-model-name deepseek-ai/DeepSeek-V4.1-Flash --host 0.0.0.0 "
        f"--port 8888 --tensor-parallel-size {tp} --language-model-only --tokenizer-mode deepseek_v41 "
        "--tool-call-parser deepseek_v41 --enable-auto-tool-choice --reasoning-parser deepseek_v41 "
        """--engram-config '{"cpu_offload":true}' """
        + (f"--speculative-config '{SPEC}' " if dspark else "")
        + "--max-model-len 1048576 --max-cudagraph-capture-size 8 --disable-uvicorn-access-log"
    )


def _engine(cli, hardware: str, serve: str) -> dict:
    r = cli("fit", "-H", hardware, "--serve", serve, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_the_dspark_stages_are_the_draft_weights_split_as_vllm_builds_them():
    """The three DSpark stages of the checkpoint index: experts over the expert group, attention, shared experts and
    the Markov head over TP, main_proj / norms / hyper-connection / confidence heads whole, and the index buffer."""
    m = load_model("deepseek-v4.1-flash")
    spec = read_speculative({"--speculative-config": SPEC}.get, "deepseek-ai/DeepSeek-V4.1-Flash")
    assert (spec.method, spec.num_speculative_tokens) == ("dspark", 5)
    d8 = draft_pricing(spec, m, tp=8, ep=8, max_num_batched_tokens=8192)
    d1 = draft_pricing(spec, m, tp=1, ep=1, max_num_batched_tokens=8192)
    mtp = m.inventory.of_kind("mtp")
    whole = sum(t.nbytes for t in mtp) + 8192 * m.spec.dsv4.index_topk * 4
    assert d1.bytes_per_device == whole  # one rank holds every stage and the buffer
    # at TP 8 the experts and TP-split tensors shrink 8x; the whole part (main_proj 75 MiB among it) does not
    main_proj = next(t.nbytes for t in mtp if "main_proj" in t.name)
    assert whole / 8 + main_proj * 7 / 8 < d8.bytes_per_device < whole / 8 + 0.1 * 2**30
    assert d8.dsv4_mtp_ratios == (0, 0, 0) and d8.num_speculative_tokens == 5
    assert "DSpark stages" in d8.source and "dspark.py @03435722" in d8.source


def test_the_inferencex_v41_line_reads_and_the_draft_adds_its_weights_and_windows(cli):
    plain = _engine(cli, "nvidia-h200", inferencex_v41(8, dspark=False))
    dspark = _engine(cli, "nvidia-h200", inferencex_v41(8))
    extra = dspark["weights_bytes"] - plain["weights_bytes"]
    # the target keeps its pre-hc_head hidden states for the drafter (DeepseekV4Model._mtp_hidden_buffer: dspark is
    # use_eagle()): max_num_batched_tokens (8,192 here) x hc_mult x hidden bf16, 0.25 GiB
    d = load_model("deepseek-v4.1-flash").spec
    hidden = 8192 * d.dsv4.hc_mult * d.hidden_size * 2
    assert "_mtp_hidden_buffer 8,192 x" in dspark["sources"]["weights"]
    assert "_mtp_hidden_buffer 8,192 x" not in plain["sources"]["weights"]
    # the rest, ~1.3 GiB a device at TP 8: the 3 stages (~1 GiB), their experts' shards padded 288 -> 384 as the
    # target's (engines/vllm/moe_padding.py MOE_SHARD_RULES)
    assert 1.2 * 2**30 < extra - hidden < 1.4 * 2**30
    assert "DSpark stages" in dspark["sources"]["weights"]
    # the three draft layers' windows: 43 windowed caches in cdiv(43, 6) = 8 groups (40 in 7 without the drafter), six
    # 19,008-B window pages to the compressed group's 116,928-B block (the packed groups of 0.30.0-0.33.0, the newest
    # read: engines/vllm/dsv4_pages.py V41_PACKED_SOURCE; 11 and 10 groups of 4 on main's planner reading)
    assert "window[7]" in dspark["sources"]["num_blocks"] and "window[7]" not in plain["sources"]["num_blocks"]


def test_dspark_on_a_checkpoint_without_dspark_stages_and_mtp_on_one_with_them_are_refused(cli):
    r = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "--serve",
        f"vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --speculative-config '{SPEC}'",
    )
    assert r.exit_code == 2 and "ships no DSpark stages" in r.output and len(r.output.strip().splitlines()) == 1
    r = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "--serve",
        "vllm serve deepseek-ai/DeepSeek-V4.1-Flash -tp 8 --language-model-only "
        """--speculative-config '{"method":"mtp","num_speculative_tokens":3}'""",
    )
    assert r.exit_code == 2 and "expected method dspark" in r.output


@pytest.mark.parametrize("key", ["synthetic_acceptance_length", "enable_adaptive_verification"])
def test_dspark_s_acceptance_keys_are_read_as_having_no_memory_effect(key):
    spec = read_speculative(
        {"--speculative-config": json.dumps({"method": "dspark", "num_speculative_tokens": 3, key: 1})}.get,
        "deepseek-ai/DeepSeek-V4.1-Flash",
    )
    assert spec is not None and spec.method == "dspark"


def test_the_sequences_line_names_the_engine_s_bytes_a_request(cli):
    """One answer, two counts (issue 47 item 4): the line that says why k3plan's budget and the engine differ names
    what one max_model_len request costs the engine, here vLLM's V4.1 records and page groups."""
    r = cli("fit", "-H", "nvidia-h200", "--serve", inferencex_v41(8))
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and text.startswith("STARTS: KV pool")
    assert "in DeepSeek-V4's page groups, in the engine's own records" in text
    assert "the engine's request takes" in text


K3_B300 = (
    "NCCL_DMABUF_ENABLE=0 VLLM_ALLREDUCE_USE_FLASHINFER=1 VLLM_USE_RUST_FRONTEND=1 VLLM_ENGINE_READY_TIMEOUT_S=3600 "
    "vllm serve moonshotai/Kimi-K3 --host 0.0.0.0 --port 8888 --tensor-parallel-size 8 --data-parallel-size 1 "
    "--pipeline-parallel-size 1 --trust-remote-code --load-format fastsafetensors --moe-backend auto "
    "--enable-prefix-caching --kv-cache-dtype fp8 --reasoning-parser kimi_k3 --tool-call-parser kimi_k3 "
    "--enable-auto-tool-choice --gpu-memory-utilization 0.9 --max-num-seqs 64 --max-model-len 131072 "
    "--max-cudagraph-capture-size 256 "
    """--attention-config '{"mla_prefill_backend":"FLASHINFER","use_prefill_query_quantization":true}'"""
)


def test_inferencex_s_kimi_k3_line_reads_and_its_separate_dspark_is_refused_by_name(cli):
    """SemiAnalysisAI/InferenceX benchmarks/single_node/speedbench/kimik3_fp4_b300_vllm.sh @843c6254: the serve
    line and its environment read; its drafter, a separate checkpoint (Inferact/Kimi-K3-DSpark), is refused by name."""
    r = cli("fit", "-H", "nvidia-b300", "--serve", K3_B300)
    assert r.exit_code == 0 and r.output.startswith("STARTS"), r.output[:300]
    spec = (
        """ --speculative-config '{"method": "dspark", "model": "Inferact/Kimi-K3-DSpark", """
        """"num_speculative_tokens": 3, "attention_backend": "FLASHINFER_MLA"}'"""
    )
    r = cli("fit", "-H", "nvidia-b300", "--serve", K3_B300 + spec)
    assert r.exit_code == 2 and "a separate DSpark checkpoint is not priced" in r.output
