"""vLLM's online quantization: ``--quantization fp8`` on a checkpoint stored unquantized (no quantization_config).

vLLM keeps the method given when the checkpoint declares none (vllm 0.20.0 / 0.21.0 wheels (PyPI),
vllm/config/model.py ModelConfig._verify_quantization: the override loop runs only for a checkpoint's
quantization_config; model_loader/weight_utils.py get_quant_config then builds ``Fp8Config()``,
is_checkpoint_fp8_serialized False), and Fp8Config.get_quant_method gives every LinearBase built with the quant_config
Fp8OnlineLinearMethod and every FusedMoE Fp8OnlineMoEMethod (layers/quantization/fp8.py; the same classes in the
0.20.0-0.23.0 wheels). Both create their weights on the meta device and wrap the weight loaders
(model_loader/reload/layerwise.py initialize_online_processing): a layer is materialized in bf16 only once all of its
checkpoint tensors have arrived, loaded, quantized (ops.scaled_fp8_quant, one f32 scale a tensor or an expert) and its
bf16 copy dropped (_layerwise_process). What stays: fp8 weights with per-tensor scales (models/formats.py fp8_pt,
the vllm stack's option quantization), the embedding, LM head, norms, router gate and KDA's f32 tensors as stored.

The load's transient -- one layer's bf16 weights and their fp8 copy beside what is loaded -- is not in the pool: the
load is measured as the allocated bytes after it less before it (v1/worker/gpu_model_runner.py load_model:
DeviceMemoryProfiler, platforms/cuda.py get_current_memory_usage: empty_cache, reset_peak_memory_stats,
max_memory_allocated), and the profile's peak starts from a reset after another empty_cache
(utils/mem_utils.py memory_profiling), so neither counts the freed bf16 tensors.

0.24.0-0.30.x hold the same (read in the 0.24.0, 0.25.0, 0.26.0, 0.27.0, 0.28.0, 0.29.0 and 0.30.0 wheels):
Fp8Config() is still what a checkpoint with no quantization_config gets (config/quantization.py
resolve_quantization_config returns None for ``fp8``, not one of ONLINE_QUANT_SHORTHAND_NAMES; model_loader/
weight_utils.py get_quant_config then ``quant_cls()``), and Fp8Config.get_quant_method gives every LinearBase
layers/quantization/online/fp8.py's Fp8PerTensorOnlineLinearMethod (the weight created on the meta device,
initialize_online_processing; process_weights_after_loading: ops.scaled_fp8_quant(weight, scale=None), one f32
scale, the weight replaced by qweight.t()) and every RoutedExperts fp8.py's Fp8OnlineMoEMethod at 0.24.0 (the 0.23.0
class, line for line), online/fp8.py's Fp8PerTensorOnlineMoEMethod from 0.25.0 (online/moe_base.py
OnlineMoEMethodBase.create_weights on the meta device; w13 / w2 empty_like in fp8, one f32 scale an expert). From
0.28.0 the scales are computed from the weight's amax reduced over the TP group (online/fp8.py _fp8_scale,
amax_for_tp_weight_quant / amax_for_moe_weight_quant) before the same quantization: the same one scale a tensor or
an expert. The layer is still materialized, loaded, processed and its bf16 copy dropped a layer at a time
(model_loader/reload/layerwise.py _layerwise_process; layers whose checkpoint tensors do not fill them -- padding --
wait for finalize_layerwise_processing, processed one at a time there too), and the load and the profile are measured
as above (v1/worker/gpu_model_runner.py load_model DeviceMemoryProfiler, platforms/cuda.py get_current_memory_usage,
utils/mem_utils.py memory_profiling: the same in the 0.24.0 and 0.30.0 wheels), so the transient shows in neither.
Kimi-Linear's Linears take the quant_config as before: 0.24.0-0.26.x models/kimi_linear.py and layers/mamba/gdn/
kimi_gdn_linear_attn.py (the 0.23.0 files; 0.26.0 moves an import only); from 0.27.0 the registry serves
KimiLinearForCausalLM from vllm/models/kimi_k3/nvidia/model.py (KimiMLP, KimiMoE: the gate a GateLinear with
quant_config=None; MultiHeadLatentAttention in vllm/models/kimi_k3/nvidia/mla.py: q_proj / kv_a_proj_with_mqa /
kv_b_proj / o_proj with it, kv_b_proj absorbed into bf16 W_UK_T / W_UV in process_weights_after_loading; lm_head
ParallelLMHead) and KDA fuses q/k/v/b/f_a into one in_proj_qkvgfab with the quant_config (one scale for the five:
16 B a KDA layer fewer than k3plan's count of a scale a checkpoint matrix; conv1d float32 without it). That model
file's KimiMoE also pads a TP shard's expert intermediate up to 256 below it (1,024 / 8 = 128 at TP 8 without
--enable-expert-parallel), for the bf16 checkpoint as for this one: engines/vllm/moe_padding.py KIMI_LINEAR_PAD_FROM,
the fp8 experts held at the padded shape (Fp8PerTensorOnlineMoEMethod: empty_like of the padded bf16 weights).

From 0.31.0 vLLM refuses it: Fp8Config.__init__ raises "The `fp8` quantization method no longer supports online
quantization. Please use `--quantization fp8_per_tensor` instead." (vllm 0.31.0, 0.33.0 and 0.34.0 wheels;
layers/quantization/fp8.py). Before 0.20.0 not read: refused as not priced.
"""

