"""DeepSeek-V4's FP4 expert scales as SGLang holds them after loading (engines/sglang/fp4_scales.py; sglang 0.5.12-0.5.23
wheels, srt/layers/quantization/fp8.py Fp8MoEMethod.process_weights_after_loading_block_quant, layers/moe/mega_moe.py
build_mega_moe_experts_weights, layers/deep_gemm_wrapper/configurer.py DEEPGEMM_SCALE_UE8M0; DeepGEMM
csrc/apis/layout.hpp transform_sf_into_required_layout): packed to UE8M0 int32 on an SM100 GPU under DeepEP (once) and
MegaMoE (twice), fp32 on an SM90 GPU there and without an all-to-all before 0.5.19."""

from __future__ import annotations

import json

import pytest

from k3plan.app.setup import setup_from
from k3plan.engines.serve import parse_serve
from k3plan.engines.sglang.fp4_scales import F32, FI_MXFP4_AUTO_FROM, PACKED, PACKED_TWICE, dsv4_fp4_expert_format
from k3plan.models.formats import get_format

PRO = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --trust-remote-code"


def test_the_packed_scales_are_one_byte_a_block_at_v4_shapes_and_pad_elsewhere():
    """DeepGEMM's packing: four UE8M0 bytes an int32, rows aligned to 4, a row's scales to whole words -- the E8M0
    checkpoint's 1 B a 32-block where out % 4 == 0 and in % 128 == 0 (V4's expert shapes), more elsewhere."""
    packed, twice, mx, f32 = (get_format(n) for n in (PACKED, PACKED_TWICE, "mxfp4", F32))
    v4 = (48, 6144, 7168)  # [local experts, 2 x 3072, 7168]: V4-Pro's w13 at EP 8
    assert packed.nbytes(v4) == mx.nbytes(v4)
    scales = 48 * 6144 * 7168 // 32
    assert f32.nbytes(v4) - packed.nbytes(v4) == 3 * scales
    assert twice.nbytes(v4) == packed.nbytes(v4) + scales and twice.read_nbytes(v4) == packed.nbytes(v4)
    odd = (1, 6, 160)  # 6 rows -> 8, 5 scales a row -> 2 words
    assert packed.nbytes(odd) == 6 * 160 // 2 + 8 * 2 * 4


@pytest.mark.parametrize(
    ("release", "device", "a2a", "runner", "env", "want"),
    [
        ((0, 5, 15), "nvidia-b200", "megamoe", None, {}, PACKED_TWICE),
        ((0, 5, 23), "nvidia-gb300-nvl72", "megamoe", None, {}, PACKED_TWICE),
        ((0, 5, 15), "nvidia-h200", "megamoe", None, {}, None),  # SM90: DeepGEMM does not pack there
        ((0, 5, 12), "nvidia-b300", "deepep", None, {}, PACKED),
        ((0, 5, 23), "nvidia-gb200-nvl72", "deepep", "deep_gemm", {}, PACKED),
        ((0, 5, 15), "nvidia-b200", "deepep", None, {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}, None),
        ((0, 5, 15), "nvidia-b200", "deepep", "triton", {}, None),  # not the DeepGEMM runner: fp32 as the stack
        ((0, 5, 15), "nvidia-h200", "deepep", None, {}, None),  # SM90: DEEPGEMM_SCALE_UE8M0 false, fp32 as the stack
        ((0, 5, 15), "nvidia-b200", "megamoe", "marlin", {}, None),  # the runner's own choice
        ((0, 5, 12), "nvidia-h20", "none", None, {}, F32),  # auto runs Triton on Fp8MoEMethod
        ((0, 5, 18), "nvidia-b200", "none", "auto", {}, F32),
        (FI_MXFP4_AUTO_FROM, "nvidia-b200", "none", None, {}, None),  # flashinfer_mxfp4: E8M0, the stack's none
        (None, "nvidia-h200", "none", None, {}, None),  # the newest read
        ((0, 5, 15), "nvidia-h200", "none", "flashinfer_mxfp4", {}, None),
        ((0, 5, 15), "amd-mi355x", "deepep", None, {}, None),
        ((0, 5, 11), "nvidia-b200", "deepep", None, {}, None),  # before the releases read
    ],
)
def test_the_rule_by_release_gpu_all_to_all_and_runner(release, device, a2a, runner, env, want):
    got = dsv4_fp4_expert_format(release=release, device=device, a2a=a2a, runner=runner, env=env)
    assert (got[0] if got else None) == want


def test_a_megamoe_command_on_b200_holds_the_packed_scales_twice():
    q = parse_serve(
        PRO + " --dp 8 --enable-dp-attention --moe-a2a-backend megamoe",
        platform="gpu",
        device_gib=178.4,
        device_name="nvidia-b200",
        release=(0, 5, 15),
    )
    assert q.expert_format is not None and q.expert_format[0] == PACKED_TWICE
    q = parse_serve(PRO + " --moe-a2a-backend deepep", platform="gpu", device_gib=140.0, device_name="nvidia-h200")
    assert q.expert_format is None


