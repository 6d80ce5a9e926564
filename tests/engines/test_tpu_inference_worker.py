"""tpu-inference's start is its own worker's, read in its code (vllm-project/tpu-inference@811f8e20,
k3plan/engines/tpu_inference/memory.py), not GPU vLLM's nor the torch_tpu plugin's: the pool is the devices' HBM
limit x gpu_memory_utilization less the bytes in use, with no profile run before it (so no activation and no
sampler warm-up is subtracted, and the temporaries run in the 1 - utilization left over); its refusals are its own
ValueError and XLA's allocator, never CUDA's; its compact state slots fall back to vLLM's uniform pages where the
plugin refuses; DeepSeek-V4 is not priced with GPU vLLM's page groups."""

from __future__ import annotations

import json

from k3plan.engines.registry import engine_rules
from k3plan.engines.stack import load_stack
from k3plan.engines.vllm.memory import Figure, vllm_kv_pool
from k3plan.units import GiB


def _engine(cli, *args) -> dict:
    r = cli("fit", "-H", "tpu-v7x", "--json", *args)
    assert r.exit_code in (0, 1, 3), r.output
    return json.loads(r.stdout)


def test_weights_over_the_hbm_are_xla_s_refusal_at_the_model_loader(cli):
    e = _engine(cli, "-t", "2x2x4", "--stack", "tpu-inference")["engine"]  # K3 at tp 1: 122 GiB a device
    assert not e["starts"]
    assert e["message"].startswith("RESOURCE_EXHAUSTED") and "CUDA" not in e["message"]
    assert "tpu_inference/models/common/model_loader.py get_model" in e["raised_at"]


def test_no_room_for_the_pool_is_the_worker_s_own_value_error(cli):
    # Kimi-K2.6 at tp 1 on 16 devices: 50.96 GiB of weights a device, over 0.5 x 94.75 GiB
    d = _engine(
        cli,
        "-m",
        "kimi-k2.6",
        "-t",
        "2x2x2",
        "--stack",
        "tpu-inference:gpu_memory_utilization=0.5",
        "--context",
        "32768",
    )
    e = d["engine"]
    used, cap = e["weights_bytes"] / GiB, 0.5 * 101_737_037_824 / GiB
    assert not e["starts"] and not d["fits"]
    # tpu_worker.py: f"{total_hbm_used_gb=}GiB exceeds {total_hbm_limit_cap_gb=}GiB by {-total_hbm_avail_gb}GiB. ..."
    assert e["message"].startswith(
        f"ValueError: total_hbm_used_gb={round(used, 2)}GiB exceeds total_hbm_limit_cap_gb={round(cap, 2)}GiB by "
        f"{round(used - cap, 2)}GiB. Please consider increasing --gpu-memory-utilization from 0.5 to a larger value."
    )
    assert "tpu_inference/worker/tpu_worker.py TPUWorker.determine_available_memory" in e["raised_at"]


def test_no_activation_is_subtracted_and_the_temporaries_run_in_the_reserve(cli):
    d = _engine(cli, "-m", "kimi-k2.6", "-t", "2x2x2", "--stack", "tpu-inference", "--context", "32768")
    e = d["engine"]
    assert e["starts"] and e["activation_bytes"] == 0 and e["non_torch_bytes"] == 0
    assert "no profile run before it" in e["sources"]["activation"]
    # the pool: int(0.92 x the limit) - the weights, the worker's own arithmetic (vLLM's CacheConfig default 0.92)
    assert e["kv_pool_bytes"] == int(101_737_037_824 * 0.92) - e["weights_bytes"]
    assert load_stack("tpu-inference").kv_pool.temps_in_reserve


def test_deepseek_v4_is_not_priced_with_gpu_vllm_s_page_groups(cli):
    e = _engine(cli, "-m", "deepseek-v4-flash", "-t", "2x2x2", "--stack", "tpu-inference", "--context", "32768")[
        "engine"
    ]
    assert e["starts"] and e["block_tokens"] == 1024
    assert e.get("layout") != "dsv4-groups" and "tpu-inference" in e["sources"]["kv_pool"]
    assert e["sources"]["num_blocks"].startswith("available // (page ")  # the per-layer pages, not the V4 groups


