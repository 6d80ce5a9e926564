"""Achievable speed (issue 17): efficiency curves from probe records, expected time per op and per
stage beside the ceiling, and a continuous-batching scheduler model (TTFT, TPOT, throughput).

    peaks.Peaks.from_hardware(hw)                  the roofs a device kind is measured against
    curves.load_curves(dir, peaks=)                probe records -> EfficiencyCurves (one device kind)
    efficiency.efficiency(curves, op_kind=, ...)   Efficiency(value, record_path, point_used, label)
    ops.OpCost                                     one op of a step (what the step's op list maps onto)
    expected.expected_time(ops, peaks=, curves=)   StageTime(ceiling_s, expected_s, by_kind, labels)
    scheduler.simulate(...)                        continuous batching with chunked prefill
    stage.expected_speed(setup, ...)               a Setup's decode step and prompt prefill (roofline, report)

Jax-free: `roofline` and `plan` import it.
"""
