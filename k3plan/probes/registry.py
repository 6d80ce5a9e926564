"""The probes, explicit and greppable: CLI name -> (module, one-line description)."""

from __future__ import annotations

PROBES: dict[str, tuple[str, str]] = {
    "a2a": ("k3plan.probes.collectives.probe", "per-call latency of all-to-all, chained and unchained"),
    "allreduce": ("k3plan.probes.collectives.probe", "per-call latency of all-reduce"),
    "allgather": ("k3plan.probes.collectives.probe", "per-call latency of all-gather"),
    "hbm": ("k3plan.probes.hbm.probe", "achieved HBM bandwidth (XLA copy/reduce or a Pallas stream)"),
    "matmul": ("k3plan.probes.matmul", "achieved dense FLOP/s by dtype"),
    "kda": ("k3plan.probes.kda.probe", "KDA per-token cost vs sequence length, chunked and recurrent"),
    "kda-decode": ("k3plan.probes.kda_decode.probe", "Pallas single-step KDA decode kernel vs jnp reference"),
    "ragged-dot": ("k3plan.probes.ragged_dot", "jax.lax.ragged_dot grouped matmul at K3 expert shapes"),
    "gmm": ("k3plan.probes.gmm", "an engine's grouped-matmul kernel (gmm_v2, from --kernel) at K3's expert shapes"),
    "kda-engine": (
        "k3plan.probes.kda_engine",
        "an engine's own KDA kernels (chunk_kda, decode_kda, from --kernel files) at K3's per-device shapes",
    ),
    "attnres": (
        "k3plan.probes.attnres_engine",
        "an engine's Attention Residual kernel (attention_residual, from --kernel) at K3's per-device shapes",
    ),
    "moe-glue": (
        "k3plan.probes.moe_glue",
        "the XLA routing/permute/combine glue around an engine's expert matmuls at decode (moe_glue, from --kernel)",
    ),
    "dsv4-ops": (
        "k3plan.probes.dsv4_ops",
        "DeepSeek-V4's attention-side ops of one layer (indexer + top-k, CSA gather + attention, HCA, window, "
        "compressors, mHC) as jnp references at a DP group's per-device shapes",
    ),
    "step": ("k3plan.probes.step.probe", "a scaled K3 decode step, measured vs expected from its op list"),
}