def _hybrid(engine: str, *, utilization: float, weights: int, slot: int, max_num_seqs: int, **extra):
    """A hybrid pool on the engine's worker: 2 attention layers of GiB // 64 a block, 6 state layers of ``slot`` bytes
    a slot, 48 GiB seen; ``extra``: vllm_kv_pool's other arguments."""
    zero = Figure(0, "test")
    return vllm_kv_pool(
        engine=engine,
        utilization=utilization,
        visible_bytes=48 * GiB,
        weights_bytes=weights,
        activation_bytes=zero,
        non_torch_bytes=zero,
        visible_source="test",
        page_bytes=GiB // 64,
        block_tokens=16,
        block_source="test",
        n_attention=2,
        n_state=6,
        max_model_len=16,
        worker_source=engine_rules(engine).hbm_worker.source,
        hbm_worker=engine_rules(engine).hbm_worker,
        compact_state_bytes=slot,
        max_num_seqs=max_num_seqs,
        **extra,
    )


def _pool(engine: str, *, max_num_seqs: int):
    """A hybrid pool whose state slots (1 GiB a layer slot) outgrow a layer region at many sequences."""
    return _hybrid(engine, utilization=1.0, weights=0, slot=GiB, max_num_seqs=max_num_seqs)


def test_compact_slots_that_leave_no_block_refuse_on_the_plugin_and_fall_back_on_tpu_inference():
    # 48 GiB over 2 layer regions = 24 GiB a region; 3 state groups x (max_num_seqs + 1) slots x 1 GiB
    plugin, tpu_inf = _pool("torchtpu-vllm", max_num_seqs=3), _pool("tpu-inference", max_num_seqs=3)
    assert plugin.starts and tpu_inf.starts and plugin.num_blocks.value == tpu_inf.num_blocks.value == 768
    plugin, tpu_inf = _pool("torchtpu-vllm", max_num_seqs=8), _pool("tpu-inference", max_num_seqs=8)
    assert not plugin.starts and "Compact-mamba KV sizing does not fit" in plugin.message
    assert "vllm-torchtpu" in plugin.raised_at
    # kv_cache_manager.py: "Compact-mamba sizing skipped" -> vLLM's uniform pages: 48 GiB // (page x 2 layers a group)
    assert tpu_inf.starts and tpu_inf.num_blocks.value == 48 * GiB // (GiB // 64 * 2)
    assert "compact sizing skipped" in tpu_inf.num_blocks.source


def test_the_jax_kimi_step_holds_a_moe_output_buffer_a_layer_against_the_1_minus_utilization_share():
    """tpu-inference@811f8e20 layers/jax/moe/sparse_moe.py sparse_moe_distributed_fwd: the ragged_all_to_all's output
    operand, jnp.zeros((tokens x top_k, hidden)), one a MoE layer; compiled deviceless for tpu7x
    (reports/compile/tpu-inference-kimi-linear-step/records.json, benchmarks/tpu_inference_sparse_moe_compile.py,
    jax 0.11.0): 608,198,816 B for one layer, 1,220,131,008 B for three, one such buffer more a layer. Kimi-Linear's
    config: 26 MoE layers (27, first_k_dense_replace 1), top-8, hidden 2,304; the bucket 1,024 x DP 8."""
    from k3plan.engines.tpu_inference.memory import step_temporaries

    one = 8192 * 8 * 2304 * 2  # a layer's buffer at the largest bucket
    assert (1_220_131_008 - 608_198_816) // 2 >= one  # the compile's growth a layer covers it
    got = step_temporaries(architecture="kimi_linear", options={}, n_moe=26, top_k=8, expert_in=2304, tokens=1024, dp=8)
    assert got is not None and got[0] == 26 * one and "sparse_moe.py" in got[1]
    # vLLM's model code under tpu-inference, and models kimi_k3.py does not serve: not this backend
    assert (
        step_temporaries(
            architecture="kimi_linear",
            options={"model_impl": "vllm"},
            n_moe=26,
            top_k=8,
            expert_in=2304,
            tokens=1024,
            dp=8,
        )
        is None
    )
    assert (
        step_temporaries(architecture="deepseek_v3", options={}, n_moe=58, top_k=8, expert_in=7168, tokens=1024, dp=8)
        is None
    )


