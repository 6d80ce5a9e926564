"""validate has no abstract model of DeepSeek-V4 yet: it refuses in one line rather than compiling it as MLA."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.setup import make_setup
from k3plan.validate.run import plan_jobs


def test_dsv4_refused_before_any_compile():
    setup = make_setup(model="deepseek-v4-flash", hardware="tpu-v7x", topology="2x2x1")
    with pytest.raises(K3PlanError, match="DeepSeek-V4's compressed attention"):
        plan_jobs(setup=setup, stage="decode", tokens=[], batch=1, context=4096)
