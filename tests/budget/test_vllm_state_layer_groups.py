"""vLLM's hybrid KV-cache manager pads K3's 69 KDA layers to 3 groups of 24 (the MLA count), 72 layer pages a
request, while a decode step reads 69 (vllm-project/vllm vllm/v1/core/kv_cache_utils.py
_get_kv_cache_groups_uniform_page_size / get_kv_cache_config_from_groups; engines/vllm/stack.yaml state)."""

from __future__ import annotations

import json

import numpy as np
from fit_helpers import cached_setup

from k3plan.budget.fit import Workload, fit
from k3plan.step.memory import held_state_layers

# K3 at tp16: 96 KDA heads / 16 = 6 a GPU; a KDA layer = recurrent 6 x 128 x 128 f32 + conv (4 - 1) x
# (q, k, v: 3 x 6 x 128) bf16 = 407,040 B; the MLA page that holds it: 64 x ceil(407,040 / (64 x 1,152)) = 384
# tokens x 1,152 B (576 bf16 values) = 442,368 B, the state page padded up to it
PAGE = 384 * 576 * 2
HELD = 72 * PAGE  # 3 groups x 24 layers: 31,850,496 B a GPU
READ = 69 * PAGE  # 30,523,392 B


def _fit(stack: str):
    setup = cached_setup(hardware="nvidia-h200", topology="2x8", tp=16, ep=16, dp=1, stack=stack)
    return setup, fit(setup, Workload(context_tokens=8192, batch=4))


def test_group_rule():
    assert 6 * 128 * 128 * 4 + 3 * 3 * 6 * 128 * 2 == 407_040 and PAGE == 442_368
    assert held_state_layers(24, 69, True) == 72  # min count 24: 69 -> 3 groups of 24
    assert held_state_layers(24, 69, False) == 69
    assert held_state_layers(12, 13, True) == 13  # 13 < 1.5 x 12: group size 13, nothing padded
    assert held_state_layers(10, 30, True) == 30
    assert held_state_layers(24, 0, True) == 0 and held_state_layers(0, 69, True) == 69
    got = held_state_layers(np.array([24, 24, 12]), np.array([69, 69, 13]), np.array([True, False, True]))
    assert got.tolist() == [72, 69, 13]


def test_vllm_holds_72_layer_pages_and_reads_69():
    _, r = _fit("vllm")
    assert r.cache_layout.state_bytes_per_layer == PAGE
    assert r.cache_layout.state_bytes_per_slot == READ
    assert r.per_device.state_bytes_per_sequence == HELD
    assert r.per_device.state_bytes == 4 * HELD
    assert "72 layer pages held a sequence, a decode step reads 69" in r.provenance.state


def test_plan_row_is_fit_for_vllm(cli):
    res = cli("plan", "-H", "nvidia-h200", "--stacks", "vllm", "--max-chips", "16", "--context", "8192",
              "--concurrency", "4", "--top", "50", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    r = next(x for x in json.loads(res.stdout)["ranked"] if x["tp"] == 16 and x["pp"] == 1)
    f = cli("fit", "-H", "nvidia-h200", "-t", r["topology"], "--tp", r["tp"], "--ep", r["ep"], "--stack", "vllm",
            "--context", "8192", "--batch", "4", "--chunk", r["chunk_tokens"], "--json")  # fmt: skip
    assert f.exit_code in (0, 3), f.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    d = json.loads(f.stdout)
    assert d["per_device"]["state_bytes_per_sequence"] == HELD
    for k in ("state_bytes", "state_bytes_per_sequence", "kv_bytes", "free_bytes"):
        assert r["per_device"][k] == d["per_device"][k], k
