"""vLLM on MI355X sizes its pool from the total torch reports, 287.98 GiB as vLLM prints it at start
(engines/vllm/memory.py ENGINE_VISIBLE_HBM), not the 288 GiB rocm-smi reports: two utilizations of one command differ
in their pools by exactly int(u1 x total) - int(u2 x total), everything else the same."""

from __future__ import annotations

import json

from k3plan.engines.vllm.memory import ENGINE_VISIBLE_HBM
from k3plan.units import GiB

V4 = (
    "VLLM_ROCM_USE_AITER=1 vllm serve deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --kv-cache-dtype fp8 "
    "--tensor-parallel-size 1 --data-parallel-size 4 --enable-expert-parallel --block-size 256 "
    "--max-num-batched-tokens 8192 --moe-backend aiter --gpu-memory-utilization {u}"
)


def _engine(cli, u: str) -> dict:
    r = cli("fit", "-H", "amd-mi355x", "-t", "4", "--serve", V4.format(u=u), "--engine-version", "0.26.0", "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_the_mi355x_total_is_the_one_vllm_prints():
    total, source = ENGINE_VISIBLE_HBM["amd-mi355x"]
    assert total == round(287.98 * GiB) and "287.98 GiB" in source
    # the InferenceX DeepSeek-V4 recipe's arithmetic on the same nodes: 0.95 of it is the 273.6 GiB it quotes
    assert round(0.95 * total / GiB, 1) == 273.6


def test_the_pool_moves_by_the_utilization_of_that_total(cli):
    # both pools positive (ROCm's graphs at #3068's figure, the bf16 wo_a copies the profile run caches: at 0.9 none is)
    lo, hi = _engine(cli, "0.95"), _engine(cli, "0.97")
    assert lo["kv_pool_bytes"] > 0
    assert lo["weights_bytes"] == hi["weights_bytes"] and lo["activation_bytes"] == hi["activation_bytes"]
    total = round(287.98 * GiB)
    assert hi["kv_pool_bytes"] - lo["kv_pool_bytes"] == int(0.97 * total) - int(0.95 * total)
    assert "287.98 GiB" in hi["sources"]["kv_pool"]
