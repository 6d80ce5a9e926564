"""The search: hardware x topologies x (tp, ep, dp) x stacks (x KV dtypes x prefill chunks), as numpy
columns, ranked by an objective, with every rejected family explained. See search.plan().

The names below are loaded on first use, so that a module of this package that needs no numpy
(``plan.defaults`` on fit's path, with its topology given) can be imported without the search."""

from typing import Any

__all__ = ["DEFAULT_MAX_CHIPS", "OBJECTIVES", "PlanResult", "plan"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from k3plan.plan import search

        return getattr(search, name)
    raise AttributeError(f"module 'k3plan.plan' has no attribute {name!r}")
