"""A CPU stand-in with gmm_v2's call signature (k3plan probe gmm --kernel): the test's kernel, not an engine's.

Dequantizes the block-32 scaled weights in f32 and runs jax.lax.ragged_dot; ``fuse_act="silu"`` splits N in
gate and up halves as gmm_v2 does. Test data for tests/probes/test_probe_gmm.py only."""

import jax
import jax.numpy as jnp

SOURCE = {"repo": "k3plan", "path": "tests/probes/gmm_standin.py", "commit": "test"}
LOCAL_EDITS = ["a jnp stand-in for the CPU test: lax.ragged_dot on the dequantized weights"]


def gmm_v2(
    lhs,
    rhs,
    group_sizes,
    rhs_scale=None,
    rhs_bias=None,
    group_offset=None,
    *,
    zero_initialize=True,
    fuse_act=None,
    preferred_element_type=None,
    maybe_quantize_lhs=True,
):
    w = rhs.astype(jnp.float32)
    if rhs_scale is not None:
        block = w.shape[1] // rhs_scale.shape[1]
        w = w * jnp.repeat(rhs_scale[:, :, 0, :], block, axis=1)
    rows = lhs.shape[0]
    sizes = group_sizes.at[-1].add(rows - group_sizes.sum())  # ragged_dot: the groups cover every row
    out = jax.lax.ragged_dot(lhs.astype(jnp.float32), w, sizes)
    if fuse_act == "silu":
        half = out.shape[1] // 2
        out = jax.nn.silu(out[:, :half]) * out[:, half:]
    return out.astype(preferred_element_type or lhs.dtype)
