"""One description of a serving step, evaluated once.

Every memory and time term of a prefill chunk or a decode step is written here once, over
``int | numpy array`` columns: ``fit`` evaluates it at one configuration (plain ints), ``plan``
over columns of configurations, ``report`` and the default topology are ``plan`` plus a filter.
- ops.py: the step as a list of ops derived from the inventory's tensor groups (matmuls by role,
  absorbed MLA attention, KDA recurrence / chunked scan, grouped expert matmuls, norms, each
  collective with its ``Collective``, group and calls), each op with its bytes, FLOPs, calls and,
  built with the stack's formulation, the buffers live at its peak; ``to_op_costs`` feeds speed.expected;
- live.py: those live buffers by op kind, what stays resident across ops, and the temp model's
  features read off the op list (peak and rest over the ops' live bytes);
- memory.py: KV/state layout, temporaries by named term, the per-device budget;
- cache.py: KV cache and KDA state bytes a token / a sequence and their paged layout a device (fit's
  CacheLayout; budget, roofline, speed, tiers and workload read it), in dtypes.py's bytes a value;
- comm.py: the collectives' calls and bytes a chip (sums over ops.collective_ops) and their time;
- decode.py: bytes, FLOPs (sums over ops.decode_ops) and time of one decode step;
- verdict.py: why a configuration is rejected, the first check it fails (fit and plan alike).
"""