def test_the_jax_kimi_step_at_32_dp_ranks_reads_the_moe_compiled_at_that_mesh():
    """tpu-inference@4598bf05 sparse_moe_distributed_fwd compiled deviceless for tpu7x:2x2x4 at the 4-host
    Kimi-Linear-48B serve's largest bucket (2,048 x 32 DP ranks = 65,536 tokens, 524,288 routed rows;
    reports/compile/tpu-inference-kimi-linear-moe-2x2x4/records.json): 4,884,601,568 B for 3 layers, 9,720,455,168 B
    for 8, 9,740,247,776 B for all 26 -- flat past 8, not one whole [524,288, 2,304] bf16 buffer a layer
    (2,415,919,104 B), the 8-device law, which would put 26 layers at 58.50 GiB against the 37.90 GiB utilization 0.6
    leaves (the run served, build 719). Other points keep the 8-device law."""
    import json
    from pathlib import Path

    from k3plan.engines.tpu_inference.memory import MESH32_TEMPS, step_temporaries

    recs = json.loads(Path("reports/compile/tpu-inference-kimi-linear-moe-2x2x4/records.json").read_text())
    by_layers = {r["point"]["layers"]: r["temp_bytes"] for r in recs if r["point"]["tokens"] == 65536}
    assert all(by_layers[n] == t for n, t in MESH32_TEMPS.items())
    assert by_layers[26] - by_layers[8] < 524_288 * 2304 * 2  # not a buffer a layer past 8
    kw = dict(architecture="kimi_linear", options={}, top_k=8, expert_in=2304, tokens=2048, dp=32)
    got = step_temporaries(n_moe=26, **kw)  # type: ignore[arg-type]
    assert got is not None and got[0] == by_layers[26] and "2x2x4" in got[1]
    assert step_temporaries(n_moe=12, **kw)[0] == by_layers[8]  # type: ignore[arg-type,index]  # a lower bound
    # another bucket at 32 ranks, and the 8-device point: the one-buffer-a-layer law
    other = step_temporaries(n_moe=26, **{**kw, "tokens": 1024})  # type: ignore[arg-type]
    assert other is not None and other[0] == 26 * 1024 * 32 * 8 * 2304 * 2


def test_the_jax_kimi_step_without_dp_attention_holds_the_same_buffers_at_one_dp_rank():
    """K3 without DP attention (stack option unsafe_mla_without_dp_attention=1, the bring-up branches @e65bd14c):
    the expert axis is expert_parallelism, so _select_moe_backend takes MEGABLX_GMM at one DP rank too, and each of
    the 92 MoE layers holds its [512 x top-16, 3,584] bf16 output buffer (a lower bound: 5.03 GiB, where the
    bring-up's attempt 10 died in warmup about 15.8 GiB over its weights and its 21.70 GiB of pinned KV and KDA
    arrays). At one DP rank under DP attention (the expert axis 1: DENSE_MAT) nothing is priced."""
    from k3plan.engines.tpu_inference.memory import step_temporaries

    kw = dict(architecture="kimi_k3", n_moe=92, top_k=16, expert_in=3584, tokens=512, dp=1)
    got = step_temporaries(options={"unsafe_mla_without_dp_attention": "1"}, **kw)  # type: ignore[arg-type]
    assert got is not None and got[0] == 92 * 512 * 16 * 3584 * 2 == 5_402_263_552 and "MEGABLX_GMM" in got[1]
    assert step_temporaries(options={}, **kw) is None  # type: ignore[arg-type]


