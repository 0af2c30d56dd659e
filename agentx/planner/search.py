"""The cheapest configuration of each system that serves a trace's load within a service level.

For every layout of a system (GPUs per model instance, data- or tensor-parallel attention)
that holds the model's weights:

1. steady-state in-flight batching (``agentx.planner.serving``, on engineer #9's iteration
   model ``agentx.serving.iteration``) gives, for every decode batch B, the time per output
   token with the trace's prefill chunks interleaved and the calls/s one instance serves;
2. the decode batch is the largest whose TPOT meets the limit and whose KV fits — the
   replay of the trace at that batch (``agentx.replay``) confirms the HBM peak with the
   trace's real contexts (bisecting B down when it does not fit) and prices the energy;
3. instances = ⌈offered calls/s ÷ calls/s per instance⌉; a load K times larger
   (``--load-scale``, sessions replicated) is K times the offered rate;
4. a layout meets the service level when its TPOT and its TTFT percentiles (chunked prefill
   of the call's new tokens plus the M/D/1 wait for the prefill budget) are within it.

The cheapest layout is the one with fewest GPUs (one price per GPU-hour per system), then the
least energy. Energy counts the replayed work plus the idle (static) draw of provisioned GPUs
for the time they are not busy, so over-provisioning costs joules as it costs dollars.

``evaluate`` is the one seam to the serving model: it prices one configuration. The frontier
(output tokens/s per GPU against tokens/s per user, the chart public benchmarks publish) comes
from the same steady state over every decode batch.
"""

from __future__ import annotations

import polars as pl

from agentx.errors import CapacityError, UsageError
from agentx.planner.evaluate import BATCHES, evaluate, evaluate_disaggregated
from agentx.planner.frontier import frontier_points, pareto
from agentx.planner.load import Load, layouts, trace_load

# the search's phases live in load (what is searched), evaluate (one configuration priced) and
# frontier (the chart); their public names stay importable from here
__all__ = [
    "BATCHES",
    "RESULT_KEYS",
    "TABLE_KEYS",
    "Load",
    "compare",
    "evaluate",
    "evaluate_disaggregated",
    "frontier_points",
    "layouts",
    "pareto",
    "plan_system",
    "trace_load",
]

RESULT_KEYS = (
    "hw",
    "gpus",
    "instances",
    "gpus_per_instance",
    "serving",
    "layout",
    "decode_batch",
    "meets_slo",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "gpu_hours",
    "j_per_output_token",
    "usd_per_gpu_hour",
    "usd_per_m_output_tokens",
    "hbm_peak_gb_per_gpu",
    "tpot_ms",
    "tpot_p99_ms",
    "ttft_p99_ms",
    "utilization",
)


# The columns of the printed table (the rest are in --json and the run's compare.parquet).
TABLE_KEYS = (
    "hw",
    "gpus",
    "layout",
    "meets_slo",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "gpu_hours",
    "j_per_output_token",
    "usd_per_m_output_tokens",
    "hbm_peak_gb_per_gpu",
    "tpot_p99_ms",
    "ttft_p99_ms",
)


def plan_system(
    catalog, hw: str, model: str, load: Load, slo: dict[str, float], *,
    gpus: list[int] | None = None, usd_per_gpu_hour: float | None = None, **config,
) -> tuple[dict, list[dict], pl.DataFrame]:  # fmt: skip
    """(cheapest configuration, every configuration tried, frontier points) for one system."""
    from agentx.planner.prices import default_price
    from agentx.replay.config import make_config
    from agentx.replay.footprint import check_fits

    price, source = (
        (usd_per_gpu_hour, "--usd-per-gpu-hour")
        if usd_per_gpu_hour is not None
        else default_price(hw)
    )
    system, spec = catalog.system(hw), catalog.model(model)
    tried, skipped, points, fitting = [], [], [], []
    for g, dp in layouts(system, spec, gpus):
        try:
            cfg = make_config(catalog, hw, model, gpus=g, dp_attention=dp, **config)
            check_fits(cfg)
        except (CapacityError, UsageError) as err:
            skipped.append({"gpus_per_instance": g, "reason": str(err)})
            continue
        fitting.append(cfg)
    # aggregated instances, then each layout as the decode pool beside every prefill layout
    for cfg in fitting:
        for fn in (evaluate, lambda c, *a: evaluate_disaggregated(c, fitting, *a)):
            try:
                row = fn(cfg, load, slo, price)
            except (CapacityError, UsageError) as err:
                skipped.append({"gpus_per_instance": cfg.gpus, "reason": str(err)})
                continue
            tried.append(row)
            points.append(frontier_points(row))
    if not tried:
        reasons = "; ".join(sorted({s["reason"] for s in skipped}))[:400]
        raise UsageError(f"no layout of {hw} can serve {model}: {reasons}")
    ok = [r for r in tried if r["meets_slo"]]
    # Fewest GPUs, then least energy; without any layout in the SLO, the fastest TPOT one.
    best = (
        min(ok, key=lambda r: (r["gpus"], r["j_per_output_token"] or 0.0))
        if ok
        else min(tried, key=lambda r: (r["tpot_ms"], r["ttft_p99_ms"]))
    )
    best = {**best, "price_source": source, "layouts_tried": len(tried)}
    return best, tried, pl.concat(points)


def compare(
    catalog, trace, systems: list[str], model: str = "kimi-k2", slo: dict | None = None,
    load_scale: float = 1.0, on_system=None, **kw,
) -> tuple[list[dict], pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """For each system its cheapest configuration (``RESULT_KEYS`` + price source), a frame of
    every configuration tried, and the Pareto frontier points of all systems."""
    from agentx.planner.slo import DEFAULT, parse_slo

    slo = parse_slo(DEFAULT) if slo is None else slo
    calls = trace.calls if hasattr(trace, "calls") else trace
    load = trace_load(calls, load_scale)
    results, tried, points = [], [], []
    for hw in systems:
        if on_system is not None:
            on_system(hw)  # progress: one step per system
        best, rows, pts = plan_system(catalog, hw, model, load, slo, **kw)
        results.append({k: v for k, v in best.items() if not k.startswith("_")})
        tried += [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
        points.append(pts)
    return results, pl.DataFrame(tried), pareto(pl.concat(points))
