"""The search: hardware x topologies x (tp, ep, dp) x stacks (x KV dtypes x prefill chunks), as numpy
columns, ranked by an objective, with every rejected family explained. See search.plan()."""

from k3plan.plan.search import DEFAULT_MAX_CHIPS, OBJECTIVES, PlanResult, plan

__all__ = ["DEFAULT_MAX_CHIPS", "OBJECTIVES", "PlanResult", "plan"]
