"""Workload models beyond one request: multi-turn sessions, speculative decoding (issue 14)."""
