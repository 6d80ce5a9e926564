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

From 0.31.0 vLLM refuses it: Fp8Config.__init__ raises "The `fp8` quantization method no longer supports online
quantization. Please use `--quantization fp8_per_tensor` instead." (vllm 0.31.0, 0.33.0 and 0.34.0 wheels;
layers/quantization/fp8.py). From 0.24.0 the online methods are layers/quantization/online/fp8.py's
Fp8PerTensorOnline* classes, not read: refused as not priced there, as before 0.20.0.
"""

from __future__ import annotations

from typing import Any

from k3plan.engines.release import Release, release_text
from k3plan.engines.vllm.releases import NEWEST_RELEASE
from k3plan.errors import K3PlanError

# the releases whose online FP8 was read (the 0.20.0, 0.20.1, 0.20.2, 0.21.0 and 0.23.0 wheels: the same
# Fp8OnlineLinearMethod / Fp8OnlineMoEMethod), [from, to)
ONLINE_FP8_READ: tuple[Release, Release] = ((0, 20, 0), (0, 24, 0))
# vLLM refuses online quantization under --quantization fp8 from this release (Fp8Config.__init__ ValueError)
ONLINE_FP8_GONE_FROM: Release = (0, 31, 0)
ONLINE_FP8_GONE_SOURCE = (
    "vllm 0.31.0 / 0.33.0 / 0.34.0 wheels (PyPI), vllm/model_executor/layers/quantization/fp8.py Fp8Config.__init__"
)
# the model types whose vLLM model file was read for which Linears take the quant_config (kimi_linear.py, kda.py)
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
