"""Decode and prefill time bounds: bytes, FLOPs, collectives (count x latency + bytes / bandwidth)."""
