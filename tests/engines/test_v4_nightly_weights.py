"""torchtpu-vllm's DeepSeek-V4 nightly commands read through fit --serve, held to the weights a rank the config states.

Source: kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/configs/deepseek-v4-pro-dp16-ep.sh @23701f8e:
"Nightly perf + accuracy for DeepSeek-V4-Pro on TPU v7x-16, TP=1 x DP=16 with EP. DP=16 is forced by size:
805 GiB of weights is 72.8 GiB/rank." (v7x-16: 16 TensorCores = 8 chips, topology 2x2x2.) The Flash config
(deepseek-v4-flash-dp8-ep.sh, same commit) states no figure a rank; it is read through and its experts priced alike.

The command is composed from the config's variables (MODEL, TENSOR_PARALLELISM, DATA_PARALLELISM, ENABLE_EP,
QUANTIZATION, KV_CACHE_DTYPE, MAX_*, GPU_MEMORY_UTILIZATION, the exports and EXTRA_SERVE_ARGS), with vLLM's flag for
each; the checkpoint named by the bundled model's name: the config's "deepseek-ai/DeepSeek-V4-Pro-0813" is bundled
on its own since session 50 (models/bundled/deepseek-v4-pro-0813: the April Pro with three DSpark stages, 831 GiB),
and the test holds that its "805 GiB of weights" is the April checkpoint's size (MTP included), as the rank's weights
are the same either way (the nightly runs no draft).

What makes the figure: the engine requantizes the FP4 experts at load (deepseek_v4_fp8 -> VllmDeepseekV4Mxfp4MoEMethod,
fp4 codes and an fp32 scale a 512-block of K; engines/torchtpu_vllm/stack.yaml cites it): 0.5 B a parameter + 4 B a
512 values, not the checkpoint's 0.5 + 1 a 32.
"""

from __future__ import annotations

import json

from k3plan.models import load_model
from k3plan.models.formats import get_format
from k3plan.units import GiB

ENV = (
    "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=vllm MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 MOE_REQUANTIZE_BLOCK_SIZE=512 "
    "TPU_ROPE_CACHE_ROW_MAJOR=1 TPU_MOE_HASH_TABLE_ROW_MAJOR=1 VLLM_USE_BREAKABLE_CUDAGRAPH=0 VLLM_USE_AOT_COMPILE=0 "
    "VLLM_NO_USAGE_STATS=1 TPU_DSV4_HONOR_CONTINUE_FINAL_MESSAGE=1 "
)
COMMON = (
    "--enable-expert-parallel --quantization deepseek_v4_fp8 --kv-cache-dtype fp8_e4m3 --max-model-len 9216 "
    "--max-num-batched-tokens 1024 --max-num-seqs 256 --gpu-memory-utilization 0.90 --api-server-count=1 "
    "--trust-remote-code --generation-config=vllm"
)
PRO = (
    ENV + "VLLM_WORKER_MULTIPROC_METHOD=spawn TORCH_DIST_TIMEOUT=1200 VLLM_RPC_TIMEOUT=1200000 "
    "VLLM_SHM_BROADCAST_TIMEOUT_S=1200 VLLM_ENGINE_ITERATION_TIMEOUT_S=1200 VLLM_ENGINE_READY_TIMEOUT_S=14400 "
    "vllm serve deepseek-v4-pro --tensor-parallel-size 1 --data-parallel-size 16 --data-parallel-size-local 8 "
    + COMMON
    + " --enable-ep-weight-filter --safetensors-load-strategy=prefetch"
)
FLASH = (
    ENV
    + "VLLM_ENGINE_READY_TIMEOUT_S=7200 vllm serve deepseek-v4-flash --tensor-parallel-size 1 "
    + ("--data-parallel-size 8 " + COMMON)
)
STATED_GIB_PER_RANK = 72.8  # "805 GiB of weights is 72.8 GiB/rank"
STATED_CHECKPOINT_GIB = 805


