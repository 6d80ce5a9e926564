"""torchtpu-vllm (kowalski-4831/vllm-torchtpu): the torch_tpu plugin of vLLM, its rules as its code has them."""
