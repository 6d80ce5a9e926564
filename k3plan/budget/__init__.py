"""Per-device memory terms and the fit: pure functions over frozen models."""
