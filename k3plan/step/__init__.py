"""One description of a serving step, evaluated once.

Every memory and time term of a prefill chunk or a decode step is written here once, over
``int | numpy array`` columns: ``fit`` evaluates it at one configuration (plain ints), ``plan``
over columns of configurations, ``report`` and the default topology are ``plan`` plus a filter.
- memory.py: KV/state layout, temporaries by named term, the per-device budget;
- comm.py: the collectives a step issues (``Collective``), their calls, bytes and latency;
- decode.py: bytes, FLOPs and time of one decode step;
- verdict.py: why a configuration is rejected, the first check it fails (fit and plan alike).
"""
