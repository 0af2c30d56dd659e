"""Charts as values: each function takes polars frames (run tables or trace calls) and returns an
altair chart; saving, embedding and export are the caller's job (see ``report``).

Frames are aggregated in polars before they reach altair, so a chart of a 40k-call replay
carries a few hundred rows, not the calls. No selections or named parameters are used:
altair numbers those per process, which would make the same input give different HTML.

This module is the charts' public entry point; the charts live by family in ``charts_serving``
(stages, HBM, frontiers), ``charts_kv`` (KV tiers, hit ratio, context growth) and
``charts_dynamics`` (over time and against N), sharing ``charts_frames``.
"""

from __future__ import annotations

from agentx.analysis.charts_dynamics import (
    hit_ratio_vs_users,
    kv_usage_over_time,
    sim_timeseries,
    throughput_ttft_vs_users,
)
from agentx.analysis.charts_frames import LINKS, STAGE_ORDER, pareto_frontier
from agentx.analysis.charts_kv import context_growth, hit_ratio_curve, kv_link_bytes
from agentx.analysis.charts_serving import (
    FOOTPRINT_TOTALS,
    frontier,
    hbm_footprint,
    latency_throughput,
    stage_shares,
)

__all__ = [
    "FOOTPRINT_TOTALS",
    "LINKS",
    "STAGE_ORDER",
    "context_growth",
    "frontier",
    "hbm_footprint",
    "hit_ratio_curve",
    "hit_ratio_vs_users",
    "kv_link_bytes",
    "kv_usage_over_time",
    "latency_throughput",
    "pareto_frontier",
    "sim_timeseries",
    "stage_shares",
    "throughput_ttft_vs_users",
]
