"""gpu-moe: a decode step's routed-MoE calls at the latency aiconfigurator measured for SGLang's kernel on the GPU at
the model's shape (k3plan/evidence/gpu_moe.yaml), in place of what the other terms ON price for them (the routed
grouped GEMMs, their kernels at the floor, the busiest EP rank's excess). Scored and left OFF (admitted.json): the
measured calls move the B200 cases further off (the MoE was not what their step lacks)."""

from __future__ import annotations

import pytest

from k3plan.app.setup import setup_from
from k3plan.engines.sglang.kernels import routed_call_kernels
from k3plan.errors import K3PlanError
from k3plan.evidence.gpu_moe import FILE, gpu_moe_tables
from k3plan.speed.gpu_moe import call_seconds, moe_table
from k3plan.speed.serving import ModelAt
from k3plan.speed.terms import default_terms

NAME = "routed MoE calls at their measured latency"
OTHERS = ("routed experts of the busiest EP rank",)
DSV3 = (7168, 2048, 256, 8, 8)  # hidden, intermediate, experts, top-k, the MoE group's TP


def test_tables_load_and_a_row_above_the_physical_peak_is_refused(tmp_path):
    ids = {t.id for t in gpu_moe_tables()}
    assert {t.hardware for t in gpu_moe_tables()} == {"nvidia-h100-sxm", "nvidia-h200", "nvidia-b200"}
    assert all(
        t.source.startswith("https://github.com/ai-dynamo/aiconfigurator/blob/095f58a51/") for t in gpu_moe_tables()
    )
    assert len(ids) == 3
    # 8 experts x 3 x 7,168 x 2,048 / 8 bytes at the B200's 7.7 TB/s take 5.7 us: a 5 us row is refused
    p = tmp_path / "moe.yaml"
    p.write_text(FILE.read_text().replace("[[1, 0.035304]", "[[1, 0.005000]"))
    with pytest.raises(K3PlanError, match="above the physical peak"):
        gpu_moe_tables(p)


def test_a_call_is_linear_between_rows_and_clamped_outside():
    t = moe_table("nvidia-b200", "sglang", DSV3)
    assert t is not None and t.kernel.startswith("sglang_flashinfer_trtllm_moe")
    assert call_seconds(t, 1) == pytest.approx(35.304e-6) and call_seconds(t, 64) == pytest.approx(180.974e-6)
    assert call_seconds(t, 56) == pytest.approx((166.710 + 180.974) / 2 * 1e-6)
    assert call_seconds(t, 10**6) == pytest.approx(t.rows[-1][1] * 1e-3)
    assert moe_table("nvidia-h20", "sglang", DSV3) is None  # not measured there
    assert moe_table("nvidia-b200", "sglang", (*DSV3[:4], 4)) is None  # another shape


@pytest.mark.parametrize(("hardware", "batch"), [("nvidia-h200", 64), ("nvidia-b200", 8)])
def test_the_routed_calls_cost_what_the_table_says_and_nothing_else(hardware, batch):
    """With the term ON, the routed MoE's share of the step (its grouped GEMMs, its kernels at the floor, the
    busiest EP rank's excess and the term) is 58 calls at the table's latency for the step's tokens."""
    setup = setup_from(
        model="deepseek-v3",
        hardware=hardware,
        topology="8",
        tp=8,
        ep=None,
        dp=None,
        stack="sglang:moe_a2a_backend=none",
    )
    terms = default_terms() | {"gpu-moe"}
    decode = ModelAt(setup, setup.hardware, evidence=None, terms=terms).speed(batch, 1536, 1024).decode
    gemms = sum(o.expected_s for o in decode.ops if o.kind == "grouped_matmul" and "shared" not in o.name)
    term = next(o for o in decode.ops if o.name == NAME)
    excess = sum(o.expected_s for o in decode.ops if o.name in OTHERS)
    floor = 2.1e-6 * routed_call_kernels(hardware) * 58
    call = call_seconds(moe_table(hardware, "sglang", DSV3), batch)
    assert gemms + floor + excess + term.expected_s == pytest.approx(58 * call)
    assert "evidence/gpu_moe.yaml#" in term.label and "power_law_1.01" in term.label
    assert routed_call_kernels(hardware) == {"nvidia-h200": 8, "nvidia-b200": 9}[hardware]


def test_it_prices_nothing_where_no_table_or_correction_holds():
    def term_of(model, hardware, stack, terms):
        setup = setup_from(model=model, hardware=hardware, topology="8", tp=8, ep=None, dp=None, stack=stack)
        decode = ModelAt(setup, setup.hardware, evidence=None, terms=terms).speed(8, 1536, 1024).decode
        return [o for o in decode.ops if o.name == NAME]

    on = default_terms() | {"gpu-moe"}
    assert term_of("deepseek-v3", "nvidia-h200", "sglang:moe_a2a_backend=none", on)
    assert not term_of("deepseek-v3", "nvidia-h200", "sglang", on)  # DeepEP's all-to-all: not the call measured
    assert not term_of("kimi-k3", "nvidia-b300", "sglang:moe_a2a_backend=none", on)  # another shape, no table
    assert not term_of("deepseek-v3", "nvidia-h200", "vllm", on)  # vLLM's kernel: not measured here
    # it corrects sglang-kernels' count: with that OFF (or the kernel floor under it), it is not priced
    assert not term_of("deepseek-v3", "nvidia-h200", "sglang:moe_a2a_backend=none", on - {"sglang-kernels"})
    assert not term_of("deepseek-v3", "nvidia-h200", "sglang:moe_a2a_backend=none", on - {"kernel-floor"})
