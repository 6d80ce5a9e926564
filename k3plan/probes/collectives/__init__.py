"""Collective probes: a2a, allreduce, allgather (chained and unchained per-call latency)."""
