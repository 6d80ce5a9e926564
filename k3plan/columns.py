"""The few element-wise operations the step's formulas need, for ``int | numpy array`` columns.

With plain Python numbers (``fit``: one configuration) they stay Python and numpy is never
imported, so the fit path keeps its startup time; with arrays (``plan``) they are numpy's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # numpy is never imported on fit's path: the aliases are for the type checker only
    import numpy as np

    Col = int | np.ndarray  # one configuration's int, or one entry per configuration

# The column type of one evaluation: ``int`` where fit evaluates one configuration, ``np.ndarray`` where plan
# evaluates one entry per configuration. The step's results are generic in it (``BudgetTerms[int]``), so
# neither caller narrows a union on every field.
C = TypeVar("C", bound="Col")
C_co = TypeVar("C_co", bound="Col", covariant=True)


def _scalar(*xs) -> bool:
    return not any(hasattr(x, "shape") for x in xs)


def where(cond, a, b):
    if not (hasattr(cond, "shape") or hasattr(a, "shape") or hasattr(b, "shape")):  # _scalar, unrolled: hot
        return a if cond else b
    import numpy as np

    return np.where(cond, a, b)


def maximum(a, b):
    if _scalar(a, b):
        return max(a, b)
    import numpy as np

    return np.maximum(a, b)


def minimum(a, b):
    if _scalar(a, b):
        return min(a, b)
    import numpy as np

    return np.minimum(a, b)


def gcd(a, b):
    if _scalar(a, b):
        import math

        return math.gcd(a, b)
    import numpy as np

    return np.gcd(a, b)


def first_true(checks: list, default: int = 0):
    """1 + the index of the first true check (element-wise for arrays), else ``default``."""
    if _scalar(*checks):
        return next((i + 1 for i, c in enumerate(checks) if c), default)
    import numpy as np

    shape = next(np.shape(c) for c in checks if hasattr(c, "shape"))
    return np.select(
        [np.broadcast_to(np.asarray(c, dtype=bool), shape) for c in checks],
        np.arange(1, len(checks) + 1),
        default=default,
    )


def add_into(acc, x):
    """``acc + x``, in place where ``acc`` is an array the caller owns and keeps its dtype (a column a
    step allocates costs page faults over plan's ~230k configurations; fit's Python numbers just add)."""
    if hasattr(acc, "shape") and acc.dtype == _result(acc, x):
        acc += x
        return acc
    return acc + x


def mul_into(acc, x):
    """``acc * x``, in place as ``add_into``."""
    if hasattr(acc, "shape") and acc.dtype == _result(acc, x):
        acc *= x
        return acc
    return acc * x


def _result(a, b):
    import numpy as np

    return np.result_type(a, b)


def logical_not(x):
    """``not x`` for a Python bool, ``~x`` for a bool array (``~True`` is -2 in Python)."""
    return ~x if hasattr(x, "shape") else (not x)


def all_true(x) -> bool:
    """Whether a bool, or every entry of a bool array, is true."""
    return bool(x.all()) if hasattr(x, "shape") else bool(x)


def each(fn, x):
    """``fn`` (a Python function of one float) of each value: of ``x`` itself for a number, of each distinct
    value of a column, spread back (where numpy's own version would differ: Python's ``round`` rounds the
    exact decimal value, ``np.round`` scales by 10^digits first and can differ on a tie)."""
    if not hasattr(x, "shape"):
        return fn(x)
    import numpy as np

    values, inverse = np.unique(x, return_inverse=True)
    return np.array([fn(float(v)) for v in values])[inverse.reshape(x.shape)]
