"""vLLM's block for a hybrid MLA + linear-attention model (Kimi-K3) by release: from 0.27.0 Platform.
_align_hybrid_block_size aligns it to max(the kernel block, block_size, 128) where the model uses MLA (vllm 0.27.0,
0.28.0, 0.33.0, 0.34.0 wheels, vllm/platforms/interface.py); 0.24.0-0.26.x to the default MLA backend's smallest
kernel block alone (FlashInfer MLA's 32 on the SM100 family, FLASH_ATTN_MLA's 16 on SM90, FlashMLA's 64 there with an
fp8 cache: vllm 0.24.0-0.26.0 wheels, vllm/platforms/cuda.py _get_backend_priorities, v1/attention/backends/mla/*.py
get_supported_kernel_block_sizes).
The budget's page and the engine's pool read the same block (Stack.hybrid_align)."""

from __future__ import annotations

import json
import math

import pytest

from k3plan.engines.vllm.releases import HYBRID_MLA_ALIGN_FROM, hybrid_mla_align

K3 = "vllm serve moonshotai/Kimi-K3 -tp 8 --kv-cache-dtype fp8 --max-model-len 131072"


def _fit(cli, version: str | None) -> dict:
    args = ["fit", "-H", "nvidia-b200", "-t", "8", "--serve", K3, "--json"]
    r = cli(*(args + (["--engine-version", version] if version else [])))
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_the_rule_starts_at_0_27_0():
    assert HYBRID_MLA_ALIGN_FROM == (0, 27, 0)
    assert hybrid_mla_align((0, 26, 0), 64) is None
    got = hybrid_mla_align((0, 27, 0), 64)
    assert got is not None and got[0] == 128 and "_align_hybrid_block_size" in got[1]
    assert hybrid_mla_align((0, 33, 0), 256) is not None and hybrid_mla_align((0, 33, 0), 256)[0] == 256  # type: ignore[index]


@pytest.mark.parametrize(("version", "align"), [("0.26.0", 32), ("0.27.0", 128), (None, 128)])
def test_k3_fp8_block_follows_the_release(cli, version, align):
    """The block is align x cdiv(the KDA state page, align x the MLA page a token): the budget's and the engine's."""
    d = _fit(cli, version)
    lay = d["cache_layout"]
    kv = lay["kv_bytes_per_token_layer"]
    state = lay["state_bytes_per_layer_unpadded"]
    want = align * math.ceil(state / (align * kv))
    assert lay["block_tokens"] == want == d["engine"]["block_tokens"]
    assert "_align_hybrid_block_size" in json.dumps(d["engine"])


def test_the_kernel_block_before_0_27_0():
    """0.24.0-0.26.x align a hybrid MLA block to the default backend's smallest kernel block, by GPU family."""
    got = hybrid_mla_align((0, 25, 0), 64, hardware="nvidia-b300", fp8_kv=True)
    assert got is not None and got[0] == 32 and "FLASHINFER_MLA" in got[1]
    got = hybrid_mla_align((0, 26, 0), 64, hardware="nvidia-h200")
    assert got is not None and got[0] == 16
    got = hybrid_mla_align((0, 26, 0), 64, hardware="nvidia-h200", fp8_kv=True)
    assert got is not None and got[0] == 64
    assert hybrid_mla_align((0, 23, 0), 64, hardware="nvidia-b200") is None
    assert hybrid_mla_align((0, 26, 0), 64, hardware="amd-mi355x") is None
