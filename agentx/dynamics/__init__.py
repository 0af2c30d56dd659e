"""Serving dynamics: operating-point sweeps, time-driven replay, admission control,
disaggregated vs aggregated pools, bandwidth vs capacity (SEED-12/13, 15-21)."""
