"""KV cache tiers (SEED-4, 5, 7, 12, 13): immutable blocks in HBM, host DRAM and SSD."""
