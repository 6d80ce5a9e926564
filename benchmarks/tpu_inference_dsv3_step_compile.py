"""Compile a reduced DeepSeek-V3-family step (Kimi-K2.6's text model) as tpu-inference @e0e04e95 runs vLLM's model
code (MODEL_IMPL_TYPE=vllm) deviceless for a TPU topology, and print XLA's memory analysis a device as JSON: the
vocab-sharded embedding lookup, then the first N decoder layers in order (the first --dense of them with the dense
MLP, first_k_dense_replace, the rest with the MoE), the final norm, every layer's fp8 MLA cache donated as the runner
donates its caches (models/vllm/vllm_model_wrapper.py jit_step_func: donate_argnames kv_caches, the hidden states
out P(ATTN_DATA, None), its compiler_options). A layer is vLLM's DeepseekV2DecoderLayer as tpu-inference replaces
its pieces:

- attention: layers/vllm/custom_ops/mla_attention.py VllmMultiHeadLatentAttentionWrapper.forward (fused_qkv_a_proj,
  q_a_layernorm, q_b_proj, kv_a_layernorm, the rope on q_pe / k_pe, o_proj) around layers/vllm/backends/
  flash_attn_mla.py PallasMLAttentionBackendImpl.forward, whose body runs here as written (the W_UK_T einsum in f32,
  the static fp8 quantization of q / kv, the engine's own layers/common/attention_interface.py mla_attention with its
  MLA v2 kernel, the W_UV einsum); W_UK_T / W_UV fp8 with their scales (VllmMLAAttention.
  process_weights_after_loading). Every linear's weight sharded on ATTN_HEAD, as layers/vllm/quantization/configs.py
  VllmQuantLinearConfig shards Column/Row/Replicated linears (ATTN_HEAD is size 1 on this mesh: replicated).
- MoE: layers/common/fused_moe_gmm.py fused_moe_func as vllm_moe_apply calls it under attention DP (as
  benchmarks/tpu_inference_moe_compile.py: fp4 experts, an f32 scale a 512-block, sigmoid with the correction bias,
  scatter_results), the router a bf16 matmul read in f32, the shared expert a replicated SiLU MLP.
- the embedding: layers/vllm/quantization/unquantized.py VllmUnquantizedEmbeddingMethod (weight P(MLP_TENSOR,
  None)), looked up with jnp.take as torchax lowers F.embedding.

The norms are vLLM's RMSNorm forward_native (f32, the residual added in f32). Left out: the lm_head / logits and the
sampler (compiled apart from the step), the yarn scaling of the rope (a cos / sin table lookup stands in).
The mesh: NEW_MODEL_DESIGN with every device on attn_dp (tensor_parallelism 8 with enable_dp_attention and MLA: one
KV head, so attn_dp 8, layers/common/sharding.py). --tokens is the global bucket (max_num_batched_tokens x DP).
Run by hand (minutes); not a test:

    git --git-dir=/work/.mirror/vllm-project+tpu-inference/repo archive e0e04e95 tpu_inference | tar x -C /tmp/ti
    python3 benchmarks/tpu_inference_dsv3_step_compile.py --src /tmp/ti --tokens 8192 --layers 2 --dense 1
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_inference_harness import deviceless_tpu_info, mesh_over, print_record, stub_package  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="a folder holding tpu_inference/ at the commit read")
    p.add_argument("--target", default="tpu7x:2x2x1")
    p.add_argument("--tokens", type=int, default=8192, help="the step's global token bucket")
    p.add_argument("--layers", type=int, default=2, help="the first N decoder layers")
    p.add_argument("--dense", type=int, default=1, help="first_k_dense_replace: the leading layers with a dense MLP")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--q-lora", type=int, default=1536)
    p.add_argument("--lkv", type=int, default=512, help="kv_lora_rank")
    p.add_argument("--nope", type=int, default=128, help="qk_nope_head_dim")
    p.add_argument("--rope", type=int, default=64, help="qk_rope_head_dim")
    p.add_argument("--v-head", type=int, default=128)
    p.add_argument("--inter", type=int, default=18432, help="the dense MLP's intermediate_size")
    p.add_argument("--moe-inter", type=int, default=2048)
    p.add_argument("--experts", type=int, default=384)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--shared", type=int, default=1, help="n_shared_experts")
    p.add_argument("--block", type=int, default=512, help="the requantized experts' scale block")
    p.add_argument("--vocab", type=int, default=163840)
    p.add_argument("--pages", type=int, default=368, help="a device's pages of one layer's cache")
    p.add_argument("--page", type=int, default=1024, help="tokens a page (PallasMLAttentionBackend.get_page_size)")
    p.add_argument("--reqs", type=int, default=256, help="requests a DP rank (max_num_seqs)")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--no-embed", action="store_true", help="take the hidden states as an input instead")
    p.add_argument("--no-options", action="store_true", help="compile without jit_step_func's compiler_options")
    a = p.parse_args()
    os.environ.setdefault("NEW_MODEL_DESIGN", "1")
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    stub_package(a.src)

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    devs, mesh = mesh_over(a.target, "attn_dp")
    n = len(devs)
    # attention_interface.py's imports from tpu_inference.utils beyond the harness's stub: get_megacore (utils.py
    # _megacore, False unless enable_megacore), get_device_name (the RPA kernels' tuned tables: the target's name,
    # 'TPU7x' read as utils.py reads it)
    utils = sys.modules["tpu_inference.utils"]

    def init_logger(name):  # tpu_inference/logger.py's logger, with vLLM's info_once / warning_once
        log = logging.getLogger(name)
        log.info_once, log.warning_once = log.info, log.warning  # type: ignore[attr-defined]
        return log

    sys.modules["tpu_inference.logger"].init_logger = init_logger  # type: ignore[attr-defined]
    utils.get_megacore = lambda: False  # type: ignore[attr-defined]
    utils.get_device_name = lambda num_devices=None: "TPU v7" + (f"-{num_devices}" if num_devices else "")  # type: ignore[attr-defined]
    deviceless_tpu_info(devs)
    fm = importlib.import_module("tpu_inference.layers.common.fused_moe_gmm")
    ai = importlib.import_module("tpu_inference.layers.common.attention_interface")
    amd = importlib.import_module("tpu_inference.layers.common.attention_metadata")
    qz = importlib.import_module("tpu_inference.layers.common.quantization")
    kern = importlib.import_module("tpu_inference.kernels.mla.v2.kernel")
    axis = importlib.import_module("tpu_inference.layers.common.sharding").ShardingAxisName

    def arg(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    bf, f32, i32, fp8 = jnp.bfloat16, jnp.float32, jnp.int32, jnp.float8_e4m3fn
    t, d, h, ql, lkv, nope, rope, vh = a.tokens, a.hidden, a.heads, a.q_lora, a.lkv, a.nope, a.rope, a.v_head
    e, mi, blk = a.experts, a.moe_inter, a.block
    head = P(None, axis.ATTN_HEAD)  # a Column linear's weight [in, out]
    row = P(axis.ATTN_HEAD, None)  # a Row linear's
    rep = P()
    heads = P(axis.ATTN_HEAD)  # W_UK_T / W_UV and their scales

    def attn_weights():
        return {
            "in_norm": arg((d,), bf, rep),
            "qkv_a": arg((d, ql + lkv + rope), bf, rep),  # ReplicatedLinear (fused_qkv_a_proj)
            "q_a_norm": arg((ql,), bf, rep),
            "q_b": arg((ql, h * (nope + rope)), bf, head),
            "kv_a_norm": arg((lkv,), bf, rep),
            "w_uk_t": arg((h, nope, lkv), fp8, heads),
            "w_uk_t_scale": arg((h, 1, lkv), f32, heads),
            "w_uv": arg((h, lkv, vh), fp8, heads),
            "w_uv_scale": arg((1, h, vh), f32, heads),
            "o": arg((h * vh, d), bf, row),
            "post_norm": arg((d,), bf, rep),
        }

    def dense_weights():
        return {"gate_up": arg((d, 2 * a.inter), bf, head), "down": arg((a.inter, d), bf, row)}

    def moe_weights():
        si = a.shared * mi
        return {
            "gate": arg((d, e), bf, rep),
            "bias": arg((e,), f32, rep),
            "w1": arg((e, d, 2 * mi), jnp.float4_e2m1fn, P(axis.EXPERT)),
            "w2": arg((e, mi, d), jnp.float4_e2m1fn, P(axis.EXPERT)),
            "s1": arg((e, d // blk, 1, 2 * mi), f32, P(axis.EXPERT)),
            "s2": arg((e, mi // blk, 1, d), f32, P(axis.EXPERT)),
            "sh_gate_up": arg((d, 2 * si), bf, head),
            "sh_down": arg((si, d), bf, row),
        }

    layers = [{**attn_weights(), **(dense_weights() if i < a.dense else moe_weights())} for i in range(a.layers)]
    cache_shape = kern.get_kv_cache_shape(a.pages * n, a.page, lkv + rope, fp8)
    caches = [arg(cache_shape, fp8, P(axis.BATCH)) for _ in range(a.layers)]
    data = axis.ATTN_DATA
    pps = -(-a.max_model_len // a.page)
    md_args = (
        arg((t,), i32, P(data)),  # input_positions
        arg((n * a.reqs * pps,), i32, P(data)),  # block_tables
        arg((n * a.reqs,), i32, P(data)),  # seq_lens
        arg((n * (a.reqs + 1),), i32, P(data)),  # query_start_loc
        arg((n * 3,), i32, P(data)),  # request_distribution
    )
    if a.no_embed:
        first = arg((t, d), bf, P(data, None))
        embed = arg((1,), bf, rep)
    else:
        first = arg((t,), i32, P(data))  # input_ids
        embed = arg((a.vocab, d), bf, P(axis.MLP_TENSOR, None))
    final_norm = arg((d,), bf, rep)
    cos_sin = arg((a.max_model_len, rope), f32, rep)

    def rms(x, w, residual=None, eps=1e-6):  # vLLM RMSNorm.forward_native (and its fused residual add)
        orig = x.dtype
        x = x.astype(f32)
        if residual is not None:
            x = x + residual.astype(f32)
            residual = x.astype(orig)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
        return (x.astype(orig) * w), residual

    def rotary(pos, x, cos_sin):  # the non-neox rotary on the last dim (stands in for the yarn table's lookup)
        cs = jnp.take(cos_sin, pos, axis=0)
        cos, sin = jnp.split(cs, 2, axis=-1)
        cos, sin = jnp.repeat(cos, 2, axis=-1), jnp.repeat(sin, 2, axis=-1)
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        x1, x2 = x[..., ::2], x[..., 1::2]
        rot = jnp.stack([-x2, x1], axis=-1).reshape(x.shape)
        return (x.astype(f32) * cos.reshape(shape) + rot.astype(f32) * sin.reshape(shape)).astype(x.dtype)

    def mla(w, x, pos, cache, md, cos_sin):  # VllmMultiHeadLatentAttentionWrapper.forward
        qkv = x @ w["qkv_a"]
        q_c, kv_lora = qkv[:, :ql], qkv[:, ql:]
        q_c, _ = rms(q_c, w["q_a_norm"])
        q = (q_c @ w["q_b"]).reshape(-1, h, nope + rope)
        kv_c, k_pe = kv_lora[:, :lkv], kv_lora[:, lkv:]
        kv_c_normed, _ = rms(kv_c, w["kv_a_norm"])
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        k_pe = k_pe[:, None, :]
        q_pe, k_pe = rotary(pos, q_pe, cos_sin), rotary(pos, k_pe, cos_sin)
        # PallasMLAttentionBackendImpl.forward, as written
        input_dtype = q_nope.dtype
        q_nope = jnp.einsum("bnp,npl->nbl", q_nope, w["w_uk_t"], preferred_element_type=f32)
        q_nope = (q_nope * w["w_uk_t_scale"]).astype(input_dtype)
        q_scale = k_scale = v_scale = 1.0  # layer._q_scale_float etc. (fp8 cache, no calculated scales)
        q_nope = qz.static_per_tensor_quantize_tensor(fp8, q_nope, q_scale)
        q_pe = qz.static_per_tensor_quantize_tensor(fp8, q_pe, q_scale)
        kv_c_normed, _ = qz.quantize_kv(fp8, kv_c_normed, value=None, k_scale=k_scale)
        k_pe, _ = qz.quantize_kv(fp8, k_pe, value=None, k_scale=k_scale)
        k_pe = k_pe.squeeze(1)
        new_cache, out = ai.mla_attention(
            q_nope, q_pe, kv_c_normed, k_pe, cache, md, mesh, h, nope,
            q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, sm_scale=1.0,
        )  # fmt: skip
        out = out.reshape(h, -1, lkv)
        out = (jnp.einsum("nbl,nlv->bnv", out, w["w_uv"], preferred_element_type=f32) * w["w_uv_scale"]).astype(
            input_dtype
        )
        out = out.reshape(-1, h * vh)
        return out @ w["o"], new_cache

    def silu_mlp(x, gate_up, down):
        gu = x @ gate_up
        g, u = jnp.split(gu, 2, axis=-1)
        return (jax.nn.silu(g) * u) @ down

    def moe(w, x):
        logits = jnp.dot(x, w["gate"], preferred_element_type=f32)
        y = fm.fused_moe_func(
            x, w["w1"], w["w2"], w["s1"], w["s2"], None, None, logits, topk=a.topk, renormalize=True, mesh=mesh,
            use_ep=True, activation="silu", scoring_fn="sigmoid", expert_score_correction_bias=w["bias"],
            scatter_results=True,
        )  # fmt: skip
        y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(data, None)))
        return y + silu_mlp(x, w["sh_gate_up"], w["sh_down"])

    def step(caches, first, embed, layers, final_norm, cos_sin, positions, block_tables, seq_lens, qsl, dist):
        md = amd.AttentionMetadata(
            input_positions=positions, block_tables=block_tables, seq_lens=seq_lens, query_start_loc=qsl,
            request_distribution=dist,
        )  # fmt: skip
        x = first if a.no_embed else jnp.take(embed, first, axis=0)
        residual = None
        out = []
        for i, (w, cache) in enumerate(zip(layers, caches)):
            if residual is None:
                residual = x
                x, _ = rms(x, w["in_norm"])
            else:
                x, residual = rms(x, w["in_norm"], residual)
            x, cache = mla(w, x, positions, cache, md, cos_sin)
            out.append(cache)
            x, residual = rms(x, w["post_norm"], residual)
            x = silu_mlp(x, w["gate_up"], w["down"]) if i < a.dense else moe(w, x)
        x, _ = rms(x, final_norm, residual)
        return out, x

    options = {
        "xla_tpu_all_gather_collective_matmul_mode": "post_spmd_conservative",
        "xla_tpu_reduce_scatter_collective_matmul_mode": "post_spmd_conservative",
        "xla_tpu_use_minor_sharding_for_major_trivial_input": "true",
    }  # jit_step_func's compiler_options (SC_ALLREDUCE_ALLGATHER_OFFLOAD_MIN_BYTES unset: no offload threshold)
    t0 = time.time()
    with jax.set_mesh(mesh):
        jitted = jax.jit(
            step,
            donate_argnums=(0,),
            out_shardings=(None, NamedSharding(mesh, P(data, None))),
            compiler_options=None if a.no_options else options,
        )
        m = jitted.lower(caches, first, embed, layers, final_norm, cos_sin, *md_args).compile().memory_analysis()
    cache_bytes = int(np.prod(cache_shape)) // n
    print_record(
        a,
        devs,
        ("tokens", "layers", "dense", "experts", "pages", "reqs", "no_embed", "no_options"),
        m,
        t0,
        ("temp_bytes", "argument_bytes", "output_bytes", "alias_bytes", "code_bytes"),
        cache_bytes_a_layer=cache_bytes,
    )


if __name__ == "__main__":
    main()
