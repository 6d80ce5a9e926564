"""The search's vectorised figures against the scalar functions they mirror: weight_budget (exact
bytes), fit (exact bytes and capacity) and decode_bound (TPOT to 1e-9)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import list_stacks, load_stack
from k3plan.hardware import list_hardware, load_hardware
from k3plan.models import load_model
from k3plan.plan.evaluate import evaluate
from k3plan.plan.reasons import reason_codes
from k3plan.plan.space import build_space, splits
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.roofline.comm import ep_spans_slices
from k3plan.setup import make_setup
from k3plan.sharding import make_mesh, resolve
from k3plan.step.weight_budget import weight_budget
from k3plan.step.weights import mesh_weights, tensor_classes


def sweep(devices: tuple[int, ...], every: int) -> list[tuple[int, int, int, int]]:
    """(devices, tp, dp, ep) for every ``every``-th valid split of each device count."""
    out = []
    for d in devices:
        tp, ep_all = splits(d)
        out += [(d, int(t), d // int(t), d if a else int(t)) for t, a in zip(tp, ep_all)]
    return out[::every]


K3_SPLITS = sweep((1, 8, 16, 32, 64, 72, 128, 192, 1152), 3)  # heads/expert/latent/vocab fallbacks included


@pytest.mark.parametrize(
    "model,stacks,split_list",
    [
        ("kimi-k3", ("vllm-tpu", "jax-native"), K3_SPLITS),
        ("kimi-k3", ("dp-attention", "sglang"), K3_SPLITS[::4]),
        ("deepseek-v3", ("vllm-tpu",), sweep((8, 16, 24, 64), 2)),
        ("kimi-linear-48b-a3b", ("sglang",), sweep((4, 8, 12, 32), 2)),
    ],
)
def test_vectorised_weights_equal_weight_budget(model, stacks, split_list):
    inv = load_model(model).inventory
    classes = tensor_classes(inv)
    assert sum(c.count for c in classes) == len(inv.text)
    tp = np.array([s[1] for s in split_list])
    dp = np.array([s[2] for s in split_list])
    ep_all = np.array([s[3] == s[0] for s in split_list])
    checked_fallbacks = 0
    for name in stacks:
        st = load_stack(name)
        vec = mesh_weights(classes=classes, stack=st, tp=tp, dp=dp, ep_all=ep_all)
        for i, (d, t, p, e) in enumerate(split_list):
            mesh, _ = make_mesh(devices=d, tp=t, dp=p, ep=e)
            sp = resolve(inv, mesh=mesh, rules=st.sharding.rules, role_overrides=st.sharding.role_overrides, source="t")
            wb = weight_budget(inventory=inv, plan=sp, stack=st)
            where = f"{model} {name} devices={d} tp={t} dp={p} ep={e}"
            assert int(vec.weights_bytes[i]) == wb.weights_bytes, where
            assert int(vec.replicated_bytes[i]) == wb.replicated_weights_bytes, where
            assert int(vec.fallbacks[i]) == len(wb.fallbacks), where
            checked_fallbacks += len(wb.fallbacks)
    if model == "kimi-k3":
        assert checked_fallbacks > 0  # the sweep exercises the divisibility fallbacks


@pytest.fixture(scope="module")
def wide():
    """The benchmark's space (every bundled hardware, all standard topologies, every KV dtype, seven
    chunks: benchmarks/bench_plan.py WIDE_CHUNKS) at 128K context and 8 sequences at once."""
    m = load_model("kimi-k3")
    space = build_space(
        hardware=[load_hardware(h) for h in list_hardware()],
        stacks=[load_stack(s) for s in list_stacks()],
        kv_dtypes=[None, "fp8", "fp8_ds_mla", "fp32"],
        chunks=[1024, 2048, 4096, 8192, 16384, 32768, 65536],
        max_chips=100_000,
        stacks_given=False,
        # as plan() builds it: a stack's splits rule reads the experts' width (tpu-inference's tp)
        experts=m.spec.moe.num_experts,
        expert_width=m.spec.moe.expert_intermediate,
    )
    cols = evaluate(space=space, model=m, context=131072, batch=8, eff=Efficiency()).cols
    return space, cols


def test_space_is_wide(wide):
    space, cols = wide
    assert space.size >= 100_000
    assert np.all(cols.pp * cols.tp * cols.dp == np.array([t.devices for t in space.topologies])[cols.topo])
    assert np.all((cols.ep == cols.tp) | (cols.ep == cols.tp * cols.dp))


def sample(cols, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    feasible = np.flatnonzero(cols.fallbacks == 0)
    special = [int(np.flatnonzero(cols.spans_slices)[0]), int(np.flatnonzero(cols.fallbacks > 0)[-1])]
    return special + rng.sample(range(cols.tp.shape[0]), n // 2) + rng.sample(list(feasible), n - n // 2)


TERMS = (
    "weights_bytes",
    "kv_bytes",
    "state_bytes",
    "temp_bytes",
    "reserve_bytes",
    "free_bytes",
    "kv_bytes_per_token",
    "state_bytes_per_sequence",
    "sequences",
)


def test_vectorised_fit_and_tpot_equal_the_scalar_functions(wide):
    space, cols = wide
    codes = reason_codes(cols=cols, concurrency=8, target_tpot_s=None, need_price=False)
    for i in sample(cols, 30, seed=4):
        topo = space.topologies[cols.topo[i]]
        kv = space.kv_dtypes[cols.variant[i] % len(space.kv_dtypes)]
        setup = make_setup(
            hardware=space.hardware[cols.hw[i]].name,
            topology=topo.text,
            tp=int(cols.tp[i]),
            pp=int(cols.pp[i]),
            ep=int(cols.ep[i]),
            dp=int(cols.dp[i]),
            stack=space.stacks[cols.stack[i]].name,
            kv_dtype=kv,
        )
        where = f"{setup.hardware.name} {topo.text} {setup.parallel} {setup.stack.name} kv={kv} chunk={cols.chunk[i]}"
        r = fit(setup, Workload(context_tokens=131072, batch=8, prefill_chunk_tokens=int(cols.chunk[i])))
        for k in TERMS:
            assert int(getattr(cols, k)[i]) == getattr(r.per_device, k), (k, where)
        assert int(cols.replicated_bytes[i]) == r.per_device.replicated_weights_bytes, where
        assert int(cols.max_sequences[i]) == r.capacity.max_sequences, where
        assert int(cols.fallbacks[i]) == len(r.replicated), where
        assert int(codes[i]) == r.reason and (codes[i] == 0) == r.fits, where  # one verdict
        d = decode_bound(setup, batch=8, context_tokens=131072, eff=Efficiency())
        assert cols.tpot_s[i] == pytest.approx(d.tpot_s, rel=1e-9), where
        assert cols.memory_s[i] == pytest.approx(d.memory_s, rel=1e-9), where
        assert cols.compute_s[i] == pytest.approx(d.compute_s, rel=1e-9), where
        assert cols.comm_s[i] == pytest.approx(d.comm.time_s, rel=1e-9, abs=1e-15), where
        assert bool(cols.spans_slices[i]) == ep_spans_slices(setup), where
