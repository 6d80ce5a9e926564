"""HBM bandwidth probe: XLA copy/reduce, or a pipelined Pallas streaming copy."""