def test_the_repacked_scales_leave_a_gpu_the_fp32_bytes_less():
    """V4-Pro at EP 8 on B200 under megamoe: 4 B a 32-block of fp32 against 2 B packed twice, exactly."""
    kw = dict(model="deepseek-v4-pro", hardware="nvidia-b200", topology="8", tp=1, ep=8, dp=8)
    # the B200's own rule packs them twice (Stack.on_hardware): the fp32 form set over it, as the stack's choice holds
    f32 = setup_from(**kw, stack="dp-attention:moe_a2a_backend=megamoe", expert_format=(F32, "test"))
    twice = setup_from(**kw, stack="dp-attention:moe_a2a_backend=megamoe")
    assert twice.stack.runtime_format("expert", "ds_fp4") == PACKED_TWICE
    experts = [t for t in f32.model.inventory.text if t.role == "expert" and t.fmt == "ds_fp4"]
    blocks = sum(t.params for t in experts) // 32 // 8
    assert f32.weights.role_bytes("expert") - twice.weights.role_bytes("expert") == pytest.approx(2 * blocks, rel=1e-6)


def test_megamoe_holds_one_packed_copy_more_than_deepep_on_b200(cli):
    """The same V4-Pro command on 8 B200 under SGLang 0.5.15 (the cookbook's MegaMoE cell's release: tests/engines/
    cases/sglang-cookbook-dsv4-pro-b200-tp8-dp8-megamoe.yaml): MegaMoE's weights a GPU are DeepEP's plus one packed
    scale copy, 1 B a 32-block of the GPU's routed experts; both start."""
    got = {}
    for a2a in ("megamoe", "deepep"):
        serve = PRO + f" --dp 8 --enable-dp-attention --moe-a2a-backend {a2a} --mem-fraction-static 0.835"
        r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", serve, "--engine-version", "0.5.15", "--json")
        eng = json.loads(r.stdout)["engine"]
        assert r.exit_code == 0 and eng["starts"]
        got[a2a] = eng["weights_bytes"]
    kw = dict(model="deepseek-v4-pro", hardware="nvidia-b200", topology="8", tp=1, ep=8, dp=8)
    experts = [
        t
        for t in setup_from(**kw, stack="dp-attention").model.inventory.text
        if t.role == "expert" and t.fmt == "ds_fp4"
    ]
    blocks = sum(t.params for t in experts) // 32 // 8
    assert got["megamoe"] - got["deepep"] == pytest.approx(blocks, rel=1e-6)


def test_the_jit_deepgemm_switch_is_read_as_sglang_parses_it():
    from k3plan.errors import K3PlanError

    cmd = PRO + " --moe-a2a-backend deepep"
    q = parse_serve("SGLANG_ENABLE_JIT_DEEPGEMM=0 " + cmd, platform="gpu", device_gib=178.4, device_name="nvidia-b200")
    assert q.expert_format is None  # no DeepGEMM: the fp32 scales stay, as the stack's deepep choice holds them
    q = parse_serve(cmd, platform="gpu", device_gib=178.4, device_name="nvidia-b200")
    assert q.expert_format is not None and q.expert_format[0] == PACKED
    with pytest.raises(K3PlanError, match="not a valid boolean"):
        parse_serve(
            "SGLANG_ENABLE_JIT_DEEPGEMM=maybe " + cmd, platform="gpu", device_gib=178.4, device_name="nvidia-b200"
        )


@pytest.mark.parametrize(
    ("model", "path", "hardware"),
    [
        ("deepseek-v4-flash", "deepseek-ai/DeepSeek-V4-Flash", "nvidia-b200"),
        ("deepseek-v4-flash", "deepseek-ai/DeepSeek-V4-Flash", "nvidia-h200"),
        ("deepseek-v4-pro", "deepseek-ai/DeepSeek-V4-Pro", "nvidia-gb300-nvl72"),
    ],
)
def test_a_plain_fit_holds_the_experts_as_the_equivalent_serve_command(cli, model, path, hardware):
    """fit without --serve under SGLang's stack (its DeepEP all-to-all, the newest release read) and fit --serve of
    the launch_server command that runs the same (--tp 8 --moe-a2a-backend deepep, no release named) hold the same
    weights a GPU: the FP4 experts' scales packed on an SM100 GPU, fp32 on an SM90 one, by one rule
    (Stack.expert_format_on). Until session 51 the plain fit priced fp32 on every GPU (V4-Flash on 8 B200: 24.84 GB a
    GPU against --serve's 21.59)."""
    plain = cli("fit", "-m", model, "-H", hardware, "-t", "8", "--tp", "8", "--stack", "sglang", "--json")
    serve = f"python -m sglang.launch_server --model-path {path} --tp 8 --moe-a2a-backend deepep"
    served = cli("fit", "-H", hardware, "-t", "8", "--serve", serve, "--json")
    a, b = json.loads(plain.stdout), json.loads(served.stdout)
    assert (a["parallel"], a["stack"]) == (b["parallel"], b["stack"])
    # both budgets hold, beside the model's tensors, what SGLang builds with them and its start check counts in the
    # weights (DeepSeek-V4's RoPE tables: engines/sglang/memory.py sglang_loaded_extras, the plain fit's through
    # Stack.engine_held since session 52; until then the plain fit priced the model's tensors alone)
    assert b["weights_by_role"]["rope_tables"] > 0
    assert a["per_device"]["weights_bytes"] == b["per_device"]["weights_bytes"]
    assert a["weights_by_role"] == b["weights_by_role"]