def test_the_vllm_deepseek_v3_step_is_the_compiled_step_and_its_moe_layers_code_from_the_records():
    """vLLM's DeepSeek-V3-family model code under tpu-inference@e0e04e95 with attention DP: the constants are the
    compile records' (reports/compile/tpu-inference-kimi-k2.6-step/records.json: benchmarks/
    tpu_inference_moe_compile.py, tpu_inference_dsv3_step_compile.py, tpu_compile_code_in_hbm.py, jax 0.10.2): the
    step's temporaries at 8,192 tokens (1 dense + k MoE layers: flat in k, the MoE's most of them), the smallest
    growth of its generated code a MoE layer, and XLA:TPU counting the code in its compile-time check (a v5e)."""
    from pathlib import Path

    from k3plan.engines.tpu_inference import memory as m

    records = json.loads(
        (Path(__file__).parents[2] / "reports/compile/tpu-inference-kimi-k2.6-step/records.json").read_text()
    )
    moe = [r for r in records if r["script"].endswith("tpu_inference_moe_compile.py")]
    moe_temps = [r["temp_bytes"] for r in moe if r["point"]["tokens"] * r["point"]["topk"] == m.DSV3_STEP_ROWS]
    assert (moe[0]["point"]["hidden"], moe[0]["point"]["topk"]) == m.DSV3_COMPILED_SHAPE
    steps = sorted(
        (
            r
            for r in records
            if r["script"].endswith("tpu_inference_dsv3_step_compile.py") and not r["point"]["no_embed"]
        ),
        key=lambda r: r["point"]["layers"],
    )
    growth = [
        (b["code_bytes"] - a["code_bytes"]) // (b["point"]["layers"] - a["point"]["layers"])
        for a, b in zip(steps, steps[1:])
    ]
    assert len(growth) >= 2 and min(growth) == m.DSV3_CODE_A_MOE_LAYER
    temps = [r["temp_bytes"] for r in steps]
    assert max(temps) - min(temps) < 0.05 * min(temps) and min(temps) == m.DSV3_STEP_TEMP_BYTES > max(
        moe_temps
    )  # flat; the MoE is under it
    hbm = [r for r in records if r.get("check") == "compile_time_oom"]
    # at the largest argument that compiled, one more step fits without the code and not with it
    assert hbm and all(r["slack_with_code"] < r["bytes_a_step"] <= r["slack_without_code"] for r in hbm)
    # Kimi-K2.6 (60 MoE layers) at the mlperf bucket (1,024 x DP 8): past the 2.18 GiB 0.977 leaves, under 0.95's 4.74
    got = m.step_temporaries(
        architecture="kimi_k25", options={"model_impl": "vllm"}, n_moe=60, top_k=8, expert_in=7168, tokens=1024, dp=8
    )
    assert got is not None and got[0] == m.DSV3_STEP_TEMP_BYTES + 60 * m.DSV3_CODE_A_MOE_LAYER
    assert int(0.023 * 94.75 * GiB) < got[0] < int(0.05 * 94.75 * GiB)
    half = m.step_temporaries(
        architecture="deepseek_v3", options={"model_impl": "vllm"}, n_moe=58, top_k=8, expert_in=7168, tokens=512, dp=8
    )
    assert half is not None and half[0] == m.DSV3_STEP_TEMP_BYTES // 2 + 58 * m.DSV3_CODE_A_MOE_LAYER
    # without attention DP, at shapes not compiled, and on other models: not priced
    for kw in (
        dict(architecture="kimi_k25", dp=1, expert_in=7168),
        dict(architecture="kimi_k25", dp=8, expert_in=4096),
        dict(architecture="qwen3_moe", dp=8, expert_in=7168),
    ):
        assert m.step_temporaries(options={"model_impl": "vllm"}, n_moe=60, top_k=8, tokens=1024, **kw) is None  # type: ignore[arg-type]