def test_the_pro_checkpoint_is_the_size_the_config_states():
    inv = load_model("deepseek-v4-pro").inventory
    assert round(sum(t.nbytes for t in inv.tensors) / GiB) == STATED_CHECKPOINT_GIB


def test_pro_nightly_weights_a_rank_are_the_config_s(cli):
    out = cli("fit", "-H", "tpu-v7x", "-t", "2x2x2", "--serve", PRO, "--json")
    assert out.exit_code in (0, 3), out.output
    d = json.loads(out.stdout)
    assert d["parallel"]["tp"] == 1 and d["parallel"]["dp"] == 16 and d["parallel"]["ep"] == 16
    gib = d["per_device"]["weights_bytes"] / GiB
    # the comment's one decimal and its rounding of the checkpoint: within 1%
    assert abs(gib - STATED_GIB_PER_RANK) / STATED_GIB_PER_RANK < 0.01, gib
    assert d["engine"]["starts"] is True


def test_the_requantized_experts_are_what_moves_it(cli):
    """Priced at the checkpoint's FP4 (1 B a 32) the rank holds ~2.1 GiB more, 2.4% over the stated figure."""
    d = json.loads(cli("fit", "-H", "tpu-v7x", "-t", "2x2x2", "--serve", PRO, "--json").stdout)
    expert = d["weights_by_role"]["expert"]
    inv = load_model("deepseek-v4-pro").inventory
    experts = [t for t in inv.text if t.role == "expert"]
    held = sum(get_format("fp4_f32scale_b512").nbytes(t.shape) for t in experts) / 16  # 384 experts: 24 a rank
    ckpt = sum(t.nbytes for t in experts) / 16
    assert abs(expert - held) / held < 1e-9
    over = (d["per_device"]["weights_bytes"] - expert + ckpt) / GiB
    assert abs(over - STATED_GIB_PER_RANK) / STATED_GIB_PER_RANK > 0.02


def test_flash_nightly_reads_through_serve(cli):
    out = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", FLASH, "--json")
    assert out.exit_code in (0, 3), out.output
    d = json.loads(out.stdout)
    # the nightly's 0.90 is not the plugin's default (vLLM v0.29.0's 0.92), so the stack names it
    assert (d["parallel"]["tp"], d["parallel"]["dp"]) == (1, 8)
    assert d["stack"] == "torchtpu-vllm:gpu_memory_utilization=0.90"
    assert d["engine"]["starts"] is True


def test_flash_nightly_pool_is_the_plugin_s_records_in_its_1024_token_blocks(cli):
    """The plugin's own V4 layout (engines/torchtpu_vllm/dsv4.py): 4,864 B a token of V4-Flash carried as 114 B x 43
    layers, and the block its platform sets for DeepseekV4ForCausalLM (PallasMLAttentionBackend.get_page_size: 1,024)
    in the budget and the engine's pool alike; --block-size sets the engine's."""
    d = json.loads(cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", FLASH, "--json").stdout)
    eng = d["engine"]
    assert d["model_state"]["kv_bytes_per_token"] == 114 * 43
    assert "640 + 256 B" in d["provenance"]["kv"] and "1024 B / 128" in d["provenance"]["kv"]
    assert eng["block_tokens"] == 1024 == d["cache_layout"]["block_tokens"]
    assert "get_page_size" in eng["sources"]["block_tokens"]
    # the pool's tokens are whole blocks of the records: 9 blocks a 9,216-token request
    assert eng["kv_pool_tokens"] % 1024 == 0
    assert eng["max_concurrency"] == round(eng["kv_pool_tokens"] / 9216, 2)
    d = json.loads(cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", FLASH + " --block-size 256", "--json").stdout)
    assert d["engine"]["block_tokens"] == 256


def test_another_requantize_block_or_model_code_is_one_line(cli):
    for env in ("MOE_REQUANTIZE_BLOCK_SIZE=256 ", "MODEL_IMPL_TYPE=flax_nnx "):
        out = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", env + FLASH.replace(ENV, ""))
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
