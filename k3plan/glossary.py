"""What the terms k3plan prints mean (``k3plan explain TERM``; issue 36: jargon a new user met unexplained).

Ground layer: plain data. Each entry: the term as the output spells it, other spellings that find it, one
paragraph, and where to read more (a doc of this checkout or the module that computes it).
"""

from __future__ import annotations

from typing import NamedTuple


class Term(NamedTuple):
    term: str
    aliases: tuple[str, ...]
    text: str
    more: str


TERMS: tuple[Term, ...] = (
    Term(
        "KDA",
        ("kimi delta attention", "kda state", "linear attention"),
        "Kimi Delta Attention: K3's linear-attention layers (69 of its 93). Instead of a KV cache that grows "
        "with the context, each sequence keeps a fixed-size recurrent state a layer (f32 recurrent + bf16 "
        "convolution): fit's 'KDA state' term, the same at 1K or 1M tokens.",
        "docs/k3-facts.md §1 and §3; k3plan/step/cache.py",
    ),
    Term(
        "MLA",
        ("multi-head latent attention", "absorbed mla", "latent"),
        "Multi-head Latent Attention: K3's full-attention layers (24 of 93), which cache one compressed latent "
        "a token (kv_lora 512 + rope 64 values) instead of per-head keys and values. 'Absorbed MLA': engines "
        "split kv_b_proj into W_UK / W_UV at load and hold both beside it; fit counts those copies.",
        "docs/k3-facts.md §1 and §3",
    ),
    Term(
        "KV cache",
        ("kv", "kv dtype", "kv-dtype", "fp8_ds_mla"),
        "The MLA layers' cached latents, a token a layer, for every sequence: it grows with context x batch. "
        "--kv-dtype picks its format (bf16, fp8, fp8_ds_mla: vLLM's packed DeepSeek FP8 MLA layout; not every "
        "engine has every format, and the advice prices only those the stack's engine offers).",
        "docs/k3-facts.md §3; k3plan/engines/flags.py",
    ),
    Term(
        "hybrid paging",
        ("hybrid", "paging", "hybrid kv cache manager", "blocks", "page"),
        "vLLM's hybrid KV-cache manager: one page size for every layer, so a KDA layer's state is padded to "
        "whole pages and the attention block holds as many tokens as fit a page (e.g. 'blocks of 192 tokens'). "
        "fit counts the padding; stacks with 'separate' paging (SGLang) keep the state in its own pool.",
        "k3plan/step/cache.py; the stack YAMLs' paging.source",
    ),
    Term(
        "graph buckets",
        ("buckets", "cuda graphs", "compiled graphs"),
        "The batch sizes and token counts an engine compiles (XLA) or captures (CUDA graphs) ahead of serving, "
        "one graph a bucket; each needs its own workspace at its peak. With the KV peak of a real workload "
        "they are why fit warns when under 10% of usable HBM is left free (headroom).",
        "docs/beyond-fit.md (rule 2)",
    ),
    Term(
        "headroom",
        ("thin", "thin headroom", "margin", "free"),
        "Free HBM a device after every term, over usable HBM. Under 10% it still fits, but the advice calls "
        "it thin: a real workload's KV peak and the graph buckets need room the budget does not model.",
        "docs/beyond-fit.md; k3plan/advice/rules.py",
    ),
    Term(
        "temporaries",
        ("temp", "temp model", "activations", "calibration"),
        "Activations and scratch buffers one forward step holds at its peak (prefill at the chunk, decode at "
        "the batch). Taken from a shipped or --calibration file (measured or compiled) where one matches the "
        "configuration, else from the shipped temp model's upper end, else an analytic lower bound; the "
        "source column says which.",
        "k3plan/budget/temp.py; reports/validation/README.md",
    ),
    Term(
        "engine reserve",
        ("reserve", "gpu-memory-utilization", "mem_fraction_static"),
        "HBM the serving engine leaves unused (vLLM's --gpu-memory-utilization 0.9 leaves 10%; SGLang's "
        "mem_fraction_static); fit subtracts it as the engine does.",
        "the stack YAMLs' reserve.source",
    ),
    Term(
        "usable HBM",
        ("hbm", "usable"),
        "The HBM a device reports available to programs (less than the marketed capacity); every % in fit is "
        "of it. The hardware spec cites where each figure was read.",
        "docs/hardware-facts.md",
    ),
    Term(
        "split",
        ("tp", "ep", "dp", "pp", "parallel", "tensor parallel", "expert parallel", "pipeline"),
        "How the devices are used: tp (tensor parallel: attention heads and dense matrices cut over tp "
        "devices), ep (expert parallel: routed experts spread over ep devices), dp (data parallel: dp copies "
        "serving different sequences), pp (pipeline: the layers cut into pp stages of whole scale-up domains). "
        "tp x dp x pp = the devices.",
        "docs/architecture.md; k3plan/sharding/",
    ),
    Term(
        "DP attention",
        ("dp-attention", "dp_attention", "attention dp"),
        "Attention split by sequences instead of heads: each DP rank runs whole attention for its own sequences "
        "while the experts are spread over all devices (SGLang --enable-dp-attention, tpu-inference "
        "enable_dp_attention). The attention weights are then held whole on every device.",
        "the dp-attention stack YAML",
    ),
    Term(
        "fallback",
        ("replication", "replicated", "does not divide"),
        "A tensor dimension the mesh does not divide (96 heads over tp 64) falls back to being held whole on "
        "every device. fit and plan refuse such a split; the advice names a TP that divides.",
        "k3plan/sharding/resolve.py",
    ),
    Term(
        "stack",
        ("engine", "vllm-tpu", "jax-native", "sglang", "vllm", "tpu-inference"),
        "The serving software k3plan prices: how it shards, lays out the KV cache and state, reserves memory "
        "and which KV formats it has. A stack whose engine would refuse the configuration says so in a "
        "warning ('the engine does not run this as priced').",
        "k3plan/engines/*/stack.yaml",
    ),
    Term(
        "prefill chunk",
        ("chunk", "chunked prefill", "max_num_batched_tokens"),
        "Prompt tokens processed a forward step (vLLM's max_num_batched_tokens): a larger chunk needs larger "
        "temporaries and leaves less room for the KV cache; `k3plan curve` shows the trade.",
        "k3plan/budget/curve.py",
    ),
    Term(
        "TPOT",
        ("time per output token", "decode bound", "tpot_ms"),
        "Time per output token: one decode step's time for the batch (each sequence gets one token a step).",
        "k3plan/roofline/bounds.py",
    ),
    Term(
        "TTFT",
        ("time to first token", "prefill"),
        "Time to first token: one prompt's prefill (no queueing), chunk by chunk.",
        "k3plan/roofline/bounds.py",
    ),
    Term(
        "MFU",
        ("model flops utilization", "efficiency"),
        "Model FLOPs utilization: the share of the peak FLOP/s the roofline assumes a step achieves (30% by "
        "default, the porting study's prefill figure); HBM bandwidth is taken at 100% unless said.",
        "docs/k3-facts.md §5",
    ),
    Term(
        "roofline",
        ("binding", "memory-bound", "compute-bound", "collective-bound", "ceiling"),
        "A step's time bound: the slowest of its FLOPs at the peak x MFU, its bytes at the HBM bandwidth and its "
        "collectives (calls x latency + bytes / link bandwidth); the 'binding' roof is the one that sets it. "
        "The ceiling is that bound; the expected time applies measured efficiencies from probe records.",
        "docs/expected-time.md; k3plan/roofline/",
    ),
    Term(
        "study view",
        ("ideal", "study view (ideal)", "aggregate view"),
        "roofline's 'study view (ideal)' column: the porting study's aggregate method, one copy of every byte "
        "over the summed HBM bandwidth of all devices, FLOPs split evenly. A lower bound: it ignores what each "
        "device holds twice (replicated weights, the whole latent on every TP rank); the per-device columns do not.",
        "docs/k3-facts.md §5; k3plan/roofline/bounds.py",
    ),
    Term(
        "porting study",
        ("the study", "k3 porting study"),
        "The analysis of serving Kimi K3 on TPUs that k3plan's numbers are checked against: its weight totals, "
        "topology floor, bytes a decode step and MFU figures (docs/k3-facts.md §5 reproduces its tables; "
        "§6 its lessons from real TPUs).",
        "docs/k3-facts.md §5-6",
    ),
    Term(
        "probe records",
        ("probes", "--probes", "probe", "measured"),
        "JSON files `k3plan probe` writes (./k3plan-probes by default): measured HBM bandwidth, collective "
        "latencies and kernel efficiencies of a device kind. k3plan ships the device records it was measured "
        "against (k3plan/evidence/probes), read alike from any folder; --probes DIR adds yours to them (never "
        "replacing them) and lets a record's HBM bandwidth and collective latency replace the spec's where the "
        "device kind matches; CPU records only with --allow-cpu-probes. The JSON names every record used.",
        "docs/expected-time.md; k3plan/evidence/value.py; k3plan/probes/",
    ),
    Term(
        "closest miss",
        ("closest", "nothing passes"),
        "When no configuration passes, plan shows the one that came closest (the fastest TPOT miss, else the "
        "memory miss with the most free HBM) and applies the advice to it; plan --json says why in reason / "
        "reason_code.",
        "k3plan/plan/search.py",
    ),
    Term(
        "Pareto front",
        ("pareto", "tokens per user", "tokens per chip"),
        "The configurations no other beats on both tokens/s per user and tokens/s per chip (plan --isl --osl, "
        "report's deployment section).",
        "k3plan/deploy/pareto.py",
    ),
    Term(
        "ShardSpecs",
        ("shardspecs", "--shardspecs", "sharding"),
        "A YAML file (or module:function) saying how each tensor is split over the mesh: one key, shardspecs, a "
        "mapping of tensor-name regex -> one entry a dimension (null, tp, dp, ep, or a list of them); the first "
        "match wins; unmatched tensors follow the stack's rules.",
        "docs/shardspecs.md; docs/examples/shardspecs.yaml",
    ),
    Term(
        "crossover",
        ("kv overtakes kda state", "kv_state_crossover_tokens"),
        "The context at which a sequence's MLA KV cache outgrows its fixed KDA state; above it the KV cache "
        "dominates a sequence's memory.",
        "k3plan/budget/fit.py",
    ),
    Term(
        "reason_code",
        ("reason", "verdict", "fits", "does not fit"),
        "Why a configuration does not fit, as a stable code in --json (feasible, fallback, weights, budget, "
        "concurrency, tpot, unpriced, calibration, sla, no_chunk, no_context, no_configuration, launch: plan's "
        "configurations that fit but that their stack cannot launch as priced; fits_if_temp_unverified: fit's checks "
        "pass on the analytic temp's lower bound only, exit 3) beside the reason text the verdict line prints.",
        "k3plan/step/verdict.py ReasonCode",
    ),
    Term(
        "tokens",
        ("k", "128k", "1m", "token count", "context"),
        "Token counts take a k (1,024) or M (1,048,576) suffix, as model cards count contexts: 128k = 131,072, "
        "1M = 1,048,576.",
        "k3plan/tokencount.py",
    ),
)


def _key(text: str) -> str:
    return " ".join(text.lower().replace("_", " ").replace("-", " ").split())


def lookup(text: str) -> Term | None:
    """The entry whose term or an alias is ``text`` (case, '-', '_' and spaces aside), else None."""
    k = _key(text)
    for t in TERMS:
        if k == _key(t.term) or k in (_key(a) for a in t.aliases):
            return t
    return None


def near(text: str, n: int = 3) -> list[str]:
    """Terms whose name or aliases contain ``text`` or are contained in it (for 'did you mean')."""
    import difflib

    k = _key(text)
    hits = [t.term for t in TERMS if any(k in _key(s) or _key(s) in k for s in (t.term, *t.aliases) if len(s) > 2)]
    names = {_key(s): t.term for t in TERMS for s in (t.term, *t.aliases)}
    close = [names[m] for m in difflib.get_close_matches(k, list(names), n=n)]
    return list(dict.fromkeys(hits + close))[:n]
