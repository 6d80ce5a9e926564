"""The vLLM rules that changed in the 0.32.0-0.34.0 wheels (PyPI), each gated on the release it changed in
(engines/vllm/__init__.py Engine.by_release): what ``fit --engine-version`` reads for a command of that release."""

from __future__ import annotations

import pytest

from k3plan.models.loader import load_model


@pytest.fixture(scope="module")
def v4():
    return load_model("deepseek-v4-flash").spec.dsv4


@pytest.fixture(scope="module")
def v41():
    return load_model("deepseek-v4.1-flash").spec.dsv4


def _gather(t: int, values: int, scales: int) -> int:
    up = lambda n: -(-n // 256) * 256  # noqa: E731 - WorkspaceManager.get_simultaneous's 256 B views
    return up(t * values) + up(t * scales) + up(2**20)


def test_from_0_32_the_indexer_s_prefill_buffer_is_16_x_max_model_len_above_256k_tokens(v4):
    """vllm 0.32.0 wheel (PyPI), vllm/v1/attention/backends/mla/indexer.py get_max_prefill_buffer_size: max_model_len x
    (576 x 2 // 132) x AttentionConfig.sparse_mla_prefill_workspace_factor, which vllm/config/vllm.py
    VllmConfig.__post_init__ resolves to 5 up to 256K tokens and 2 above (0.31.0's: max_model_len x 40 flat). V4-Flash's
    CSA indexer at 1M tokens reserves 16 x 1,048,576 // 4 keys of 128 fp8 + 4 B from 0.32.0, 40 x before."""
    from k3plan.engines.vllm.dsv4_workspace import dsv4_profile_workspace

    n = 1_048_576
    old, _, _ = dsv4_profile_workspace(v4, max_model_len=n, max_num_batched_tokens=8192, release=(0, 31, 0))
    new, _, how = dsv4_profile_workspace(v4, max_model_len=n, max_num_batched_tokens=8192, release=(0, 32, 0))
    assert old == _gather(40 * n // 4, 128, 4)
    assert new == max(_gather(16 * n // 4, 128, 4), -(-4 * (n // 4 + v4.sliding_window + 8192) * 512 * 2 // 256) * 256)
    assert "0.32.0 wheel" in how
    # up to 256K tokens the factor is 5: 40 x max_model_len, as before
    short = 262_144
    assert (
        dsv4_profile_workspace(v4, max_model_len=short, max_num_batched_tokens=8192, release=(0, 33, 0))[0]
        == (dsv4_profile_workspace(v4, max_model_len=short, max_num_batched_tokens=8192, release=(0, 31, 0))[0])
    )


def test_from_0_32_v4_1_s_index_source_gather_shrinks_the_same_way(v41):
    from k3plan.engines.vllm.dsv4_workspace import dsv41_profile_workspace

    n = 1_048_576
    old, _, _ = dsv41_profile_workspace(v41, max_model_len=n, fp4_indexer=False, release=(0, 31, 0))
    new, _, _ = dsv41_profile_workspace(v41, max_model_len=n, fp4_indexer=False, release=(0, 32, 0))
    assert (old, new) == (40 * n * 132 + 2**20, 16 * n * 132 + 2**20)  # ratio-1 index sources


def test_v4_1_s_attention_reserves_its_gather_in_the_same_buffer_the_larger_from_0_32_at_1m(v41):
    """vllm 0.30.0-0.34.0 wheels (PyPI), vllm/models/deepseek_v41/nvidia/flashmla.py forward_mqa's warmup dummy run
    (and nvidia/flash_mla_mega_attn.py _reserve_prefill_workspace, SM100's default from 0.31.0): (4, cdiv(max_model_len,
    ratio) + window + max_num_batched_tokens, 512) bf16 + (tokens, round_up(index_topk + window, 128)) int32 +
    (tokens,) int32 in the WorkspaceManager buffer the indexer's gather shares. A ratio-1 layer at 1M tokens and 8,192
    asks 4.05 GiB: under 0.31.0's 40 x gather (5.16 GiB), over 0.32.0's 16 x (2.06 GiB)."""
    from k3plan.engines.vllm.dsv4_workspace import dsv41_profile_workspace

    n, t = 1_048_576, 8192
    up = lambda x: -(-x // 256) * 256  # noqa: E731
    attention = up(4 * (n + 128 + t) * 512 * 2) + up(t * 640 * 4) + up(t * 4)
    old, _, _ = dsv41_profile_workspace(
        v41, max_model_len=n, fp4_indexer=False, release=(0, 31, 0), max_num_batched_tokens=t
    )
    new, _, how = dsv41_profile_workspace(
        v41, max_model_len=n, fp4_indexer=False, release=(0, 33, 0), max_num_batched_tokens=t
    )
    assert old == 40 * n * 132 + 2**20 > attention
    assert new == attention > 16 * n * 132 + 2**20
    assert "the attention's dummy-run reservation 4.05 GiB at ratio 1" in how
    # before 0.30.0 (no V4.1 in the wheels) or without the token budget: the gather alone, as before
    assert (
        dsv41_profile_workspace(v41, max_model_len=n, fp4_indexer=False, release=(0, 33, 0))[0] == 16 * n * 132 + 2**20
    )


def test_the_wheels_attention_config_fields_are_read_or_refused_by_name():
    """vllm 0.31.0-0.34.0 wheels (PyPI), vllm/config/attention.py AttentionConfig: kernel choices are read as such
    (0.33.0's trtllm_ragged_backend, 0.34.0's sparse_mla_shard_q); a field that sizes a buffer is refused with what it
    does (0.32.0's sparse_mla_prefill_workspace_factor), not as unknown."""
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    base = "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 4 --kv-cache-dtype fp8 --attention-config "
    q = parse_serve(base + """'{"trtllm_ragged_backend": "cute-dsl", "sparse_mla_shard_q": false}'""", platform="gpu")
    assert "--attention-config" in q.ignored
    with pytest.raises(K3PlanError, match="sparse_mla_prefill_workspace_factor 3: the sparse-MLA prefill workspace"):
        parse_serve(base + """'{"sparse_mla_prefill_workspace_factor": 3}'""", platform="gpu")
    # vLLM's own default of a refused field changes nothing
    assert parse_serve(base + """'{"indexer_logits_dtype": "auto"}'""", platform="gpu").attention


@pytest.mark.parametrize(("nvfp4", "align"), [(False, 528), (True, 3168)])
def test_from_0_33_a_v4_1_block_on_sm100_is_whole_rows_of_both_records(v41, nvfp4, align):
    """vllm 0.33.0 wheel (PyPI), vllm/models/deepseek_v41/attention.py DeepseekV4Attention.__init__: on the MXFP8 record
    the window cache's block stride alignment is lcm(528, the compressed record: 528, or nvfp4_ds_mla's 288), and
    v1/core/kv_cache_planning.py _get_kv_cache_bytes_per_block rounds a block up to it (0.32.0: no such alignment).
    With the MXFP4 indexer's 68 B keys the packed block (the largest group's pages: dsv4_pages.V41_PACKED_SOURCE) is no
    multiple of 528 before. From 0.34.0 the index keys' 256-B stride too (indexer_sparse_logits on by default on SM100:
    dsv4_pages.V41_SPARSE_LOGITS_SOURCE): lcm(528, 256) = 8,448, lcm(3,168, 256) = 25,344."""
    import math

    from k3plan.engines.vllm.dsv4_pages import dsv41_pages

    kw = dict(block_tokens=128, sm100=True, nvfp4=nvfp4, fp4_indexer=True)
    old = dsv41_pages(v41, release=(0, 32, 0), **kw)
    new = dsv41_pages(v41, release=(0, 33, 0), **kw)
    assert old.groups == new.groups and old.block_bytes == max(sum(g.pages) for g in old.groups)
    assert old.block_bytes % align
    assert new.block_bytes == -(-old.block_bytes // align) * align
    assert new.check_block_bytes == new.block_bytes
    newest = dsv41_pages(v41, release=(0, 34, 0), **kw)
    assert newest.groups == old.groups
    assert newest.block_bytes == -(-old.block_bytes // math.lcm(align, 256)) * math.lcm(align, 256)
    # Hopper keeps V4's record: no stride alignment
    hopper = dict(kw, sm100=False, nvfp4=False, block_tokens=64)
    assert (
        dsv41_pages(v41, release=(0, 34, 0), **hopper).block_bytes
        == dsv41_pages(v41, release=(0, 33, 0), **hopper).block_bytes
        == dsv41_pages(v41, release=(0, 32, 0), **hopper).block_bytes
    )


K3 = "vllm serve moonshotai/Kimi-K3 -tp 8 --enable-expert-parallel"


@pytest.mark.parametrize(
    "flags",
    [
        "--grpc-port 50051",  # FrontendArgs.grpc_port, 0.32.0
        """--reasoning-effort-map '{"high": "max"}'""",  # BaseFrontendArgs.reasoning_effort_map, 0.33.0
        "--enable-hc-sp --custom-histogram-buckets '{}' --no-enable-shm-tensor-arena",  # 0.32.0
        "--sleep-mode-offload-cudagraph --sleep-mode-backend cumem --watchdog-config '{}'",  # 0.32.0 / 0.33.0
        "--cache-aware-admission-window 4 --max-num-inflight-kv-loads 8 --shuffle-safetensors-files",  # 0.34.0
    ],
)
def test_the_newer_releases_flags_that_hold_nothing_are_read_and_ignored(flags):
    """vllm 0.32.0-0.34.0 wheels (PyPI), vllm/engine/arg_utils.py EngineArgs and vllm/entrypoints/common/cli_args.py
    FrontendArgs: the flags they add that hold nothing on a GPU are named as read and ignored, not refused as unknown."""
    from k3plan.engines.serve import parse_serve

    q = parse_serve(f"{K3} {flags}", platform="gpu")
    assert all(f in q.ignored for f in flags.split() if f.startswith("--"))


def test_swa_bounded_replay_is_read_and_ignored_its_pool_unchanged():
    """vllm 0.31.0 wheel (PyPI): vllm/config/cache.py CacheConfig.swa_bounded_replay (DeepSeek-V4.1's sliding-window
    KV kept out of prefix caching and replayed) reaches only SlidingWindowMLASpec.prefix_cacheable /
    prefix_replay_tokens (vllm/v1/kv_cache_interface.py, read by the scheduler and the KV manager), not the pool's
    sizing, and vllm/models/deepseek_v41/attention.py turns it off on ROCm; InferenceX's MI300X arm passes
    --no-swa-bounded-replay (SemiAnalysisAI/InferenceX@0e01a6eb benchmarks/single_node/agentic/
    dsv41flash_fp4_mi300x_mtp.sh)."""
    from k3plan.engines.serve import parse_serve

    for flag in ("--swa-bounded-replay", "--no-swa-bounded-replay"):
        assert flag in parse_serve(f"{K3} {flag}", platform="gpu").ignored


def test_the_monokernel_is_refused_with_what_it_is():
    """vllm 0.33.0 wheel (PyPI), vllm/config/kernel.py KernelConfig.monokernel: a persistent decode kernel whose
    buffers were not read."""
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    with pytest.raises(K3PlanError, match="MonoKernel"):
        parse_serve(f"{K3} --monokernel", platform="gpu")
    assert parse_serve(f"{K3} --no-monokernel", platform="gpu").model


def test_a_0_34_command_is_priced_its_unread_configurations_refused(cli):
    """vllm 0.34.0 wheel (PyPI): the extensible KV cache (on by default on CUDA and ROCm) is priced
    (engines/vllm/extensible.py, tests/engines/test_vllm_034_pool.py); what turns it off onto the estimate path, or
    hands it to a KV connector (vllm/config/vllm.py VllmConfig._resolve_extensible_kv_cache), is refused in one line."""
    r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", K3, "--engine-version", "0.34.0")
    assert r.exit_code in (0, 1) and "extensible" not in r.output.splitlines()[0].lower()
    for extra in ("--no-enable-extensible-kv-cache", "--num-gpu-blocks-override 100", "--kv-transfer-config '{}'"):
        r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", f"{K3} {extra}", "--engine-version", "0.34.0")
        assert r.exit_code == 2 and "has not read" in r.output and len(r.output.strip().splitlines()) == 1, extra
    # the switch is 0.34.0's: an older release refuses it
    r = cli(
        "fit",
        "-H",
        "nvidia-b200",
        "-t",
        "8",
        "--serve",
        f"{K3} --enable-extensible-kv-cache",
        "--engine-version",
        "0.33.0",
    )
    assert r.exit_code == 2 and "0.34.0 option" in r.output


def test_the_wheels_use_thp_is_read_as_thp_packing():
    """vllm 0.31.0-0.34.0 wheels (PyPI), vllm/config/engram.py EngramConfig.use_thp ('Back private CPU-offloaded tables
    with transparent huge pages ... Requires cpu_offload without dp_shared_memory'): the host pages' kind, the field
    @13ab20ec named thp_packing; refused alike without cpu_offload, in the wheels' words."""
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    v41 = "vllm serve deepseek-ai/DeepSeek-V4.1-Flash --language-model-only -tp 8 --engram-config "
    assert parse_serve(v41 + """'{"use_thp": true}'""", platform="gpu").engram == "host"
    with pytest.raises(K3PlanError, match="use_thp requires"):
        parse_serve(v41 + """'{"use_thp": true, "cpu_offload": false}'""", platform="gpu")


def test_from_0_33_a_switch_s_inverse_spelling_is_its_no_form():
    """vllm 0.33.0 wheel (PyPI), vllm/utils/argparse_utils.py EnableDisableAction: --disable-X is --no-enable-X and
    --enable-X is --no-disable-X for every boolean flag. --disable-expert-parallel turns EP off (its intermediate
    TP-split); --disable-chunked-prefill is refused as --no-enable-chunked-prefill is."""
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    on = parse_serve(f"{K3}", platform="gpu")
    off = parse_serve("vllm serve moonshotai/Kimi-K3 -tp 8 --disable-expert-parallel", platform="gpu")
    assert (on.expert_parallel, off.expert_parallel) == (True, False)
    kept = parse_serve(f"{K3} --disable-prefix-caching --enable-hybrid-kv-cache-manager", platform="gpu")
    assert {"--no-enable-prefix-caching", "--no-disable-hybrid-kv-cache-manager"} <= set(kept.ignored)
    with pytest.raises(K3PlanError, match="no-enable-chunked-prefill"):
        parse_serve(f"{K3} --disable-chunked-prefill", platform="gpu")


def test_mamba_cache_mode_all_is_refused_on_a_gpu():
    """vllm 0.31.0 wheel (PyPI), vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes: 'all' holds a state
    block every block_size tokens (not priced); the 0.32.0 wheel's vllm/config/cache.py MambaCacheMode has no 'all'."""
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    with pytest.raises(K3PlanError, match="mamba-cache-mode all"):
        parse_serve(f"{K3} --mamba-cache-mode all", platform="gpu")
    assert "--mamba-cache-mode" in parse_serve(f"{K3} --mamba-cache-mode align", platform="gpu").ignored
