"""Evidence that outranks arithmetic: calibrations measured on real devices or compiled by validate."""
