"""Memory below HBM: host DRAM, local SSD and remote storage as tiers (issue 14)."""
