"""vLLM (vllm-project/vllm): its rules as its code has them."""
