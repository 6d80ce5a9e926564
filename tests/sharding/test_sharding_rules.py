"""Logical-axis rules -> ShardSpecs: 96 heads over tp=64 fall back to replication and are recorded;
user ShardSpecs (YAML and module:function); stack YAML errors."""

from __future__ import annotations

import re
import textwrap

import pytest
import yaml

from k3plan.budget.fit import check_workload, fit
from k3plan.engines.registry import stack_path
from k3plan.engines.stack import load_stack
from k3plan.errors import K3PlanError
from k3plan.setup import make_setup
from k3plan.sharding import make_mesh
from k3plan.step.weight_budget import runtime_bytes

W = check_workload(context_tokens=131072, batch=1, prefill_chunk_tokens=None)
LM_HEAD = "language_model.lm_head.weight"
KDA_HEAD_TENSORS = {
    "q_proj.weight",
    "k_proj.weight",
    "v_proj.weight",
    "q_conv1d.weight",
    "k_conv1d.weight",
    "v_conv1d.weight",
    "f_b_proj.weight",
    "b_proj.weight",
    "g_proj.weight",
    "o_proj.weight",
    "dt_bias",
}
MLA_HEAD_TENSORS = {"q_b_proj.weight", "kv_b_proj.weight", "g_proj.weight", "o_proj.weight"}
LAYER = re.compile(r"language_model\.model\.layers\.(\d+)\.self_attn\.(.+)")


def k3_layers():
    kda = {i - 1 for i in range(1, 94) if i % 4 and i != 93}  # full_attn_layers: 4, 8, ..., 92, 93
    mla = set(range(94 - 1)) - kda
    assert (len(kda), len(mla)) == (69, 24)
    return kda, mla


@pytest.mark.parametrize("topology", ["2x4x4", "4x4x4"])  # 64 devices (dp 1) and 128 devices (dp 2)
def test_tp64_heads_do_not_divide_and_every_affected_tensor_is_listed(topology):
    r = fit(make_setup(topology=topology, tp=64), W)
    assert r.replicated, "96 heads over tp=64 must fall back"
    for f in r.replicated:
        assert (f.axis, f.size, f.mesh_axis, f.mesh_size) == ("heads", 96, "tp", 64), f
        assert f.bytes_replicated >= 0
    listed: dict[int, set[str]] = {}
    for f in r.replicated:
        m = LAYER.fullmatch(f.tensor)
        assert m, f.tensor
        listed.setdefault(int(m.group(1)), set()).add(m.group(2))
    kda, mla = k3_layers()
    assert set(listed) == kda | mla  # every KDA and MLA layer
    for i in kda:
        assert listed[i] == KDA_HEAD_TENSORS, i
    for i in mla:
        assert listed[i] == MLA_HEAD_TENSORS, i
    assert len(r.replicated) == 69 * len(KDA_HEAD_TENSORS) + 24 * len(MLA_HEAD_TENSORS)
    assert any("fell back to replication" in w for w in r.warnings)
    # the fallbacks are what raises the replicated floor
    tp32 = fit(make_setup(topology="2x2x4", tp=32), W)
    assert r.per_device.replicated_weights_bytes - tp32.per_device.replicated_weights_bytes >= sum(
        f.bytes_replicated for f in r.replicated
    )


@pytest.mark.parametrize("topology, tp", [("2x2x4", 32), ("2x2x2", 16), ("2x2x1", 8), ("2x4x4", 32)])
def test_no_head_fallback_when_tp_divides_96(topology, tp):
    r = fit(make_setup(topology=topology, tp=tp), W)
    assert [f for f in r.replicated if f.axis == "heads"] == []
    assert r.replicated == []


