"""`k3plan check`: a committed baseline of per-device budgets, recomputed and compared (a CI gate)."""
