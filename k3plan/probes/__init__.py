"""Probes: microbenchmarks that measure on the target what the analytic model cannot know.

One module or folder per probe (collectives, hbm, matmul, kda, kda_decode, ragged_dot), each with
an ``IMPLEMENTATIONS`` dict dispatched tokamax-style (``dispatch.py``), a reference expectation
from a hardware spec (``expect.py``) and a ``run`` that returns ``ProbeRecord``s (``record.py``).

Importing this package does not import jax: ``record``, ``records``, ``hlo`` and ``store`` are
jax-free so that ``fit``/``roofline``/``plan`` can read probe records on the fast path. Everything
that needs jax imports it inside functions, after ``env.prepare_jax`` has set XLA_FLAGS.
"""
