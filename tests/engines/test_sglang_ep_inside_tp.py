"""SGLang's --ep-size between 1 and --tp-size: ep_size ranks of whole experts, each split over moe_tp_size = tp_size //
ep_size (sglang 0.5.7 wheel, distributed/parallel_state.py initialize_model_parallel) -- the same routed bytes a
device as EP over every rank. The sgl-cookbook Kimi-K2 B200 throughput line runs --tp 8 --dp 4 --ep 4 with DP
attention (tests/engines/cases/sglang-cookbook-kimi-k2-b200-tp8-dp4-ep4-dpattn.yaml); k3plan refused it before."""

from __future__ import annotations

import json

import pytest

K2 = (
    "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2-Instruct --tp 8 --dp 4 --enable-dp-attention "
    "--trust-remote-code"
)


def _engine(cli, extra: str) -> dict:
    r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--engine-version", "0.5.6.post1", "--serve", K2 + extra, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


@pytest.mark.parametrize("ep", [2, 4])
def test_ep_inside_the_tp_group_holds_what_ep_over_every_rank_holds(cli, ep):
    inside, every = _engine(cli, f" --ep {ep}"), _engine(cli, " --ep 8")
    assert inside["weights_bytes"] == every["weights_bytes"]
    assert inside["kv_pool_bytes"] == every["kv_pool_bytes"]


def test_an_ep_size_that_does_not_divide_the_tp_size_is_one_line(cli):
    r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", K2 + " --ep 3")
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "--ep-size 3 does not divide --tp-size 8" in r.output
