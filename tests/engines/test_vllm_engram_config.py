"""vLLM's --engram-config and VLLM_PLE_CPU_OFFLOAD as `vllm serve` reads them (issue 47 item 2; k3plan.engines.vllm.
engram, from vllm-project/vllm vllm/config/engram.py EngramConfig @13ab20ec). The flag is the one SemiAnalysisAI/
InferenceX's DeepSeek-V4.1-Flash vLLM arms pass (benchmarks/single_node/agentic/dsv41flash_fp4_vllm_mtp.sh:
--engram-config '{"cpu_offload":true}'); k3plan refused it as SGLang's before."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

V41 = "vllm serve deepseek-ai/DeepSeek-V4.1-Flash --language-model-only --max-model-len 1048576"
TABLE = 202_758_032_400  # the V4.1-Flash tables, one copy (tests/budget/test_dsv41_state_and_engram.py)


def _fit(cmd: str, hardware: str = "nvidia-h200", version: str | None = None) -> dict:
    release = ["--engine-version", version] if version else []
    out = CliRunner().invoke(app, ["fit", "--serve", cmd, "--hardware", hardware, *release, "--json"])
    assert out.exit_code in (0, 3), out.output
    return json.loads(out.output)


def _engram_warning(d: dict) -> str:
    (w,) = [w for w in d["warnings"] if w.startswith("Engram tables")]
    return w


@pytest.mark.parametrize(
    ("flag", "env", "placement"),
    [
        ("--engram-config '{\"cpu_offload\":true}'", "", "host"),
        ("--engram-config '{\"cpu_offload\":false}'", "", "hbm"),
        ("", "VLLM_PLE_CPU_OFFLOAD=0 ", "hbm"),  # EngramConfig.cpu_offload's default is the variable's
        ("--engram-config '{\"cpu_offload\":true}'", "VLLM_PLE_CPU_OFFLOAD=0 ", "host"),  # the field wins
        ("--engram-config '{\"embedding_across_dp\":true}'", "", "host"),  # one replica: nothing changes
    ],
)
def test_placement_as_vllm_reads_it(flag, env, placement):
    """@13ab20ec's EngramConfig, the 0.30.0 wheel's too (VLLM_PLE_CPU_OFFLOAD the default): --engine-version 0.30.0;
    from 0.31.0 the variable is gone (test_from_0_31_the_wheels_defaults_hold)."""
    q = parse_serve(f"{env}{V41} --tensor-parallel-size 8 {flag}", platform="gpu", device_gib=140.0, release=(0, 30, 0))
    assert q.engram == placement and q.engram_host_copies is None
    w = _engram_warning(_fit(f"{env}{V41} --tensor-parallel-size 8 {flag}", version="0.30.0"))
    assert ("in host memory" if placement == "host" else "in HBM, rows split over the TP group") in w


def test_from_0_31_the_wheels_defaults_hold():
    """vllm 0.31.0 wheel (PyPI), vllm/config/engram.py EngramConfig: cpu_offload True with no VLLM_PLE_CPU_OFFLOAD
    (gone from vllm/envs.py: an export is listed as ignored), dp_shared_memory resolved on with data parallelism
    (resolve_dp_shared_memory), the huge-page switch named use_thp; 0.31.0 is the default release."""
    q = parse_serve(f"VLLM_PLE_CPU_OFFLOAD=0 {V41} --tensor-parallel-size 8", platform="gpu", device_gib=140.0)
    assert q.engram is None and "VLLM_PLE_CPU_OFFLOAD=0" in q.ignored  # the engine's default: host
    dp8 = f"{V41} --tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel"
    assert parse_serve(dp8, platform="gpu").engram_host_copies is None  # the engine's default (dsv4.ENGRAM): a node
    thp = parse_serve(dp8 + """ --engram-config '{"use_thp": true}'""", platform="gpu")
    assert thp.engram_host_copies == "replica"  # use_thp keeps the private tables: one a replica
    with pytest.raises(K3PlanError, match="key 'thp_packing' is not one of vLLM's"):
        parse_serve(f"{V41} -tp 8 --engram-config '{{\"thp_packing\":true}}'", platform="gpu")


def test_host_copies_one_a_dp_replica_unless_shared():
    """@13ab20ec's (and 0.30.0's) default keeps a TP-sharded copy a DP replica in host memory; dp_shared_memory one a
    node, which from 0.31.0 is the default with data parallelism (EngramConfig.resolve_dp_shared_memory)."""
    dp8 = f"{V41} --tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel"
    old = _fit(dp8, "nvidia-b200", version="0.30.0")
    assert f"({8 * TABLE:,} B a host: 8 copies, one a DP replica on it)" in _engram_warning(old)
    shared = _fit(f"{dp8} --engram-config '{{\"dp_shared_memory\":true}}'", "nvidia-b200", version="0.30.0")
    assert f"({TABLE:,} B a host)" in _engram_warning(shared)
    assert f"({TABLE:,} B a host)" in _engram_warning(_fit(dp8, "nvidia-b200"))  # 0.31.0, the default release
    tp8 = _fit(f"{V41} --tensor-parallel-size 8", "nvidia-b200")  # one replica a host: one copy
    assert f"({TABLE:,} B a host)" in _engram_warning(tp8)


@pytest.mark.parametrize(
    ("cmd", "says"),
    [
        (f"{V41} -tp 8 --engram-config '{{\"dp_shared_memory\":true}}'", "dp_shared_memory requires data_parallel"),
        (f'{V41} -tp 8 --engram-config \'{{"thp_packing":true,"cpu_offload":false}}\'', "thp_packing requires"),
        (
            f'{V41} -tp 1 -dp 2 --enable-expert-parallel --engram-config \'{{"dp_shared_memory":true,'
            '"cpu_offload":false}\'',
            "dp_shared_memory requires cpu_offload=True",
        ),
        (f'{V41} -tp 8 --engram-config \'{{"placement":"cpu"}}\'', "key 'placement' is not one of vLLM's"),
        (f'{V41} -tp 8 --engram-config \'{{"cpu_offload":"maybe"}}\'', "expected true or false"),
        (f"VLLM_PLE_CPU_OFFLOAD=2 {V41} -tp 8", "VLLM_PLE_CPU_OFFLOAD= '2': expected true or false"),
        (
            f"{V41} -tp 1 -dp 2 --enable-expert-parallel --engram-config '{{\"embedding_across_dp\":true}}'",
            "sharded over TP x DP ranks are not priced",
        ),
    ],
)
def test_refusals_are_vllm_s_own(cmd, says):
    """@13ab20ec's refusals (thp_packing and VLLM_PLE_CPU_OFFLOAD are its names: --engine-version 0.30.0 or older;
    the rest hold in the 0.31.0-0.34.0 wheels too)."""
    with pytest.raises(K3PlanError, match="^--serve: ") as e:
        parse_serve(cmd, platform="gpu", device_gib=140.0, release=(0, 30, 0))
    assert says in str(e.value)


def test_refused_on_a_tpu_and_for_a_model_without_engram():
    with pytest.raises(K3PlanError, match="on a TPU: vLLM refuses it off CUDA"):
        parse_serve(
            f"{V41} -tp 8 --enable-expert-parallel --engram-config '{{\"cpu_offload\":true}}'",
            platform="tpu",
            device_gib=94.75,
        )
    out = CliRunner().invoke(
        app,
        [
            "fit",
            "--serve",
            "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --engram-config '{\"cpu_offload\":true}'",
            "-H",
            "nvidia-h200",
        ],
    )
    assert out.exit_code == 2 and "deepseek-v4-flash has no Engram tables" in out.output
    # the variable alone is the engine's default for a model that has no tables: nothing to refuse
    out = CliRunner().invoke(
        app,
        [
            "fit",
            "--serve",
            "VLLM_PLE_CPU_OFFLOAD=1 vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8",
            "-H",
            "nvidia-h200",
        ],
    )
    assert out.exit_code in (0, 1, 3) and out.output.startswith(("STARTS", "WON'T START")), out.output
