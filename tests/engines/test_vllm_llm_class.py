"""vLLM's LLM class (UsageContext.LLM_CLASS: lm_eval --model vllm, a script's LLM(...)) on a GPU takes its own entries
of vLLM's batch defaults, read in the wheel (PyPI) of every release from 0.8.4 to 0.34.0 (k3plan/engines/vllm/serve.py
LLM_CLASS_SOURCE): vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (0.8.4-0.10.2), _set_default_args
(0.11.0), get_batch_defaults (0.11.1-0.34.0), each with UsageContext.LLM_CLASS: 16384 / 1024 on the large tier and
8192 / 256 on the small one; vllm/entrypoints/llm.py LLM.__init__ passes usage_context=UsageContext.LLM_CLASS (read in
the 0.8.4, 0.10.0, 0.20.0, 0.21.0, 0.27.0 and 0.34.0 wheels). The tiers are the OpenAI server's: by the device's name
(h100 / h200) at 0.8.4, >= 70 GiB from 0.8.5 (an A100 included), 'a100' excluded from 0.9.0, a >= 160 GiB tier from
0.28.0 whose LLM_CLASS entries are the same 16384 / 1024."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

LM = "lm_eval --model vllm --model_args pretrained=moonshotai/Kimi-K2.6,tensor_parallel_size=8"
SERVE = "vllm serve moonshotai/Kimi-K2.6 --tensor-parallel-size 8"


@pytest.mark.parametrize(
    ("release", "name", "gib", "llm", "served"),
    [
        # 0.8.4 wheel _set_default_args_v1: `"h100" in device_name or "h200" in device_name`: 16384 (8192 served) and
        # default_max_num_seqs 1024, any other device (a B200 too) 8192 (2048 served) and 256
        ((0, 8, 4), "nvidia-h200", 141, (16384, 1024), (8192, 1024)),
        ((0, 8, 4), "nvidia-b200", 180, (8192, 256), (2048, 256)),
        # 0.8.5 wheel: device_memory >= 70 * GiB_bytes, an A100 80 GB included; 0.9.0 wheel: `"a100" not in device_name`
        ((0, 8, 5), "nvidia-a100-80gb", 80, (16384, 1024), (8192, 1024)),
        ((0, 9, 0), "nvidia-a100-80gb", 80, (8192, 256), (2048, 256)),
        # 0.9.2 / 0.10.x: default_max_num_seqs a dict, its LLM_CLASS entries 1024 / 256
        ((0, 9, 2), "nvidia-h100-sxm", 80, (16384, 1024), (8192, 1024)),
        ((0, 10, 1), "nvidia-l40s", 44, (8192, 256), (2048, 256)),
        # 0.21.0-0.27.x: get_batch_defaults, the two tiers of 0.13.0
        ((0, 21, 0), "nvidia-h200", 141, (16384, 1024), (8192, 1024)),
        ((0, 27, 0), "nvidia-b200", 180, (16384, 1024), (8192, 1024)),
        # 0.28.0-0.34.0: device_memory >= 160 GiB: LLM_CLASS 16384 / 1024 as the OpenAI server's
        ((0, 28, 0), "nvidia-b200", 180, (16384, 1024), (16384, 1024)),
        ((0, 31, 0), "amd-mi300x", 192, (16384, 1024), (16384, 1024)),
        ((0, 33, 0), "nvidia-h100-sxm", 80, (16384, 1024), (8192, 1024)),
        ((0, 34, 0), "nvidia-l40s", 44, (8192, 256), (2048, 256)),
    ],
)
def test_llm_class_defaults_by_release_and_device(release, name, gib, llm, served):
    q = parse_serve(LM, platform="gpu", device_gib=gib, device_name=name, release=release)
    s = parse_serve(SERVE, platform="gpu", device_gib=gib, device_name=name, release=release)
    assert ((q.chunk, q.batch), (s.chunk, s.batch)) == (llm, served)
    assert "LLM_CLASS" in q.chunk_source and "LLM_CLASS" in q.batch_source


@pytest.mark.parametrize("release", [(0, 8, 3), (0, 35, 0)])
def test_llm_class_refused_outside_the_releases_read(release):
    """0.8.0-0.8.3 keep default_max_num_seqs 1024 on every device (their wheels' _set_default_args_v1), a release k3plan
    read no other rule of; a release after 0.34.0 is unread: the command gives both."""
    with pytest.raises(K3PlanError, match="max_num_batched_tokens=N in --model_args"):
        parse_serve(LM, platform="gpu", device_gib=141, device_name="nvidia-h200", release=release)
    q = parse_serve(
        LM + ",max_num_batched_tokens=4096,max_num_seqs=64",
        platform="gpu",
        device_gib=141,
        device_name="nvidia-h200",
        release=release,
    )
    assert (q.chunk, q.batch) == (4096, 64)


def test_lm_eval_on_a_gpu_priced_at_the_default_release(cli):
    """fit without --engine-version reads a GPU command as releases.py NEWEST_RELEASE (0.33.0): its LLM_CLASS entries."""
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", LM, "--json")
    assert r.exit_code in (0, 1), r.output
    eng = json.loads(r.stdout)["engine"]
    assert eng["serve"]["max_num_seqs"] == 1024
    assert "max_num_batched_tokens 16,384" in eng["sources"]["activation"]


def test_the_torch_tpu_plugin_takes_the_small_tier_s_llm_class_entries():
    """A TPU command off tpu-inference's route runs the torch_tpu plugin, an out-of-tree platform whose
    get_device_total_memory raises (kowalski-4831/vllm-torchtpu@0095cdcb src/vllm_torchtpu/platforms/tpu_platform.py):
    get_batch_defaults' except branch, device_memory 0, and upstream's is_tpu() chip table does not apply: the small
    tier, LLM_CLASS 8,192 / 256 in every wheel read (vllm serve's 2,048 / 256)."""
    q = parse_serve(LM + ",enable_expert_parallel=true", platform="tpu", device_gib=95, device_name="tpu-v5p")
    s = parse_serve(SERVE + " --enable-expert-parallel", platform="tpu", device_gib=95, device_name="tpu-v5p")
    assert ((q.chunk, q.batch), (s.chunk, s.batch)) == ((8192, 256), (2048, 256))