from __future__ import annotations

from typing import Any

from k3plan.engines.release import Release, release_text
from k3plan.engines.vllm.releases import NEWEST_RELEASE
from k3plan.errors import K3PlanError

# the releases whose online FP8 was read, [from, to): the 0.20.0, 0.20.1, 0.20.2, 0.21.0 and 0.23.0 wheels
# (layers/quantization/fp8.py Fp8OnlineLinearMethod / Fp8OnlineMoEMethod) and the 0.24.0-0.30.0 wheels
# (ONLINE_FP8_SOURCES: the same fp8 weights and per-tensor / per-expert scales), up to vLLM's refusal
ONLINE_FP8_READ: tuple[Release, Release] = ((0, 20, 0), (0, 31, 0))
# where each release group's online FP8 was read (vllm <v> wheels, PyPI), the first release of each group
ONLINE_FP8_SOURCES: tuple[tuple[Release, str], ...] = (
    (
        (0, 20, 0),
        "vllm 0.20.0 / 0.20.1 / 0.20.2 / 0.21.0 / 0.23.0 wheels: vllm/model_executor/layers/quantization/fp8.py "
        "Fp8Config.get_quant_method -> Fp8OnlineLinearMethod / Fp8OnlineMoEMethod (process_weights_after_loading: "
        "ops.scaled_fp8_quant, one f32 scale a tensor / an expert)",
    ),
    (
        (0, 24, 0),
        "vllm 0.24.0 wheel: vllm/model_executor/layers/quantization/fp8.py Fp8Config.get_quant_method -> "
        "online/fp8.py Fp8PerTensorOnlineLinearMethod and fp8.py Fp8OnlineMoEMethod (the 0.23.0 class)",
    ),
    (
        (0, 25, 0),
        "vllm 0.25.0 / 0.26.0 / 0.27.0 wheels: vllm/model_executor/layers/quantization/fp8.py "
        "Fp8Config.get_quant_method -> online/fp8.py Fp8PerTensorOnlineLinearMethod / Fp8PerTensorOnlineMoEMethod "
        "(ops.scaled_fp8_quant, one f32 scale a tensor / an expert)",
    ),
    (
        (0, 28, 0),
        "vllm 0.28.0 / 0.29.0 / 0.30.0 wheels: vllm/model_executor/layers/quantization/fp8.py "
        "Fp8Config.get_quant_method -> online/fp8.py Fp8PerTensorOnlineLinearMethod / Fp8PerTensorOnlineMoEMethod "
        "(the scale from the weight's amax reduced over TP, _fp8_scale: one f32 a tensor / an expert)",
    ),
)
# vLLM refuses online quantization under --quantization fp8 from this release (Fp8Config.__init__ ValueError)
ONLINE_FP8_GONE_FROM: Release = (0, 31, 0)
ONLINE_FP8_GONE_SOURCE = (
    "vllm 0.31.0 / 0.33.0 / 0.34.0 wheels (PyPI), vllm/model_executor/layers/quantization/fp8.py Fp8Config.__init__"
)
# the model types whose vLLM model file was read for which Linears take the quant_config (model_executor/models/
# kimi_linear.py and its KDA layer to 0.26.x, vllm/models/kimi_k3/nvidia/model.py from 0.27.0)
ONLINE_FP8_MODELS = ("kimi_linear",)
# the stack option the rule sets (engines/vllm/stack.yaml option quantization, choice fp8)
OPTION = "quantization"


def model_type(model: str) -> str:
    """Bundled model ``model``'s config.json model_type ('' where it has none)."""
    from k3plan.models.loader import BUNDLED_DIR, read_config

    path = BUNDLED_DIR / model / "config.json"
    got = read_config(path).get("model_type") if path.is_file() else None
    return got if isinstance(got, str) else ""


def online_quantization(r: Any, quant: str, model: str) -> bool:
    """Whether vLLM's reading ``r`` (engines.serve_values.Reading) prices ``--quantization quant`` on bundled model
    ``model``, stored unquantized: True after setting the vllm stack's option; False where k3plan did not read it
    (the caller refuses the command as unpriced). Raises vLLM's own refusal from ONLINE_FP8_GONE_FROM on."""
    if quant != "fp8" or r.platform == "tpu":
        return False
    release = r.release if r.release is not None else NEWEST_RELEASE
    if release >= ONLINE_FP8_GONE_FROM:
        raise K3PlanError(
            f"--serve: --quantization fp8: {model} is stored unquantized and vLLM {release_text(release)} refuses "
            "online quantization under fp8 (ValueError: The `fp8` quantization method no longer supports online "
            f"quantization. Please use `--quantization fp8_per_tensor` instead.: {ONLINE_FP8_GONE_SOURCE}); "
            "fit --engine-version reads the command as an older release"
        )
    if not ONLINE_FP8_READ[0] <= release < ONLINE_FP8_READ[1]:
        return False
    if r.device_name.lower().startswith("amd") or model_type(model) not in ONLINE_FP8_MODELS:
        return False
    r.options[OPTION] = "fp8"
    return True
