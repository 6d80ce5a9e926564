"""tpu-inference's DeepSeek-V4 compressor kernel against the TPU's SMEM (engines/tpu_inference/dsv4_smem.py): the
state block table compress_norm_rope_store scalar-prefetches, sized from the command as the engine's code sizes it."""

from __future__ import annotations

from k3plan.engines.tpu_inference.dsv4_smem import SMEM_BYTES, smem_refusal, state_blocks, table_bytes

# the nightly MMLU command (tests/e2e/benchmarking/mmlu.sh, .buildkite/pipeline_jax.yml): 64 sequences of 9,216
# tokens a DP rank, attention DP 8, the 1,024-token KV block (PallasMLAttentionBackend.get_page_size)
NIGHTLY = {"max_model_len": 9216, "max_num_seqs": 64, "dp": 8}


def test_state_blocks_follow_config_py():
    """config.py state_block_size at a 1,024-token block: CSA 256 rows / 16, HCA (on CSA's page from #3319) 256 / 8,
    indexer 64 / 2; before #3319 (8ead48e6) HCA's own page (1,024 / 128) x 2 = 16 rows / 8."""
    assert state_blocks(1024) == {"csa": 16, "hca": 32, "indexer": 32}
    assert state_blocks(1024, hca_own_page=True)["hca"] == 2


def test_the_3310_table_is_the_engine_s_figure():
    """vllm-project/tpu-inference@786e8753's message (the #3310 nightly): 'a 64x4608 int32 table = 1.125 MiB ...
    Allocation (size=1179648) would exceed memory (size=1048576)'."""
    hca = state_blocks(1024, hca_own_page=True)["hca"]
    assert table_bytes(**NIGHTLY, state_block=hca) == 1_179_648 > SMEM_BYTES == 1_048_576


def test_the_b8692ff0_nightly_fits():
    """From #3319 the largest table is CSA's: 64 x 576 x 4 B = 147,456 B; no refusal at b8692ff0 or v0.27.0."""
    assert table_bytes(**NIGHTLY, state_block=16) == 147_456
    for release in (None, (0, 27, 0)):
        assert smem_refusal(release=release, block=1024, options={}, **NIGHTLY) is None


def test_a_long_context_batch_overflows_and_names_the_kernel():
    """256 sequences of 65,536 tokens a rank: 256 x 4,096 x 4 B = 4 MiB, the engine's error at the kernel."""
    refused = smem_refusal(release=None, max_model_len=65536, max_num_seqs=256, dp=8, block=1024, options={})
    assert refused is not None
    message, at = refused
    assert "Allocation (size=4194304) would exceed memory (size=1048576)" in message
    assert "compress_norm_rope_store" in at


def test_unread_releases_and_no_precompile_are_not_refused():
    """Before v0.27.0 the compressor is another kernel (not read); SKIP_JAX_PRECOMPILE=1 compiles no step at start."""
    big = {"max_model_len": 65536, "max_num_seqs": 256, "dp": 8, "block": 1024}
    assert smem_refusal(release=(0, 26, 0), options={}, **big) is None
    assert smem_refusal(release=None, options={"skip_jax_precompile": "1"}, **big) is None


def test_max_num_reqs_floor():
    """max_num_reqs = max(dp x max_num_seqs, MIN_NUM_SEQS 8): one sequence on one rank still holds 8 rows."""
    assert table_bytes(max_model_len=1024, max_num_seqs=1, dp=1, state_block=16) == 8 * 64 * 4


def test_the_rule_agrees_with_the_kernel_compiled_deviceless():
    """reports/compile/tpu-inference-dsv4-smem/records.json: the engine's kernel at 8ead48e6 and b8692ff0, compiled for
    tpu7x; every table the rule refuses (over 1 MiB) failed there with the engine's 'Allocation (size=...)' error, and
    the nightly's sizes match the rule's bytes."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "reports/compile/tpu-inference-dsv4-smem/records.json"
    records = json.loads(path.read_text())["records"]
    for rec in records:
        assert rec["table_bytes"] == rec["rows"] * rec["pages"] * 4
        if rec["table_bytes"] > SMEM_BYTES:
            assert rec["outcome"].startswith(f"Allocation (size={rec['table_bytes']}) would exceed memory (size=1048576)")
    by = {(r["commit"][:8], r["pages"]): r["outcome"] for r in records}
    assert by["8ead48e6", 4608].startswith("Allocation (size=1179648)")
    assert by["b8692ff0", 576] == "compiled"
