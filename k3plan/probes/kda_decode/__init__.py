"""KDA decode probe: a Pallas single-step kernel (state in, state out, no chunk padding)."""
