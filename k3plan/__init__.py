"""k3plan: capacity and roofline planner for frontier MoE models on accelerators."""

__version__ = "0.1.0"
