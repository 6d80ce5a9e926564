"""From a verdict to a deployment (issue 13): prices and cost, the Pareto front, launch commands,
cold start and host RAM, disaggregated prefill/decode sizing.

Pure, typed functions over ints, floats and numpy columns; nothing here imports jax, pandas or
matplotlib at module level. `plan` and `report` call them; they do not call back.
"""