def test_without_expert_parallel_the_vllm_deepseek_v3_step_is_the_gmm_tp_record_with_no_code():
    """Without --enable-expert-parallel vLLM's model code under tpu-inference runs GMM_TP (layers/vllm/interface/moe.py
    select_moe_backend_from_fused_moe_config, "[MoE]: Using GMM TP kernel" in the lm_eval runs' log): the constant is
    the GMM_TP compile records' (reports/compile/tpu-inference-kimi-k2.6-gmm-tp/records.json, benchmarks/
    tpu_inference_moe_tp_compile.py at 56b1e079, jax 0.10.2): the MoE's temporaries at 8,192 tokens, flat in the
    layers and linear in the rows; the engine's own report at 16,384 tokens (HLO temp 3.73G with 4.1% fragmentation,
    3.58G unpadded: the case tpu-inference-kimi-k2.6-v7x8-dpattn-8k-chunk4096-compile-oom) lists no overlays, so no
    code is added."""
    from pathlib import Path

    from k3plan.engines.tpu_inference import memory as m

    records = json.loads(
        (Path(__file__).parents[2] / "reports/compile/tpu-inference-kimi-k2.6-gmm-tp/records.json").read_text()
    )
    at = {(r["point"]["tokens"], r["point"]["layers"]): r["temp_bytes"] for r in records}
    assert (records[0]["point"]["hidden"], records[0]["point"]["topk"]) == m.DSV3_COMPILED_SHAPE
    assert at[(8192, 1)] == m.GMM_TP_STEP_TEMP_BYTES and 8192 * 8 == m.DSV3_STEP_ROWS
    assert abs(at[(8192, 2)] - at[(8192, 1)]) < 0.01 * at[(8192, 1)]  # flat in the layers
    assert abs(at[(16384, 1)] - 2 * at[(8192, 1)]) < 0.01 * at[(16384, 1)]  # linear in the rows
    # against the engine's own figure at 16,384 tokens: between its unpadded 3.58G and its 3.73G with fragmentation
    assert 3.58 * GiB < at[(16384, 1)] < 3.73 * GiB
    kw = dict(architecture="kimi_k25", options={"model_impl": "vllm"}, n_moe=60, top_k=8, expert_in=7168, dp=8)
    tp = m.step_temporaries(tokens=1024, expert_parallel=False, **kw)  # type: ignore[arg-type]
    ep = m.step_temporaries(tokens=1024, expert_parallel=True, **kw)  # type: ignore[arg-type]
    assert tp is not None and ep is not None and tp[0] == m.GMM_TP_STEP_TEMP_BYTES and "GMM_TP" in tp[1]
    assert ep[0] == m.DSV3_STEP_TEMP_BYTES + 60 * m.DSV3_CODE_A_MOE_LAYER
    # the lm_eval runs at 0.978 (2.08 GiB left a device): the 8,192-token bucket fits, the 32,768-token one does not
    assert tp[0] < int(0.022 * 94.75 * GiB)
    big = m.step_temporaries(tokens=4096, expert_parallel=False, **kw)  # type: ignore[arg-type]
    assert big is not None and big[0] == 4 * m.GMM_TP_STEP_TEMP_BYTES > int(0.022 * 94.75 * GiB)


def test_the_step_temporaries_refuse_the_start_only_past_the_share_left():
    """The Kimi-Linear CI step (tpu-inference-kimi-linear-v7x8-ep8-*): 7.31 GiB of MoE buffers at the largest bucket
    fit the 37.90 GiB 0.60 leaves and not the 4.74 GiB 0.95 leaves."""
    common = dict(
        engine="tpu-inference", weights_bytes=10 * GiB, weights_source="w", activation_bytes=Figure(0, "0"),
        non_torch_bytes=Figure(0, "0"), visible_source="v", page_bytes=1 << 20, block_tokens=1024, block_source="b",
        n_attention=7, n_state=0, max_model_len=2048, worker_source="w",
        hbm_worker=engine_rules("tpu-inference").hbm_worker, visible_bytes=int(94.75 * GiB),
    )  # fmt: skip
    step = (7_851_737_088, "the MoE's buffers")
    assert vllm_kv_pool(utilization=0.60, compiled_step=step, **common).starts
    refused = vllm_kv_pool(utilization=0.95, compiled_step=step, **common)
    assert not refused.starts and refused.message.startswith("RESOURCE_EXHAUSTED compiling the step")


def _pinned(*, weights: int, step: int = 0, copies: str = "", override: int = 64, engine: str = "tpu-inference"):
    """A hybrid pool pinned by --num-gpu-blocks-override: 2 attention layers of GiB // 64 a block, 6 state layers of
    GiB // 128 a slot, 48 GiB seen, utilization 0.9."""
    return _hybrid(
        engine,
        utilization=0.9,
        weights=weights,
        slot=GiB // 128,
        max_num_seqs=8,
        num_gpu_blocks_override=override,
        compiled_step=(step, "test step") if step else None,
        attention_copies=copies,
    )