def test_per_device_shapes_at_tp32():
    s = make_setup(topology="2x2x4", tp=32)
    inv = {t.name: t for t in s.model.inventory.text}
    q = inv["language_model.model.layers.0.self_attn.q_proj.weight"]
    assert s.plan.per_device_shape(q) == (12288 // 32, 7168)
    o = inv["language_model.model.layers.0.self_attn.o_proj.weight"]
    assert s.plan.per_device_shape(o) == (7168, 12288 // 32)
    experts = next(t for t in inv.values() if t.role == "expert")
    assert s.plan.per_device_shape(experts)[0] == 896 // 32


def _lm_head_bytes(s):
    t = next(t for t in s.model.inventory.text if t.name == LM_HEAD)
    return runtime_bytes(t, s.stack)


def test_user_yaml_replicating_lm_head_adds_its_size(tmp_path):
    spec = tmp_path / "specs.yaml"
    spec.write_text("shardspecs:\n  'language_model\\.lm_head\\.weight': [null, null]\n")
    base = make_setup(topology="2x2x4", tp=32)
    user = make_setup(topology="2x2x4", tp=32, shardspecs=str(spec))
    assert user.plan.specs[LM_HEAD].partition == (None, None)
    a, b = fit(base, W), fit(user, W)
    size = _lm_head_bytes(base)
    assert size == 163840 * 7168 * 2
    assert b.per_device.replicated_weights_bytes - a.per_device.replicated_weights_bytes == size
    assert b.per_device.weights_bytes - a.per_device.weights_bytes == size - size // 32
    assert "shardspecs" in b.provenance.weights


def test_user_module_function_specs(tmp_path, monkeypatch):
    (tmp_path / "k3_user_specs_mod.py").write_text(
        textwrap.dedent(f"""
        def specs():
            return {{{LM_HEAD!r}: [None, None]}}

        def bad():
            return {{"no.such.tensor": [None]}}

        def not_a_dict():
            return [1]
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    base = fit(make_setup(topology="2x2x4", tp=32), W)
    user = fit(make_setup(topology="2x2x4", tp=32, shardspecs="k3_user_specs_mod:specs"), W)
    assert user.per_device.replicated_weights_bytes - base.per_device.replicated_weights_bytes == 163840 * 7168 * 2
    with pytest.raises(K3PlanError, match="not in the inventory"):
        make_setup(topology="2x2x4", tp=32, shardspecs="k3_user_specs_mod:bad")
    with pytest.raises(K3PlanError, match="must return a dict"):
        make_setup(topology="2x2x4", tp=32, shardspecs="k3_user_specs_mod:not_a_dict")
    with pytest.raises(K3PlanError, match="cannot load"):
        make_setup(topology="2x2x4", tp=32, shardspecs="k3_user_specs_mod:missing")


def test_user_spec_that_does_not_divide_is_recorded(tmp_path):
    spec = tmp_path / "specs.yaml"
    spec.write_text("shardspecs:\n  'language_model\\.model\\.layers\\.0\\.self_attn\\.b_proj\\.weight': [tp, null]\n")
    r = fit(make_setup(topology="2x4x4", tp=64, shardspecs=str(spec)), W)  # b_proj is [96, 7168]
    hit = [f for f in r.replicated if f.tensor.endswith("layers.0.self_attn.b_proj.weight")]
    assert hit and hit[0].size == 96 and hit[0].mesh_size == 64


@pytest.mark.parametrize(
    "text, needle",
    [
        ("shardspecs:\n  '(': [null]\n", "bad pattern"),
        ("shardspecs:\n  'nothing\\.matches': [null]\n", "no pattern matches"),
        ("shardspecs:\n  'language_model\\.lm_head\\.weight': [null, null, null]\n", "3 entries for a 2-dim"),
        ("shardspecs:\n  'language_model\\.lm_head\\.weight': 5\n", "expected a list"),
        ("lm_head: [null]\n", "'shardspecs' key"),
    ],
)
def test_bad_user_specs(tmp_path, text, needle):
    spec = tmp_path / "specs.yaml"
    spec.write_text(text)
    with pytest.raises(K3PlanError, match=needle):
        make_setup(topology="2x2x4", tp=32, shardspecs=str(spec))


def test_every_bundled_stack_loads():
    from k3plan.engines.stack import list_stacks

    assert list_stacks() == ["dp-attention", "jax-native", "sglang", "torchtpu-vllm", "tpu-inference", "vllm"]
    for name in list_stacks():
        assert load_stack(name).name == name


def _stack_yaml(tmp_path, mutate):
    data = yaml.safe_load((stack_path("torchtpu-vllm")).read_text())
    mutate(data)
    p = tmp_path / "mystack.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_user_stack_yaml_works(tmp_path):
    p = _stack_yaml(tmp_path, lambda d: d.update(name="mine"))
    assert load_stack(p).name == "mine"


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d.update(flavour="x"), "unknown key 'flavour'"),
        (lambda d: d["kv_cache"].update(dtyp="bf16"), "unknown key 'kv_cache.dtyp'"),
        (lambda d: d.pop("reserve"), "missing key 'reserve'"),
        (lambda d: d["reserve"].update(fraction_of_usable_hbm=1.5), "reserve.fraction_of_usable_hbm"),
    ],
)
def test_bad_stack_yaml(tmp_path, mutate, needle):
    with pytest.raises(K3PlanError, match=re.escape(needle)):
        load_stack(_stack_yaml(tmp_path, mutate))


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"devices": 32, "tp": 5}, "--tp 5 x --dp"),
        ({"devices": 32, "tp": 0}, "--tp 0"),
        ({"devices": 32, "dp": 3}, "--dp 3 does not divide"),
        ({"devices": 32, "tp": 8, "ep": 4}, "--ep 4"),
    ],
)
def test_bad_mesh(kw, needle):
    with pytest.raises(K3PlanError, match=re.escape(needle)):
        make_mesh(**kw)


def test_mesh_ep_axes():
    mesh, par = make_mesh(devices=32, tp=8)
    assert (par.tp, par.dp, par.ep) == (8, 4, 32) and mesh.aliases["ep"] == ("dp", "tp")
    mesh, par = make_mesh(devices=32, tp=8, ep=8)
    assert mesh.aliases["ep"] == ("tp",)
