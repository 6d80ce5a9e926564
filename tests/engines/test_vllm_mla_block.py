"""vLLM's block for a dense-MLA model by release and GPU family (k3plan/engines/vllm/mla_block.py), read in the vllm
0.11.0, 0.11.1, 0.11.2, 0.12.0, 0.13.0, 0.14.1, 0.15.0-0.28.0, 0.33.0 and 0.34.0 wheels (PyPI): vllm/platforms/cuda.py
CudaPlatform.check_and_update_config (the forced blocks to 0.17.x), _get_backend_priorities and vllm/platforms/
interface.py Platform.update_block_size_for_backend (from 0.18.0), v1/attention/backends/mla/*.py
get_supported_kernel_block_sizes. The budget's page and the engine's pool read the same block."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.vllm.mla_block import dense_mla_block


@pytest.mark.parametrize(
    ("release", "hardware", "fp8", "env", "block"),
    [
        ((0, 11, 0), "nvidia-b200", False, {}, 128),  # CUTLASS MLA, forced to 128
        ((0, 14, 1), "nvidia-b300", False, {}, 128),
        ((0, 11, 0), "nvidia-b200", False, {"VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"}, 64),
        ((0, 15, 0), "nvidia-gb200-nvl72", False, {}, 64),  # FlashInfer MLA, forced to 64
        ((0, 17, 1), "nvidia-b200", False, {}, 64),
        ((0, 18, 0), "nvidia-b200", False, {}, 32),  # FlashInfer MLA's smallest of [32, 64]
        ((0, 33, 0), "nvidia-gb300-nvl72", True, {}, 32),
        ((0, 16, 0), "nvidia-h200", False, {}, 64),  # FlashMLA, forced to 64
        ((0, 18, 0), "nvidia-h200", False, {}, 16),  # FLASH_ATTN_MLA keeps the default 16
        ((0, 20, 0), "nvidia-h200", True, {}, 64),  # no fp8 cache in FLASH_ATTN_MLA: FlashMLA's [64]
        ((0, 34, 0), "nvidia-h200", False, {}, 64),  # CacheConfig.DEFAULT_BLOCK_SIZE 64 from 0.34.0
        ((0, 34, 0), "nvidia-b200", False, {}, 64),
    ],
)
def test_dense_mla_block(release, hardware, fp8, env, block):
    got = dense_mla_block(release, hardware, fp8_kv=fp8, env=env)
    assert got is not None and got[0] == block and "wheel" in got[1]


def test_unread_is_left_to_the_stack():
    assert dense_mla_block((0, 10, 2), "nvidia-b200", fp8_kv=False) is None
    assert dense_mla_block((0, 18, 0), "amd-mi355x", fp8_kv=False) is None
    assert (
        dense_mla_block((0, 13, 0), "nvidia-b200", fp8_kv=False, env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}) is None
    )


def test_b200_0180_pool_in_blocks_of_32():
    # vLLM 0.18.0 on 8 x B200 logs 1,219,424 tokens of DeepSeek-R1-0528 (tests/engines/cases/vllm-kamra-r1-0528-b200-
    # tp8-8k.yaml): 38,107 blocks of 32, not a whole number of 64-token blocks. k3plan's pool is counted in 32s too
    assert 1219424 % 32 == 0 and 1219424 % 64 != 0
    serve = (
        "vllm serve deepseek-ai/DeepSeek-R1-0528 --max-model-len 8192 --trust-remote-code --tensor-parallel-size 8 "
        "--gpu-memory-utilization 0.92 --no-enable-prefix-caching"
    )
    out = {}
    for v in ("0.14.1", "0.16.0", "0.18.0"):
        res = CliRunner().invoke(
            app, ["fit", "-H", "nvidia-b200", "-t", "8", "--serve", serve, "--engine-version", v, "--json"]
        )
        assert res.exit_code in (0, 1), res.output
        out[v] = json.loads(res.stdout)["engine"]["block_tokens"]
    assert out == {"0.14.1": 128, "0.16.0": 64, "0.18.0": 32}


MIB128 = 128 * 1024 * 1024  # FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE, SM100Workspace(128 * 1024 * 1024)


@pytest.mark.parametrize(
    ("release", "hardware", "env", "n"),
    [
        ((0, 11, 0), "nvidia-b200", {}, 1),  # CUTLASS MLA's module only
        ((0, 11, 0), "nvidia-h200", {}, 0),  # FlashMLA's: none
        ((0, 11, 2), "nvidia-h200", {}, 1),  # get_valid_backends imports FlashInfer MLA's module
        ((0, 14, 1), "nvidia-b300", {}, 1),  # CUTLASS_MLA selected: its module only
        ((0, 16, 0), "nvidia-b200", {}, 1),  # FLASHINFER_MLA selected
        ((0, 18, 0), "nvidia-b200", {}, 2),  # every backend's module: FlashInfer MLA's and CUTLASS MLA's
        ((0, 20, 0), "nvidia-h200", {}, 1),
        ((0, 24, 0), "nvidia-gb300-nvl72", {}, 2),
        ((0, 25, 0), "nvidia-gb300-nvl72", {}, 1),  # FlashInfer MLA's buffer made in forward_mqa: CUTLASS MLA's alone
        ((0, 25, 0), "nvidia-h200", {}, 0),
        ((0, 33, 0), "nvidia-h200", {}, 0),
    ],
)
def test_mla_decode_workspace(release, hardware, env, n):
    from k3plan.engines.vllm.mla_block import mla_decode_workspace

    got = mla_decode_workspace(release, hardware, env=env)
    assert got is not None and got[0] == n * MIB128 and "wheel" in got[1]


@pytest.mark.parametrize(
    ("release", "hardware", "env", "n"),
    [
        # 0.11.1-0.12.x on the SM100 family: check_and_update_config's envs.VLLM_ATTENTION_BACKEND = 'CUTLASS_MLA'
        # stays in the front end's process (vllm serve spawns the engine core and its workers: entrypoints/utils.py
        # cli_env_setup), so the worker's get_valid_backends imports every major-10 backend's module: both workspaces
        # (vllm 0.11.1, 0.11.2, 0.12.0 wheels: platforms/cuda.py, attention/selector.py, v1/engine/core.py)
        ((0, 11, 1), "nvidia-b200", {}, 2),
        ((0, 11, 2), "nvidia-gb200-nvl72", {}, 2),
        ((0, 12, 0), "nvidia-b300", {}, 2),  # _get_backend_priorities tests major == 10: sm_103 alike
        ((0, 12, 0), "nvidia-b200", {"VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"}, 1),  # the variable reaches it
        ((0, 11, 1), "nvidia-gb300-nvl72", {"VLLM_ATTENTION_BACKEND": "CUTLASS_MLA"}, 1),
        # 0.11.0: the one module get_attn_backend_cls names; on sm_103 (not capability 100) TRITON_MLA's, none
        ((0, 11, 0), "nvidia-b300", {}, 0),
        ((0, 11, 0), "nvidia-b200", {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, 0),
    ],
)
def test_mla_decode_workspace_011_012_sm100_family(release, hardware, env, n):
    from k3plan.engines.vllm.mla_block import mla_decode_workspace

    got = mla_decode_workspace(release, hardware, env=env)
    assert got is not None and got[0] == n * MIB128 and "wheel" in got[1]


def test_mla_decode_workspace_unread():
    from k3plan.engines.vllm.mla_block import mla_decode_workspace

    # where the worker is the front end's process or forked from it, the module attribute may reach it: not read
    assert mla_decode_workspace((0, 12, 0), "nvidia-b200", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}) is None
    assert mla_decode_workspace((0, 11, 2), "nvidia-b200", env={"VLLM_WORKER_MULTIPROC_METHOD": "fork"}) is None
    assert mla_decode_workspace((0, 12, 0), "nvidia-b200", env={"VLLM_ATTENTION_BACKEND": "FLASHMLA"}) is None


@pytest.mark.parametrize(
    ("release", "hardware", "env", "block"),
    [
        ((0, 11, 0), "nvidia-b300", {}, 16),  # 'Not Blackwell': FlashMLA's forcing is Hopper-only; TRITON_MLA
        ((0, 11, 1), "nvidia-b300", {}, 16),  # the pool is sized at 16 (then sm103_block_refusal)
        ((0, 12, 0), "nvidia-gb300-nvl72", {}, 16),
        ((0, 11, 2), "nvidia-b300", {"VLLM_ATTENTION_BACKEND": "CUTLASS_MLA"}, 128),  # the forced case tests no GPU
        ((0, 12, 0), "nvidia-gb300-nvl72", {"VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"}, 64),
    ],
)
def test_dense_mla_block_sm103_before_0130(release, hardware, env, block):
    got = dense_mla_block(release, hardware, fp8_kv=False, env=env)
    assert got is not None and got[0] == block and "wheel" in got[1]


def test_flashmla_forces_nothing_on_sm100_before_0150():
    # is_flashmla_dense_supported (attention/ops/flashmla.py) is Hopper-only: FLASHMLA's 64 is not forced on B200
    for release in ((0, 11, 0), (0, 12, 0), (0, 14, 1)):
        assert dense_mla_block(release, "nvidia-b200", fp8_kv=False, env={"VLLM_ATTENTION_BACKEND": "FLASHMLA"}) is None
    got = dense_mla_block((0, 14, 1), "nvidia-h200", fp8_kv=False, env={"VLLM_ATTENTION_BACKEND": "FLASHMLA"})
    assert got is not None and got[0] == 64


def test_sm103_block_refusal():
    """0.11.1-0.12.x on sm_103 without VLLM_ATTENTION_BACKEND: the worker's CUTLASS_MLA takes kernel blocks of 128
    only, so GPUModelRunner.select_common_block_size raises on any block not a multiple of 128 (vllm 0.11.1, 0.11.2,
    0.12.0 wheels: v1/worker/gpu_model_runner.py; cutlass_mla.py supported_kernel_block_sizes [128])."""
    from k3plan.engines.vllm.mla_block import sm103_block_refusal

    got = sm103_block_refusal((0, 12, 0), "nvidia-b300", block=None)
    assert got is not None and got[0] == "ValueError: No common block size for 16." and "0.12.0 wheel" in got[1]
    got = sm103_block_refusal((0, 11, 1), "nvidia-gb300-nvl72", block=64)
    assert got is not None and got[0] == "ValueError: No common block size for 64."
    assert sm103_block_refusal((0, 11, 2), "nvidia-b300", block=128) is None  # a multiple of 128 splits
    assert sm103_block_refusal((0, 11, 2), "nvidia-b300", block=256) is None
    assert sm103_block_refusal((0, 11, 0), "nvidia-b300", block=None) is None  # TRITON_MLA at 0.11.0
    assert sm103_block_refusal((0, 13, 0), "nvidia-b300", block=None) is None  # the family test from 0.13.0
    assert sm103_block_refusal((0, 12, 0), "nvidia-b200", block=None) is None  # sm_100: forced to 128
    assert (
        sm103_block_refusal((0, 12, 0), "nvidia-b300", block=None, env={"VLLM_ATTENTION_BACKEND": "CUTLASS_MLA"})
        is None
    )


def test_b300_r1_at_0120_does_not_start():
    serve = (
        "vllm serve deepseek-ai/DeepSeek-R1-0528 --max-model-len 8192 --trust-remote-code --tensor-parallel-size 8 "
        "--gpu-memory-utilization 0.92 --no-enable-prefix-caching"
    )
    out = {}
    for v in ("0.11.0", "0.12.0", "0.13.0"):
        res = CliRunner().invoke(
            app, ["fit", "-H", "nvidia-b300", "-t", "8", "--serve", serve, "--engine-version", v, "--json"]
        )
        assert res.exit_code in (0, 1), res.output
        eng = json.loads(res.stdout)["engine"]
        out[v] = (eng["starts"], eng["block_tokens"])
        if v == "0.12.0":
            assert "No common block size for 16" in eng["message"] and "select_common_block_size" in eng["raised_at"]
    assert out == {"0.11.0": (True, 16), "0.12.0": (False, 16), "0.13.0": (True, 128)}


def test_h200_load_steps_up_at_0112():
    # vLLM's H200 starts of DeepSeek-R1-0528 log 79.58 GiB loaded at 0.11.0 and 79.74 GiB from 0.11.2
    # (tests/engines/cases/vllm-kamra-r1-0528-h200-tp8-8k-v0110.yaml, -v0112.yaml): FlashInfer MLA's module, imported by
    # get_valid_backends from 0.11.2, is 0.125 of the 0.16 GiB
    from k3plan.engines.vllm.mla_block import mla_decode_workspace

    a, b = mla_decode_workspace((0, 11, 0), "nvidia-h200"), mla_decode_workspace((0, 11, 2), "nvidia-h200")
    assert a is not None and b is not None
    assert b[0] - a[0] == MIB128 and MIB128 / 2**30 < 79.74 - 79.58