def test_a_pinned_hybrid_pool_holds_every_layer_s_own_array_of_the_pinned_blocks():
    """tpu-inference@e65bd14c kv_cache_manager.py initialize_kv_cache: with --num-gpu-blocks-override the compact state
    sizing steps aside and every layer of a shared_by group gets its own array of num_blocks = min(the tensor's
    blocks, the override) (mamba_num_blocks = num_blocks): a device holds override x (attention layers x page + state
    layers x slot), whatever the budget left -- here 64 x (2 x 16 MiB + 6 x 8 MiB) = 5 GiB."""
    pool = _pinned(weights=20 * GiB)
    assert pool.starts and pool.num_blocks.value == 64 and pool.kv_pool_bytes.value == 5 * GiB
    assert "initialize_kv_cache" in pool.kv_pool_bytes.source and "mamba_num_blocks" in pool.kv_pool_bytes.source
    # the arrays past what the weights leave of the device (640 blocks: 50 GiB): XLA's allocator refuses them
    over = _pinned(weights=20 * GiB, override=640)
    assert not over.starts and over.message.startswith("RESOURCE_EXHAUSTED allocating the KV cache")
    # past the 3.2 GiB budget 40 GiB of weights leave, the compiled step runs in what the weights and the arrays leave
    # (48 - 40 - 5 = 3 GiB), not in the 1 - utilization share (4.8 GiB)
    assert _pinned(weights=40 * GiB, step=3 * GiB).starts
    short = _pinned(weights=40 * GiB, step=3 * GiB + 1)
    assert not short.starts and "the weights and the pinned arrays (45.00 GiB) leave" in short.message
    # a step that copies every attention cache: 2 layers x 64 blocks x 16 MiB = 2 GiB more
    assert not _pinned(weights=40 * GiB, step=GiB + 1, copies="copied").starts
    assert _pinned(weights=40 * GiB, step=GiB, copies="copied").starts
    # the torch_tpu plugin's pinned layout is not read: its pool stays the budget
    plugin = _pinned(weights=20 * GiB, engine="torchtpu-vllm")
    assert plugin.kv_pool_bytes.value == int(0.9 * 48 * GiB) - 20 * GiB


def test_the_k3_step_without_dp_attention_copies_every_mla_cache_the_records_say():
    """tpu-inference@e65bd14c without DP attention ('model' 8 x 'expert' 4): run_model's out_shardings split every
    cache P(BATCH, KV_CONTEXT, KV_HEAD) where create_kv_caches allocated the MLA cache P(BATCH, KV_CONTEXT), so its
    donation is refused and the MLA kernel writes a copy; compiled deviceless for tpu7x:2x2x4 from the engine's code
    (reports/compile/tpu-inference-kimi-k3-nodp-step/records.json, benchmarks/tpu_inference_k3_nodp_step_compile.py,
    jax 0.10.2): the KDA state aliases in place, no MLA cache does, and two MLA layers' copies are live at once
    (against the same step returning each cache as it came in). K3's 24 MLA layers at the 512 pinned blocks: 15.00
    GiB of copies, which with the 92 MoE layers' output buffers (5.03 GiB) overflow the 10.51 GiB the weights and the
    pinned arrays leave (attempt 10 died in warmup); at 256 and 64 blocks they fit (attempts 12 and 11 served)."""
    from pathlib import Path

    from k3plan.engines.tpu_inference import memory as m

    records = json.loads(
        (Path(__file__).parents[2] / "reports/compile/tpu-inference-kimi-k3-nodp-step/records.json").read_text()
    )
    assert {r["mesh"]["model"] * 100 + r["mesh"]["expert"] for r in records} == {804}
    kda = next(r["cache_bytes"] for r in records if r["kinds"] == "K")
    for r in records:
        mla = (r["cache_bytes"] - r["kinds"].count("K") * kda) // max(r["kinds"].count("M"), 1)
        if r["point"]["out_sharding"] == "runner":
            assert r["alias_bytes"] == r["kinds"].count("K") * kda  # the KDA state in place, no MLA cache
        if r["kinds"].count("M"):
            assert mla == r["point"]["blocks"] * 1024 * 1280  # a layer's [512, 32, 32, 640] bf16 cache, whole
    runner, same = (
        next(
            r for r in records if r["kinds"] == "MM" and r["point"]["tokens"] == 512 and r["point"]["out_sharding"] == o
        )
        for o in ("runner", "same")
    )
    assert same["alias_bytes"] == same["cache_bytes"]  # returned as it came in: aliased
    assert runner["temp_bytes"] - same["temp_bytes"] >= runner["cache_bytes"]  # both layers' copies live at once
    # at warmup's first bucket (16 tokens) as at 512: the copies are the caches', not the bucket's
    first = next(r for r in records if r["kinds"] == "MM" and r["point"]["tokens"] == 16)
    assert first["alias_bytes"] == 0 and first["temp_bytes"] >= first["cache_bytes"]
    assert m.attention_cache_copies(options={"unsafe_mla_without_dp_attention": "1"}) == m.NO_DP_CACHE_COPY_SOURCE
    assert m.attention_cache_copies(options={}) is None
    assert (
        m.attention_cache_copies(options={"unsafe_mla_without_dp_attention": "1", "skip_jax_precompile": "1"}) is None
    )


