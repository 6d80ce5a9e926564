"""SGLang's --enable-symm-mem, as its code sizes it (engines/sglang/releases.py SYMM_PREALLOC_SOURCE): from 0.5.11
ServerArgs sets SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to 4 where the variable is unset, after mem_fraction_static is
derived, and each GPU's target worker preallocates torch.empty((4 * 1024 * 1024 * 1024,), uint8) through the NCCL
allocator once the KV pool is sized and the CUDA graphs captured. So the pool is the same with and without the flag,
the 4 GiB come out of the 1 - mem_fraction_static share, and a share smaller than them fails at the preallocation."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

R1 = (
    "python3 -m sglang.launch_server --model-path nvidia/DeepSeek-R1-0528-FP4-V2 --tensor-parallel-size 4 "
    "--mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --quantization modelopt_fp4"
)
PREALLOC = 4 * 1024 * 1024 * 1024  # torch.empty((SGLANG_SYMM_MEM_PREALLOC_GB_SIZE * 1024 * 1024 * 1024,), uint8)


def _engine(cli, cmd: str, version: str = "0.5.16", hardware: str = "nvidia-b200") -> dict:
    r = cli("fit", "-H", hardware, "-t", "4", "--serve", cmd, "--engine-version", version, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


@pytest.mark.parametrize("version", ["0.5.12", "0.5.16", "0.5.23"])
def test_the_flag_preallocates_4_gib_a_gpu_beside_a_pool_it_does_not_move(cli, version):
    off = _engine(cli, R1, version)
    on = _engine(cli, R1 + " --enable-symm-mem", version)
    assert off["starts"] and on["starts"]
    assert on["kv_pool_bytes"] == off["kv_pool_bytes"] and on["kv_pool_tokens"] == off["kv_pool_tokens"]
    assert (off["non_torch_bytes"], on["non_torch_bytes"]) == (0, PREALLOC)
    assert "prealloc_symmetric_memory_pool" in on["sources"]["non_torch"]
    assert "NVLS" in on["unpriced"] and "NVLS" not in off["unpriced"]


def test_the_variable_sets_the_preallocation_and_zero_allocates_none(cli):
    assert (
        _engine(cli, "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE=8 " + R1 + " --enable-symm-mem")["non_torch_bytes"]
        == 2 * PREALLOC
    )
    none = _engine(cli, "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE=0 " + R1 + " --enable-symm-mem")
    assert none["non_torch_bytes"] == 0


def test_a_share_smaller_than_the_preallocation_fails_at_it(cli):
    # 0.985 of the B200's 183,359 MiB leaves 2,750 MiB: less than the 4 GiB
    tight = R1.replace("0.85", "0.985") + " --enable-symm-mem"
    got = _engine(cli, tight)
    assert not got["starts"]
    assert "pre-allocating the symmetric memory pool" in got["message"]
    assert "prealloc_symmetric_memory_pool" in got["raised_at"]
    assert _engine(cli, R1.replace("0.85", "0.985"))["starts"]


def test_a_release_whose_allocation_was_not_read_is_refused():
    with pytest.raises(K3PlanError, match="symmetric-memory allocation before 0.5.11 was not read"):
        parse_serve(R1 + " --enable-symm-mem", platform="gpu", release=(0, 5, 7))
    assert parse_serve(R1 + " --enable-symm-mem", platform="gpu", release=(0, 5, 11)).symm_mem_bytes == PREALLOC
