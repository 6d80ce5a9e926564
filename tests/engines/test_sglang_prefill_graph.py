"""SGLang's prefill CUDA graph by release (engines/sglang/prefill_graph.py): on by default from 0.5.10 for a model the
release's rules leave it on for, and then reserved in the derived mem_fraction_static, 1.5 x 1024 MiB for an MLA model
before the 10 GiB floor (sglang 0.5.10 wheel server_args.py ServerArgs._handle_gpu_memory_settings 'For piecewise cuda
graphs'; 0.5.16-0.5.18 ServerArgs.reserve_for_graph_mb, 0.5.19-0.5.23 arg_groups/memory_hook.py reserve_for_graph_mb),
+ 1 x 1024 for a breakable graph under DeepEP from 0.5.17 ('Prefill-BCG DeepEP delta'). Which releases turn it on
for which model, read in the 0.5.10-0.5.23 wheels: the module docstring."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.sglang.prefill_graph import prefill_graph

R = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"


def _rel(text: str) -> tuple[int, int, int]:
    a, b, c = (int(x) for x in text.split("."))
    return a, b, c


def _on(release: str, model: str, **kw) -> bool:
    args = {"cuda": True, "dp_attention": False, "a2a": "none", "pp": 1, **kw}
    got = prefill_graph(_rel(release), model_type=model, **args)
    assert got is not None
    return got.on


@pytest.mark.parametrize(
    "model, on_in",
    [
        # DeepseekV3ForCausalLM (DeepSeek-V3 / R1, Kimi-K2): tc_piecewise 0.5.10-0.5.14; breakable 0.5.15-0.5.17 off for an
        # MLA model ('MLA attention'), that rule gone in the 0.5.18 wheel
        ("deepseek_v3", {"0.5.9": False, "0.5.10": True, "0.5.14": True, "0.5.15": False, "0.5.17": False,
                         "0.5.18": True, "0.5.23": True}),
        # KimiK25ForConditionalGeneration (multimodal): off under tc_piecewise's 'multimodal model' until the 0.5.16
        # allowlist, which sends it to tc_piecewise (0.5.16-0.5.17); breakable-allowlisted from 0.5.18
        ("kimi_k25", {"0.5.10": False, "0.5.14": False, "0.5.15": False, "0.5.16": True, "0.5.17": True,
                      "0.5.18": True, "0.5.23": True}),
        # KimiK3ForConditionalGeneration (MLA + KDA): breakable from 0.5.18 until the 0.5.20 'KDA hybrid linear
        # attention' rule (uses_kda_attention: its text_config's linear_attn_config.kda_layers)
        ("kimi_k3", {"0.5.17": False, "0.5.18": True, "0.5.19": True, "0.5.20": False, "0.5.23": False}),
        ("kimi_linear", {"0.5.10": True, "0.5.14": True, "0.5.15": False, "0.5.19": True, "0.5.20": False}),
        # DeepSeek-V4: the tc_piecewise arch blacklist (0.5.12-0.5.14), the breakable 'DeepSeek-V4' rule after
        ("deepseek_v4", {"0.5.12": False, "0.5.15": False, "0.5.23": False}),
    ],
)  # fmt: skip
def test_the_prefill_graph_is_on_by_release_and_model(model, on_in):
    assert {r: _on(r, model) for r in on_in} == on_in


def test_what_turns_the_prefill_graph_off():
    # a non-CUDA GPU: tc_piecewise's 'non-CUDA hardware' to 0.5.21, no default prefill backend off CUDA from 0.5.22
    assert not any(_on(r, "deepseek_v3", cuda=False) for r in ("0.5.10", "0.5.18", "0.5.21", "0.5.23"))
    # DP attention and an all-to-all backend: off under tc_piecewise and 0.5.15-0.5.16's breakable rules; from 0.5.17
    # breakable keeps them (deepep, megamoe, flashinfer validated)
    assert not _on("0.5.12", "deepseek_v3", dp_attention=True)
    assert not _on("0.5.12", "deepseek_v3", a2a="deepep")
    assert _on("0.5.18", "deepseek_v3", dp_attention=True)
    assert _on("0.5.18", "deepseek_v3", a2a="deepep")
    assert not _on("0.5.18", "deepseek_v3", a2a="mooncake")
    # pp > 1: tc_piecewise's rule; breakable off by default from 0.5.19 (apply_cuda_graph_compatibility), on in 0.5.18
    assert not _on("0.5.12", "deepseek_v3", pp=2)
    assert _on("0.5.18", "deepseek_v3", pp=2)
    assert not _on("0.5.19", "deepseek_v3", pp=2)
    # speculative decoding turned tc_piecewise off in 0.5.10 only; --enable-symm-mem under tc_piecewise
    assert not _on("0.5.10", "deepseek_v3", conditions=frozenset({"speculative"}))
    assert _on("0.5.11", "deepseek_v3", conditions=frozenset({"speculative"}))
    assert not _on("0.5.12", "deepseek_v3", conditions=frozenset({"symm_mem"}))
    # PD disaggregation: tc_piecewise off (0.5.10-0.5.14); from 0.5.15 a decode worker reserves no prefill graph
    # (reserve_for_graph_mb: disaggregation_mode != "decode"), a prefill worker its breakable one
    assert not _on("0.5.12", "deepseek_v3", conditions=frozenset({"pd_prefill"}))
    assert not _on("0.5.23", "deepseek_v3", conditions=frozenset({"pd_decode"}))
    assert _on("0.5.23", "deepseek_v3", conditions=frozenset({"pd_prefill"}))
    # a locked backend skips every rule
    assert _on("0.5.15", "deepseek_v3", backend="breakable")
    assert not _on("0.5.23", "deepseek_v3", backend="disabled")
    # the DeepEP delta: a breakable graph under deepep from 0.5.17
    got = prefill_graph(_rel("0.5.23"), model_type="deepseek_v3", cuda=True, dp_attention=False, a2a="deepep", pp=1)
    assert got is not None and got.breakable and got.deepep_delta


def _fraction(cli, cmd: str, release: str, hardware: str = "nvidia-h200") -> str:
    r = cli("fit", "-H", hardware, "-t", 8, "--serve", cmd, "--engine-version", release, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]["sources"]["kv_pool"].split(" x ")[0]


def _derived(gpu_mib: float, reserved_mib: float) -> str:
    return f"int({round((gpu_mib - max(reserved_mib, 10 * 1024)) / gpu_mib, 3)}"


def test_deepseek_v3_s_derived_fraction_reserves_its_prefill_graph_by_release(cli):
    """DeepSeek-V3 at TP 8 on eight H200s (143,771 MiB: the GPU class's chunk 8,192 and decode max_bs 512): 512 +
    8,192 x 1.5 + 512 x 2 + 8 / 8 x 1,024 = 14,848 MiB, 0.897; with the MLA prefill graph's 1,536 MiB, 16,384, 0.886."""
    from k3plan.hardware import load_hardware

    gpu = load_hardware("nvidia-h200").usable_bytes_per_device / 2**20
    base = 512 + 8192 * 1.5 + 512 * 2 + 1024
    off, on = _derived(gpu, base), _derived(gpu, base + 1536)
    assert (off, on) == ("int(0.897", "int(0.886")
    for release, want in (("0.5.9", off), ("0.5.10", on), ("0.5.14", on), ("0.5.15", off), ("0.5.17", off),
                          ("0.5.18", on), ("0.5.23", on)):  # fmt: skip
        assert _fraction(cli, R, release) == want, release
    # the flags that lock it off, as each release reads them
    assert _fraction(cli, R + " --disable-piecewise-cuda-graph", "0.5.12") == off
    assert _fraction(cli, R + " --disable-piecewise-cuda-graph", "0.5.19") == off  # the deprecated alias
    assert _fraction(cli, R + " --cuda-graph-backend-prefill disabled", "0.5.23") == off
    assert _fraction(cli, R + " --disable-prefill-cuda-graph", "0.5.23") == off
    # ... and on: 0.5.15-0.5.17 leave an MLA model's breakable graph off unless the command locks it
    assert _fraction(cli, R + " --cuda-graph-backend-prefill breakable", "0.5.16") == on
    # --enable-torch-compile turns tc_piecewise off (0.5.12), not breakable (0.5.23)
    assert _fraction(cli, R + " --enable-torch-compile", "0.5.12") == off
    assert _fraction(cli, R + " --enable-torch-compile", "0.5.23") == on
    # DeepEP: 0.5.16 leaves the breakable graph off under any all-to-all backend; from 0.5.17 it is on, and its 1 GiB
    # DeepEP delta counts before the floor, DeepEP's own 2 GiB after it
    dpe = R + " --moe-a2a-backend deepep"
    assert _fraction(cli, dpe, "0.5.16") == _derived(gpu, base + 2048)
    assert _fraction(cli, dpe, "0.5.23") == _derived(gpu, base + 1536 + 1024 + 2048)
    # the fraction given: no rule reads the graphs
    assert _fraction(cli, R + " --mem-fraction-static 0.9", "0.5.23") == "int(0.9"


def test_an_amd_gpu_captures_no_prefill_graph(cli):
    """SGLang's prefill graph is off on a ROCm GPU in every release (tc_piecewise's 'non-CUDA hardware (HIP/NPU/CPU/
    MPS/XPU)' to 0.5.21; cuda_graph_config.py default_prefill_backend DISABLED off CUDA from 0.5.22): DeepSeek-V3 at TP
    8 on eight MI300X (196,608 MiB, the B200 / MI300 class: chunk 16,384, max_bs 512) reserves 512 + 24,576 + 1,024 +
    1,024 = 27,136 MiB, 0.862."""
    for release in ("0.5.12", "0.5.23"):
        assert _fraction(cli, R, release, "amd-mi300x") == _derived(196608, 27136) == "int(0.862"
