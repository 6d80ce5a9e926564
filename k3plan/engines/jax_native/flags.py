"""MaxText's config keys k3plan writes for the JAX stack, each with the file that defines it, the model names it
ships, and the KV dtypes it keeps its cache in."""

from __future__ import annotations

# MaxText (AI-Hypercomputer/maxtext@e591f30c, src/maxtext/...; the src/MaxText/ paths are gone): the keys of
# its config, which pyconfig refuses when unknown (configs/pyconfig.py: "'KEY' not in ..."), the serving entry
# point that reads them from its command line, and the model names it ships
MAXTEXT = ("AI-Hypercomputer/maxtext", "src/maxtext/configs/base.yml", "base config")
MAXTEXT_SERVER = (
    "AI-Hypercomputer/maxtext",
    "src/maxtext/inference/maxengine/maxengine_server.py",
    "__main__: pyconfig.initialize(sys.argv)",
)
MAXTEXT_MODELS = ("AI-Hypercomputer/maxtext", "src/maxtext/configs/types.py", "ModelName")
# k3plan's bundled model -> MaxText's model_name for it (types.py ModelName; configs/models/<name>.yml); a model
# not here (kimi-k3, kimi-linear-48b-a3b: MaxText has no KDA model) needs a MaxText config file of its own
MAXTEXT_MODEL_NAMES = {"kimi-k2": "kimi-k2-1t", "deepseek-v3": "deepseek3-671b"}
FLAGS: dict[str, tuple[str, str, str]] = {
    "model_name": MAXTEXT_MODELS,
    **{
        k: MAXTEXT
        for k in (
            "ici_data_parallelism",
            "ici_fsdp_parallelism",
            "ici_tensor_parallelism",
            "ici_expert_parallelism",
            "dcn_data_parallelism",
            "dcn_tensor_parallelism",
            "dcn_expert_parallelism",
            "max_target_length",
            "max_prefill_predict_length",
            "use_chunked_prefill",
            "prefill_chunk_size",
            "per_device_batch_size",
            "dtype",
        )
    },
}
# MaxText keeps its KV cache in the activation dtype, `dtype` (types.py DType: bfloat16, float32, float16): the
# cache is made with the attention's dtype (layers/attentions.py -> inference/kvcache.py KVCache
# _get_cached_kv_dtype) unless quantize_kvcache, whose kv_quant_dtype is int8 or int4 (types.py), so fp8 has none
KV: dict[str, str | None] = {"bf16": "bfloat16", "fp8": None, "fp8_ds_mla": None, "fp32": "float32"}
