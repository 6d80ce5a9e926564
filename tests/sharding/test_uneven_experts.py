"""Uneven expert placement: an engine that places experts when EP does not divide them (vLLM
determine_expert_map: E // ep a rank, one more on the first E mod ep ranks) splits the expert axis
with the fullest device holding ceil(E / ep); a stack whose engine asserts divisibility refuses.
Golden numbers are written out by hand here (docs/k3-facts.md: 896 experts, 92 MoE layers of 93,
one routed expert 17,547,264 B in MXFP4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import list_stacks, load_stack
from k3plan.models import load_model
from k3plan.setup import make_setup
from k3plan.sharding import make_mesh, resolve
from k3plan.sharding.replay import replay, share
from k3plan.sharding.resolve import UnevenSplit, mesh_spans

EXPERT_BYTES = 17_547_264  # one routed expert, w1 + w2 + w3 MXFP4 (k3-facts.md §2)
MOE_LAYERS = 92  # 93 layers, first_k_dense_replace 1
NVL72 = ("-H", "nvidia-gb200-nvl72", "-t", "72", "--tp", "8", "--ep", "72")


def _expert_tensor():
    inv = load_model("kimi-k3").inventory
    return next(t for t in inv.text if t.role == "expert")


def test_896_experts_over_72_devices_split_13_and_12():
    """896 = 32 x 13 + 40 x 12: the first 896 mod 72 = 32 ranks hold 896 // 72 + 1 = 13."""
    assert 32 * 13 + 40 * 12 == 896
    u = UnevenSplit(axis="expert", size=896, mesh_axis="ep", mesh_size=72, tensors=1)
    assert (u.fullest, u.fuller_devices) == (13, 32)
    assert u.describe() == "experts 896 over ep 72: 32 devices hold 13, 40 hold 12"


def test_replay_splits_the_expert_axis_unevenly_only_where_the_stack_allows():
    t = _expert_tensor()
    mesh, _ = make_mesh(devices=72, tp=8, dp=9, ep=72)
    rules = {"expert": "ep", "mlp": "tp"}
    placed = replay(t, rules, sizes=mesh.axes, spans=mesh_spans(mesh), uneven=frozenset({"expert"}))
    assert [(s.split, s.fallback, s.uneven) for s in placed][0] == (True, False, True)
    assert share(t, placed) == (13, 896)  # the fullest device: 13 of the 896 experts
    refused = replay(t, rules, sizes=mesh.axes, spans=mesh_spans(mesh))
    assert [(s.split, s.fallback, s.uneven) for s in refused][0] == (False, True, False)
    # a divisible EP is not uneven: (1, shards), the bytes stay ceil(bytes / shards)
    even, _ = make_mesh(devices=64, tp=8, dp=8, ep=64)
    steps = replay(t, rules, sizes=even.axes, spans=mesh_spans(even), uneven=frozenset({"expert"}))
    assert share(t, steps) == (1, 64)


def test_the_column_replay_gives_the_same_share_as_one_mesh():
    """plan's columns (numpy, several meshes at once) and fit's scalar replay agree on the share."""
    from k3plan.step.weights import class_shards

    t = _expert_tensor()
    shards, fallbacks, (num, den) = class_shards(
        tensor=t,
        rules={"expert": "ep", "mlp": "tp"},
        tp=np.array([8, 8, 8]),
        dp=np.array([9, 8, 9]),
        ep_all=np.array([True, True, False]),
        uneven=frozenset({"expert"}),
    )
    # ep 72 (uneven: 13 of 896), ep 64 (even: 1/64), ep = tp = 8 (even: 1/8)
    assert shards.tolist() == [72, 64, 8] and fallbacks.tolist() == [0, 0, 0]
    assert num.tolist() == [13, 1, 1] and den.tolist() == [896, 64, 8]


@pytest.mark.parametrize("stack", list_stacks())
def test_every_bundled_stack_states_its_rule_with_a_source(stack):
    placed = load_stack(stack).sharding.expert_placement
    assert placed is not None and placed.sources and placed.holds.strip()
    assert (placed.uneven, placed.placement) in ((True, "linear"), (False, None))


def test_vllm_places_experts_unevenly_and_the_engines_that_assert_divisibility_do_not():
    assert load_stack("vllm").sharding.uneven_axes == frozenset({"expert"})
    for name in ("sglang", "dp-attention", "vllm-tpu", "jax-native"):
        assert load_stack(name).sharding.uneven_axes == frozenset(), name


def test_fit_on_nvl72_with_vllm_ep72_holds_13_experts_a_layer_on_the_fullest_device(cli):
    res = cli("fit", *NVL72, "--stack", "vllm", "--json")
    assert res.exit_code in (0, 3), res.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    j = json.loads(res.stdout)
    roles = j["weights_by_role"]
    assert roles["expert"] == MOE_LAYERS * 13 * EXPERT_BYTES == 20_986_527_744
    assert j["replicated"] == [] and j["fits"]
    assert j["per_device"]["weights_bytes"] == sum(roles.values())
    assert any(
        n.startswith("experts 896 over ep 72: 32 devices hold 13, 40 hold 12 (vllm-project/vllm determine_expert_map")
        for n in j["notes"]
    )
    # the layout's other roles are the TP split's, as with the experts over the TP group (ep 8: 112 each);
    # vLLM at dp 9 puts the experts over all 72 GPUs (--ep 8 there is refused), so 8 GPUs at tp 8 dp 1
    even = json.loads(
        cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "8", "--tp", "8", "--stack", "vllm", "--json").stdout
    )
    assert even["weights_by_role"]["expert"] == MOE_LAYERS * 112 * EXPERT_BYTES
    assert {k: v for k, v in even["weights_by_role"].items() if k != "expert"} == {
        k: v for k, v in roles.items() if k != "expert"
    }


