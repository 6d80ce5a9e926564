"""probes/op_shapes.py: the matmul and grouped-matmul shapes of a planned step, worked out by hand."""

from __future__ import annotations

import json

import pytest
from k3_testing import tiny_kimi_raw

from k3plan.probes.op_shapes import GroupedShape, MatmulShape, PlanShapes, cpu_factor, plan_shapes, scaled
from k3plan.setup import make_setup


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-k3")
    (folder / "config.json").write_text(json.dumps(tiny_kimi_raw()))
    # tpu-v7x 1x1x1: one chip of 2 devices, tp 2 (ep 2, dp 1)
    return make_setup(model=str(folder / "config.json"), hardware="tpu-v7x", topology="1x1x1", tp=2, stack="vllm-tpu")


def test_tiny_k3_tp2_matmul_shapes(tiny_setup):
    got = plan_shapes(tiny_setup, batch=4, context=64, chunk=16)
    assert "tp 2 ep 2 dp 1" in got.source and "decode batch 4 at context 64, prefill chunk 16" in got.source
    by_shape = {(s.m, s.n, s.k): s.ops for s in got.matmuls}
    # tiny K3: hidden 256, vocab 1024, 4 heads x 32 (KDA), MLA q_lora 64 / kv_lora 32 (+16 rope),
    # dense MLP 512, shared expert 128, latent 128, 8 experts. N x K = the weight [out, in] on the
    # device: split over tp 2 are vocab, heads, mlp -- on N for a column-parallel projection, on K for
    # a row-parallel one (o_proj, down_proj); replicated: the low-rank A projections, router and latent
    # projections.
    decode = {
        (4, 1024 // 2, 256),  # lm_head [vocab, hidden], vocab split
        (4, 128 // 2, 256),  # KDA q/k/v/g, MLA g_proj [4 x 32, 256]; shared gate/up [128, 256]; MLA q_a [64, 256] whole
        (4, 32, 256),  # KDA f_a_proj [32, 256], replicated
        (4, 128 // 2, 32),  # KDA f_b_proj [128, 32]
        (4, 4 // 2, 256),  # KDA b_proj [heads 4, 256]
        (4, 256, 128 // 2),  # o_proj [256, 128] row-parallel: its input split; shared down [256, 128] too
        (4, 512 // 2, 256),  # dense gate/up [512, 256]; dense down [256, 512] row-parallel: 256 x 256 too
        (4, 8, 256),  # router [8 experts, 256], replicated
        (4, 128, 256),  # latent down [128, 256], replicated
        (4, 256, 128),  # latent up [256, 128], replicated
        (4, 192 // 2, 64),  # MLA q_b_proj [4 x 48, q_lora 64]
        (4, 48, 256),  # MLA kv_a_proj_with_mqa [32 + 16, 256], replicated
        (4, 256 // 2, 32),  # MLA kv_b_proj [4 x 64, kv_lora 32]
    }
    prefill = {(16, n, k) for _, n, k in decode}  # the same weights at the chunk's 16 rows
    assert set(by_shape) == decode | prefill and len(got.matmuls) == 26
    assert set(by_shape[(4, 256, 64)]) == {
        f"decode:{n}"
        for n in ("kda.self_attn.o_proj", "mla.self_attn.o_proj", "moe.block_sparse_moe.shared_experts.down_proj")
    }
    assert set(by_shape[(4, 64, 256)]) == {
        f"decode:{n}"
        for n in (
            "kda.self_attn.q_proj",
            "kda.self_attn.k_proj",
            "kda.self_attn.v_proj",
            "kda.self_attn.g_proj",
            "mla.self_attn.g_proj",
            "moe.block_sparse_moe.shared_experts.gate_proj",
            "moe.block_sparse_moe.shared_experts.up_proj",
            "mla.self_attn.q_a_proj",
        )
    }
    assert by_shape[(16, 512, 256)] == ("prefill:global.lm_head",)
    assert got.matmuls[0].size == pytest.approx((4 * 512 * 256) ** (1 / 3))


def test_tiny_k3_tp2_grouped_shapes(tiny_setup):
    got = plan_shapes(tiny_setup, batch=4, context=64, chunk=16)
    g = {(s.tokens, s.k, s.n): s for s in got.grouped}
    assert set(g) == {(4, 128, 64), (4, 64, 128), (16, 128, 64), (16, 64, 128)}  # w1/w3 [E, 64, 128]; w2 [E, 128, 64]
    assert g[(4, 128, 64)].ops == ("decode:moe.block_sparse_moe.experts.w1", "decode:moe.block_sparse_moe.experts.w3")
    # decode: 4 sequences, top-2 of 8 experts, ep 2 -> 4 experts a device; expected experts touched
    # 8 (1 - (6/8)^4) = 8 x 175/256 = 5.46875; rows a touched group 4 x 2 / 5.46875; groups a device
    # 5.46875 x 4 / 8 = 2.73 -> 3, rows round(3 x 1.4629) = 4
    d = g[(4, 128, 64)]
    assert d.local_experts == 4 and d.groups == 3 and d.rows == 4
    assert d.rows_per_group == pytest.approx(8 / 5.46875, abs=1e-6)
    # prefill chunk 16: touched 8 (1 - 0.75^16) = 7.9198; rows a group 32 / 7.9198 = 4.0405; groups 3.96 -> 4
    p = g[(16, 64, 128)]
    assert p.groups == 4 and p.rows == 16 and p.rows_per_group == pytest.approx(32 / (8 * (1 - 0.75**16)), abs=1e-6)


def test_k3_tp32_decode_and_prefill():
    s = make_setup(hardware="tpu-v7x", topology="2x2x4", tp=32, stack="vllm-tpu")
    got = plan_shapes(s, batch=1, context=131072, chunk=8192)
    shapes = {(m.m, m.n, m.k) for m in got.matmuls}
    # K3 (k3-facts.md): hidden 7168, vocab 163840 -> 5120 a device at tp 32; latent 3584
    assert {(1, 163840 // 32, 7168), (8192, 163840 // 32, 7168), (1, 3584, 7168), (8192, 7168, 3584)} <= shapes
    g = {(x.tokens, x.k): x for x in got.grouped}
    # 896 experts / ep 32 = 28 a device; decode: 16 rows on 16 experts -> 1 row a group, one group here
    assert g[(1, 3584)].local_experts == 28 and g[(1, 3584)].rows_per_group == 1.0 and g[(1, 3584)].groups == 1
    # prefill 8192 tokens x 16 / 896 (every expert touched) = 146.29 rows a group, all 28 groups
    assert g[(8192, 3584)].rows_per_group == pytest.approx(8192 * 16 / 896, abs=1e-5) and g[(8192, 3584)].groups == 28
    assert (g[(8192, 3584)].k, g[(8192, 3584)].n) == (3584, 3072)


def test_cpu_factor_and_scaling():
    big = PlanShapes(source="x", matmuls=(MatmulShape(m=8192, n=5120, k=7168, ops=("a",)),), grouped=())
    # 8192 x 5120 x 7168 = 35 x 2^33; the budget 2^24 needs f^3 >= 35 x 2^9 = 17920: 16^3 = 4096 short, 32^3 fits
    assert cpu_factor(big) == 32
    assert [(s.m, s.n, s.k) for s in scaled(big, 32).matmuls] == [(256, 160, 224)]
    merged = PlanShapes(
        source="x",
        matmuls=(MatmulShape(m=1, n=64, k=64, ops=("a",)), MatmulShape(m=1, n=63, k=64, ops=("b",))),
        grouped=(),
    )
    assert cpu_factor(merged) == 1 and scaled(merged, 1) is merged
    experts = PlanShapes(
        source="x",
        matmuls=(),
        grouped=(
            GroupedShape(tokens=8192, local_experts=28, groups=28, rows_per_group=146.3, k=3584, n=3072, ops=("e",)),
        ),
    )
    # 28 x 3584 x 3072 = 308281344 weights; budget 2^21: f^2 >= 147, 8^2 = 64 short, 16^2 = 256 fits
    assert cpu_factor(experts) == 16
    (g,) = scaled(experts, 16).grouped  # 28/16 -> 2 experts and groups, 3584/16 = 224, 3072/16 = 192
    assert (g.local_experts, g.groups, g.rows_per_group, g.k, g.n, g.rows) == (2, 2, 146.3, 224, 192, 293)
    assert [(s.m, s.n, s.k, s.ops) for s in scaled(merged, 2).matmuls] == [(1, 32, 32, ("a", "b"))]  # 63/2 rounds up


def _decode_nk(setup) -> dict[str, tuple[int, int]]:
    """Each decode matmul op -> its (N, K), and each routed-expert op -> (local experts, N, K)."""
    got = plan_shapes(setup, batch=1, context=4096, chunk=4096)
    out: dict = {}
    for m in got.matmuls:
        out |= {op.removeprefix("decode:"): (m.n, m.k) for op in m.ops if op.startswith("decode:") and m.m == 1}
    for g in got.grouped:
        out |= {op.removeprefix("decode:"): (g.local_experts, g.n, g.k) for op in g.ops if op.startswith("decode:")}
    return out


def test_deepseek_v3_tp16_shapes_are_the_device_s():
    """DeepSeek-V3 (config.json: hidden 7168, 128 heads x (nope 128 + rope 64), v 128, q_lora 1536,
    kv_lora 512, dense MLP 18432, 256 experts x 2048, one shared expert 2048, vocab 129280) at tp 16 = ep 16
    (tpu-v7x 2x2x2: 8 chips of 2). vLLM: column-parallel (q_b, kv_b, gate/up, lm_head) split their output
    N; row-parallel (o_proj, down_proj; their partial sums all-reduced) split their input K."""
    s = make_setup(model="deepseek-v3", hardware="tpu-v7x", topology="2x2x2", tp=16, stack="vllm-tpu")
    assert _decode_nk(s) == {
        "mla.self_attn.q_a_proj": (1536, 7168),  # replicated
        "mla.self_attn.q_b_proj": (128 * 192 // 16, 1536),  # 1536 x 1536
        "mla.self_attn.kv_a_proj_with_mqa": (512 + 64, 7168),  # replicated
        "mla.self_attn.kv_b_proj": (128 * (128 + 128) // 16, 512),  # 2048 x 512
        "mla.self_attn.o_proj": (7168, 128 * 128 // 16),  # 7168 x 1024 (was 448 x 16384)
        "dense.mlp.gate_proj": (18432 // 16, 7168),
        "dense.mlp.up_proj": (18432 // 16, 7168),
        "dense.mlp.down_proj": (7168, 18432 // 16),  # 7168 x 1152 (was 448 x 18432)
        "moe.mlp.gate": (256, 7168),  # the router, replicated
        "moe.mlp.shared_experts.gate_proj": (2048 // 16, 7168),
        "moe.mlp.shared_experts.up_proj": (2048 // 16, 7168),
        "moe.mlp.shared_experts.down_proj": (7168, 2048 // 16),  # 7168 x 128 (was 448 x 2048)
        "global.lm_head": (129280 // 16, 7168),  # 8080 x 7168
        "moe.mlp.experts.gate_proj": (256 // 16, 2048, 7168),  # 16 experts a device, each whole
        "moe.mlp.experts.up_proj": (256 // 16, 2048, 7168),
        "moe.mlp.experts.down_proj": (256 // 16, 7168, 2048),
    }


def test_k3_tp32_shapes_are_the_device_s():
    """Kimi K3 (k3-facts.md: hidden 7168, 96 heads x 128 (MLA: nope 128 + rope 64, v 128), q_lora 1536,
    kv_lora 512, dense MLP 33792, 896 experts x 3072 on a 3584 latent, shared expert 6144, vocab 163840)
    at tp 32 = ep 32 (tpu-v7x 2x2x4)."""
    s = make_setup(hardware="tpu-v7x", topology="2x2x4", tp=32, stack="vllm-tpu")
    heads = 96 * 128 // 32  # 384: q/k/v/g and o_proj's head dim a device
    assert _decode_nk(s) == {
        **{f"kda.self_attn.{p}_proj": (heads, 7168) for p in "qkvg"},
        "kda.self_attn.o_proj": (7168, heads),  # row-parallel: 7168 x 384 (was 224 x 12288)
        "kda.self_attn.f_a_proj": (128, 7168),  # replicated low-rank A
        "kda.self_attn.f_b_proj": (heads, 128),
        "kda.self_attn.b_proj": (96 // 32, 7168),
        "mla.self_attn.q_a_proj": (1536, 7168),
        "mla.self_attn.q_b_proj": (96 * 192 // 32, 1536),  # 576 x 1536
        "mla.self_attn.kv_a_proj_with_mqa": (512 + 64, 7168),
        "mla.self_attn.kv_b_proj": (96 * (128 + 128) // 32, 512),  # 768 x 512
        "mla.self_attn.g_proj": (heads, 7168),
        "mla.self_attn.o_proj": (7168, heads),  # 7168 x 384 (was 224 x 12288)
        "dense.mlp.gate_proj": (33792 // 32, 7168),
        "dense.mlp.up_proj": (33792 // 32, 7168),
        "dense.mlp.down_proj": (7168, 33792 // 32),  # 7168 x 1056 (was 224 x 33792)
        "moe.block_sparse_moe.gate": (896, 7168),
        "moe.block_sparse_moe.routed_expert_down_proj": (3584, 7168),  # the latent projections, replicated
        "moe.block_sparse_moe.routed_expert_up_proj": (7168, 3584),
        "moe.block_sparse_moe.shared_experts.gate_proj": (6144 // 32, 7168),
        "moe.block_sparse_moe.shared_experts.up_proj": (6144 // 32, 7168),
        "moe.block_sparse_moe.shared_experts.down_proj": (7168, 6144 // 32),  # 7168 x 192 (was 224 x 6144)
        "global.lm_head": (163840 // 32, 7168),
        "moe.block_sparse_moe.experts.w1": (896 // 32, 3072, 3584),  # 28 experts a device on the latent
        "moe.block_sparse_moe.experts.w3": (896 // 32, 3072, 3584),
        "moe.block_sparse_moe.experts.w2": (896 // 32, 3584, 3072),
    }


def test_a_device_s_shape_holds_its_params_and_flops():
    """N x K is the device's params a tensor (the FLOPs are 2 x rows x that, whichever dim is split)."""
    from k3plan.speed.stage import decode_op_costs
    from k3plan.step.ops import weight_groups_of_setup

    s = make_setup(model="deepseek-v3", hardware="tpu-v7x", topology="2x2x2", tp=16, stack="vllm-tpu")
    params = {g.name: g.params for g in weight_groups_of_setup(s)}
    mm = [c for c in decode_op_costs(s, batch=3, context=64) if c.kind == "matmul"]
    assert len(mm) == 13 and all(c.n * c.k == params[c.name] and c.flops == 2 * 3 * c.n * c.k for c in mm)
