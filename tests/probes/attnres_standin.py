"""A CPU stand-in with attention_residual's call signature (k3plan probe attnres --kernel): the test's kernel,
not an engine's.

A jnp mix of the same math (the K saved blocks and the prefix as K + 1 vectors in f32, an RMS-normalised score
against the folded weight, a softmax over the vectors, their weighted sum cast back), no Pallas. Test data for
tests/probes/test_probe_attnres.py only."""

import jax
import jax.numpy as jnp

SOURCE = {"repo": "k3plan", "path": "tests/probes/attnres_standin.py", "commit": "test"}
LOCAL_EDITS = ["a jnp stand-in for the CPU test: no Pallas"]


def attention_residual(prefix, history, folded_weight, *, eps=1e-5, interpret=False):
    tokens, hidden = prefix.shape
    if history.shape[0] != tokens or history.shape[-1] != hidden:
        raise ValueError("prefix/history shapes disagree")
    if history.shape[1] == 0:
        return prefix
    values = jnp.concatenate((history, prefix[:, None, :]), axis=1).astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(values * values, axis=-1, keepdims=True) + eps)
    scores = jnp.sum(values * folded_weight.astype(jnp.float32), axis=-1, keepdims=True) * inv
    p = jax.nn.softmax(scores, axis=1)
    return jnp.sum(values * p, axis=1).astype(prefix.dtype)