def test_the_text_output_says_the_placement_is_uneven(cli):
    res = cli("fit", *NVL72, "--stack", "vllm")
    assert res.exit_code in (0, 3)  # 3: fits on the analytic temp's lower bound (issue 50)
    flat = " ".join(res.stdout.split())
    assert "experts 896 over ep 72: 32 devices hold 13, 40 hold 12" in flat and "the fullest binds" in flat
    assert "fallback" not in flat


def test_a_stack_that_asserts_divisibility_still_refuses(cli):
    # SGLang with DP attention (the dp-attention stack): experts over all 72 GPUs, which DeepEP refuses;
    # plain sglang at dp 9 holds them over each replica's 8 TP ranks, so --ep 72 is bad input there
    res = cli("fit", *NVL72, "--stack", "dp-attention", "--json")
    assert res.exit_code == 1
    j = json.loads(res.stdout)
    assert not j["fits"] and len(j["replicated"]) == 3 * MOE_LAYERS
    assert {(f["axis"], f["size"], f["mesh_size"]) for f in j["replicated"]} == {("expert", 896, 72)}
    assert not any(n.startswith("experts 896 over ep") for n in j["notes"])


@pytest.mark.parametrize("backend", ["deepep_high_throughput", "deepep_low_latency"])
def test_vllm_with_a_deepep_backend_refuses_an_uneven_split(cli, backend):
    """vLLM places experts unevenly, but DeepEP's dispatch asserts num_experts % num_ranks == 0: with
    --all2all-backend deepep_* the split falls back (exit 1), as sglang's does; the default backend
    (allgather_reducescatter) still splits 13 / 12."""
    assert load_stack(f"vllm:all2all_backend={backend}").sharding.uneven_axes == frozenset()
    assert load_stack("vllm").sharding.uneven_axes == frozenset({"expert"})
    res = cli("fit", *NVL72, "--stack", f"vllm:all2all_backend={backend}", "--json")
    assert res.exit_code == 1
    j = json.loads(res.stdout)
    assert {(f["axis"], f["size"], f["mesh_size"]) for f in j["replicated"]} == {("expert", 896, 72)}
    even = cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "64", "--tp", "8", "--ep", "64", "--stack", f"vllm:all2all_backend={backend}", "--json")  # fmt: skip
    assert even.exit_code in (0, 3), even.output  # 3: fits on the analytic temp's lower bound (issue 50)
    assert json.loads(even.stdout)["replicated"] == []  # 896 = 64 x 14: DeepEP runs


def test_the_fullest_device_binds_the_decode_step_expert_bytes():
    """The decode step reads the fullest device's experts: its expert bytes are 13/896 of the
    whole, not 1/72 (roofline.bounds.weight_sums, the sum plan's speed columns read too)."""
    from k3plan.roofline.bounds import weight_sums

    setup = make_setup(hardware="nvidia-gb200-nvl72", topology="72", tp=8, ep=72, stack="vllm")
    w = weight_sums(setup)
    assert w.expert_total_bytes == MOE_LAYERS * 896 * EXPERT_BYTES
    assert w.expert_bytes == pytest.approx(MOE_LAYERS * 13 * EXPERT_BYTES, rel=1e-15)
    assert setup.plan.shard_fraction(next(t for t in setup.model.inventory.text if t.role == "expert")) == 13 / 896
    r = fit(setup, Workload(context_tokens=131072, batch=1, prefill_chunk_tokens=8192))
    assert r.fits


def test_resolve_counts_the_uneven_tensors_once_an_axis():
    setup = make_setup(hardware="nvidia-gb200-nvl72", topology="72", tp=8, ep=72, stack="vllm")
    assert setup.plan.fallbacks == ()
    (u,) = setup.plan.uneven
    assert (u.axis, u.size, u.mesh_axis, u.mesh_size, u.tensors) == ("expert", 896, "ep", 72, 3 * MOE_LAYERS)
    st = load_stack("vllm")
    mesh, _ = make_mesh(devices=72, tp=8, dp=9, ep=72)
    plain = resolve(
        setup.model.inventory, mesh=mesh, rules=st.sharding.rules, role_overrides=st.sharding.role_overrides, source="t"
    )
    assert plain.uneven == () and len(plain.fallbacks) == 3 * MOE_LAYERS  # without the rule: today's refusal


def test_validate_refuses_an_uneven_placement_it_cannot_express(cli):
    """JAX shardings split evenly: validate says so in one line (exit 2) instead of a traceback."""
    res = cli("validate", *NVL72, "--stack", "vllm", "--target", "cpu", "--stage", "decode", "--layers", "2")
    assert res.exit_code == 2
    assert "experts 896 over ep 72" in res.stderr and "expected an --ep that divides the experts" in res.stderr