def test_the_k3_fused_decode_loop_holds_each_moe_layer_s_staging_the_records_say():
    """tpu-inference@6a1cb1cca's fused decode loop (decode_loop.py _decode_core: a while_loop over the step, the caches
    donated, the weights loop-invariant) compiled deviceless for tpu7x:2x2x4 at 'model' 8 x 'expert' 4, 64 requests
    (reports/compile/tpu-inference-kimi-k3-nodp-decode-loop/records.json, benchmarks/
    tpu_inference_k3_nodp_step_compile.py --loop --own-weights): every cache aliased; each MoE layer with its own
    weights adds its own temporaries (with one shared set it adds ~28 MB: what grows is the weights' staging hoisted out
    of the loop), the step without the loop holds a quarter of the loop's; the by-kind growth at 2-3 layers gives K3's
    first 4 and 8 layers within 2%, and memory.py's law is K3's first 8 layers plus layers 5-8's growth a MoE layer.
    At 92 MoE layers, 20.80 GiB: past the 18.95 GiB --gpu-memory-utilization 0.8 leaves beside the self-sized pool
    (attempt 13f died compiling the loop), inside the 21.35 GiB the 256 pinned blocks leave (attempt 13d served)."""
    from pathlib import Path

    from k3plan.engines.tpu_inference import memory as m

    recs = json.loads(
        (Path(__file__).parents[2] / "reports/compile/tpu-inference-kimi-k3-nodp-decode-loop/records.json").read_text()
    )

    def rec(kinds, loop=True, own=True):
        return next(
            r for r in recs if r["kinds"] == kinds and r["point"]["loop"] is loop and r["point"]["own_weights"] is own
        )

    assert all(r["alias_bytes"] == r["cache_bytes"] for r in recs)  # every cache in place
    assert {r["source"].split("@")[1][:9] for r in recs} == {m.LOOP_COMMIT}
    own = rec("MMM")["temp_bytes"] - rec("MM")["temp_bytes"]
    shared = rec("MMM", own=False)["temp_bytes"] - rec("MM", own=False)["temp_bytes"]
    assert own == m.LOOP_A_MLA_MOE and shared < own // 8
    assert rec("MKK")["temp_bytes"] - rec("MK")["temp_bytes"] == m.LOOP_A_KDA_MOE
    four, eight = rec("KKKM")["temp_bytes"], rec("KKKMKKKM")["temp_bytes"]
    assert (four, eight) == (m.LOOP_FIRST_FOUR, m.LOOP_BASE) and (eight - four) // 4 == m.LOOP_A_MOE
    law = rec("MK")["temp_bytes"] + m.LOOP_A_KDA_MOE + m.LOOP_A_MLA_MOE  # the by-kind growth at 2-3 layers
    assert abs(law - four) / four < 0.02
    assert abs(four + 3 * m.LOOP_A_KDA_MOE + m.LOOP_A_MLA_MOE - eight) / eight < 0.02
    assert rec("MMM", loop=False)["temp_bytes"] * 4 < rec("MMM")["temp_bytes"]  # the step reuses
    opts = {"continue_decode": "1", "unsafe_mla_without_dp_attention": "1"}
    size, _ = m.loop_temporaries(options=opts, n_moe=92, n_attention=24, max_num_seqs=64)
    assert size == 22_335_137_168
    assert (
        m.loop_temporaries(options={**opts, "skip_jax_precompile": "1"}, n_moe=92, n_attention=24, max_num_seqs=64)
        is None
    )
    assert (
        m.loop_temporaries(options={"unsafe_mla_without_dp_attention": "1"}, n_moe=92, n_attention=24, max_num_seqs=64)
        is None
    )
