"""SGLang (sgl-project/sglang): its rules as its code has them."""
