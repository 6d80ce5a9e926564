"""SGLang sizes its pool from the memory free before it loads the model (pre_model_load_memory: after the CUDA
context and NCCL's communicators), not the device's total: rest = available after loading - pre_model_load_memory x
(1 - mem_fraction_static) (sglang 0.5.23 wheel, distributed/bootstrap.py measure_pre_model_load_memory,
mem_cache/kv_cache_configurator.py _profile_available_bytes). Where a log of the GPU prints it (the load line's avail
mem + mem usage) k3plan counts from it (engines/sglang/memory.py FREE_BEFORE_LOAD); elsewhere from the usable HBM."""

from __future__ import annotations

import json

from k3plan.engines.sglang.memory import FREE_BEFORE_LOAD
from k3plan.units import GiB

R1 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 --mem-fraction-static 0.9"


def _engine(cli, hardware):
    r = cli("fit", "-H", hardware, "-t", "8", "--serve", R1, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def test_the_pool_counts_from_the_free_memory_before_loading_where_a_log_gives_it(cli):
    eng = _engine(cli, "nvidia-h200")
    free, _ = FREE_BEFORE_LOAD["nvidia-h200"]
    assert round(free / GiB, 2) == 137.90  # InferenceX#2128: avail mem 12.25 + mem usage 125.65
    assert eng["kv_pool_bytes"] == int(0.9 * free) - eng["weights_bytes"]
    assert "free memory before loading on an H200" in eng["sources"]["kv_pool"]


def test_the_b200_figure_is_the_load_lines_of_a_b200_log(cli):
    """sgl-project/sglang#9162 (a B200 at TP 4, SGLang main of 2025-08-13): '[2025-08-13 14:27:06 TP0] Load weight
    begin. avail mem=175.34 GB' and '[2025-08-13 14:34:24 TP0] Load weight end. type=DeepseekV3ForCausalLM,
    dtype=torch.bfloat16, avail mem=80.84 GB, mem usage=94.50 GB': the two lines give the same free memory."""
    free, source = FREE_BEFORE_LOAD["nvidia-b200"]
    assert round(free / GiB, 2) == 175.34 == round(80.84 + 94.50, 2)
    assert "sgl-project/sglang#9162" in source
    eng = _engine(cli, "nvidia-b200")
    assert eng["kv_pool_bytes"] == int(0.9 * free) - eng["weights_bytes"]
    assert "free memory before loading on a B200" in eng["sources"]["kv_pool"]


def test_a_gpu_without_such_a_log_counts_from_its_usable_hbm_and_says_the_rest_is_unpriced(cli):
    from k3plan.hardware import load_hardware

    assert "amd-mi325x" not in FREE_BEFORE_LOAD
    eng = _engine(cli, "amd-mi325x")
    assert (
        eng["kv_pool_bytes"] == int(0.9 * load_hardware("amd-mi325x").usable_bytes_per_device) - eng["weights_bytes"]
    )
    assert "CUDA context" in eng["unpriced"]
    assert "beyond the logged free memory before loading" in _engine(cli, "nvidia-h200")["unpriced"]


def test_the_h100_figure_is_the_lowest_load_begin_line_of_an_h100_tp8_log(cli):
    """mystous/vllm_hybrid@f0569117 IDE_023_TSK_043_RAW_DATA.md section 31 (SGLang at --tp-size 8 on 'H100 80 GB x 8'):
    '[2026-08-27 05:00:50 TP1] Load weight begin. avail mem=77.33 GB' (TP0 77.38, TP7 77.57): the minimum over ranks.
    The DeepSeek-V4-Flash pqlet start (tests/engines/cases/sglang-pqlet-dsv4-flash-h100-tp8-1m-mfs085.yaml, logged
    45.26 GB) reads within 3% with it and 4.2% over without it."""
    free, source = FREE_BEFORE_LOAD["nvidia-h100-sxm"]
    assert round(free / GiB, 2) == 77.33
    assert "mystous/vllm_hybrid@f0569117" in source
    flash = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --kv-cache-dtype fp8_e4m3 "
        "--mem-fraction-static 0.85 --context-length 1048576 --max-running-requests 64"
    )
    r = cli("fit", "-H", "nvidia-h100-sxm", "-t", "8", "--engine-version", "0.5.19", "--serve", flash, "--json")
    assert r.exit_code == 0, r.output
    eng = json.loads(r.stdout)["engine"]
    assert abs(eng["kv_pool_bytes"] / GiB / 45.26 - 1) < 0.03  # the pqlet log's 'available_bytes=45.26 GB'
    assert "free memory before loading on an H100" in eng["sources"]["kv_pool"]
