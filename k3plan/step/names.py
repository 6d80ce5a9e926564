"""A tensor's name within its layer, the key the step's ops group the inventory by."""

from __future__ import annotations

import functools
import re

from k3plan.models.inventory import Tensor

ABSORBED_LEAF = "self_attn.kv_b_proj"


def row_gather(t: Tensor) -> bool:
    """A table a step reads a row of a token, not streams whole: the embedding, DeepSeek-V4's tid2eid hash routing
    (int64). Neither the decode step's weight ops (step.ops.weight_ops) nor its streamed sums
    (step.weight_budget.weight_terms: plan's dense_bytes column) count it, so fit and plan read alike."""
    return t.role == "embed" or t.fmt == "i64"


def leaf_name(t: Tensor) -> str:
    """The tensor's name within its layer: 'self_attn.q_b_proj', 'block_sparse_moe.experts.w1'."""
    return _leaf_of(t.name)


# the layer prefix ('....layers.12.') if any, then a leading 'language_model.' and/or 'model.'
_PREFIX = re.compile(r"^(?:.*?\.layers\.\d+\.)?(?:language_model\.)?(?:model\.)?")


@functools.lru_cache(maxsize=None)
def _leaf_of(name: str) -> str:  # one answer a tensor name: every decode/prefill bound groups the inventory again
    return _PREFIX.sub("", name, count=1).replace(".{e}", "").removesuffix(".weight")
