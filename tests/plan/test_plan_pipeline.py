"""plan on every hardware pairs only stacks that run there, and plans 16-GPU H200/B200 deployments
with pipeline stages or cross-node EP, saying why (issue 18: 'Done when')."""

import pytest

from k3plan.engines.stack import load_stack
from k3plan.hardware import list_hardware, load_hardware
from k3plan.plan import plan


@pytest.fixture(scope="module")
def everywhere():
    return plan(context=131072, top=100_000)


def test_every_row_on_every_hardware_runs_its_stack(everywhere):
    assert {r.hardware for r in everywhere.ranked} <= set(list_hardware())
    for r in everywhere.ranked:
        assert load_stack(r.stack).runs_on(load_hardware(r.hardware)), (r.hardware, r.stack)
    assert not any(r.stack == "vllm-tpu" for r in everywhere.ranked if r.hardware.startswith(("nvidia", "amd")))
    assert not any(r.stack in ("vllm", "sglang") for r in everywhere.ranked if r.hardware.startswith("tpu"))


@pytest.mark.parametrize("hw", ["nvidia-h200", "nvidia-b200"])
def test_16_gpus_plan_with_pp_or_cross_node_ep_and_say_why(hw):
    p = plan(hardware=[hw], context=131072, max_chips=16, top=1000)
    rows = [r for r in p.ranked if r.chips == 16]
    assert rows, f"{hw}: no 16-GPU row"
    for r in rows:  # 2 HGX hosts of 8: every 16-GPU split either pipelines over them or spans them with EP
        assert r.pp > 1 or r.ep > 8, r
    piped = [r for r in rows if r.pp == 2]
    assert piped and all(any(n.startswith("pp 2: each stage is 8 devices") for n in r.layout_notes) for r in piped)
    wide = [r for r in rows if r.ep > 8]
    for r in wide:
        assert any(
            n.startswith(f"cross-node EP: the EP group ({r.ep} devices) spans 2 NVLink domains") and "InfiniBand" in n
            for n in r.layout_notes
        ), r
    if hw == "nvidia-h200":  # the H200's 141 GB hold K3 only over 16 GPUs; both layouts are planned
        assert wide
    pipeline = next(a for a in p.assumptions if a.startswith("pipeline:"))
    assert "microbatches" in pipeline and "scale-up domains" in pipeline


def test_plan_renders_the_reason(cli):
    r = cli("plan", "-H", "nvidia-h200", "--context", "131072", "--max-chips", "16")
    text = " ".join(r.stdout.split())
    assert r.exit_code == 0
    assert "pp2" in text and "stage-to-stage send(s) a step over InfiniBand" in text
    assert "cross-node EP: the EP group (16 devices) spans 2 NVLink domains of 8" in text
    assert "--pp 2" in text or "cross-node EP" in text  # the pick's fit command carries its pp


def test_max_pp_one_searches_no_pipeline():
    p = plan(hardware=["nvidia-h200"], context=131072, max_chips=16, top=1000, max_pp=1)
    assert p.ranked and all(r.pp == 1 for r in p.ranked)
