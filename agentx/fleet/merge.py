"""Merging replicas' partial tables into the fleet's: calls in trace order, stages summed,
per-replica load / hit ratio / imbalance, and load per replica over time (docs/metrics.md).

The merge visits partials in replica order whatever order an engine finished them in, so
the local and Ray engines give the same bytes.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from agentx.fleet.replica import LATENCY, Partial
from agentx.replay.stages import KEYS

TOKENS = ("input_tokens", "reused_prefix_tokens", "new_tokens", "output_tokens")
ROW = {
    "calls": pl.UInt32, "sessions": pl.UInt32, "input_tokens": pl.Int64,
    "reused_prefix_tokens": pl.Int64, "output_tokens": pl.Int64, "work_s": pl.Float64,
    "energy_j": pl.Float64, "kv_hit_tokens": pl.Int64, "hbm_peak_bytes_per_gpu": pl.Float64,
    "kv_block_size_tokens": pl.Int64,
}  # fmt: skip
BUCKETS_S = (1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0)


def bucket_for(span_s: float, buckets: int = 200) -> float:
    """The smallest round bucket that cuts ``span_s`` into at most ``buckets`` pieces."""
    for b in BUCKETS_S:
        if span_s / b <= buckets:
            return b
    return BUCKETS_S[-1] * math.ceil(span_s / (BUCKETS_S[-1] * buckets))


def merge(partials: list[Partial], replicas: int, fleet: dict) -> dict:
    """Tables ``calls`` (when the replicas sent rows), ``stages``, ``footprint``, ``replicas``,
    ``replica_load`` and the fleet summary. ``fleet`` holds the routing parameters and
    ``sessions`` (distinct over the whole trace: a session may span replicas)."""
    parts = sorted(partials, key=lambda p: p.replica)
    full = [p for p in parts if p.summary.get("calls")]
    tokens = {c: sum(p.summary["tokens"][c] for p in full) for c in TOKENS}
    stages = fleet_stages([p.stages for p in full], tokens["output_tokens"])
    sums = {r.pop("stage"): r for r in stages.iter_rows(named=True)}
    t_all, e_all = float(stages["time_s"].sum()), float(stages["energy_j"].sum())
    out_tokens = float(tokens["output_tokens"])
    footprint = (
        pl.concat([p.footprint for p in full])
        .group_by("component", maintain_order=True)
        .agg(pl.col("bytes_per_gpu").max())
    )
    per_replica = replica_table(parts, replicas)
    load = pl.concat([p.load for p in full]).sort("replica", "bucket_start_s")
    latency = pl.concat([p.latency for p in full])
    work = per_replica.get_column("work_s").to_numpy()
    hits = per_replica.get_column("kv_hit_tokens")
    first = full[0].summary
    summary = {
        "system": first.get("system"),
        "model": first.get("model"),
        "layout": first.get("layout"),
        "gpus": first.get("gpus", 0) * replicas,
        "gpus_per_replica": first.get("gpus"),
        "calls": sum(p.summary["calls"] for p in full),
        "sessions": fleet.get("sessions"),
        "tokens": tokens,
        "stages": sums,
        "total_time_s": t_all,
        "total_energy_j": e_all,
        "j_per_output_token": e_all / out_tokens if out_tokens > 0 else 0.0,
        "latency_s": {
            c: {q: _q(latency[c], v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
            for c in LATENCY
        },
        "hbm_peak_bytes_per_gpu": max(p.summary["hbm_peak_bytes_per_gpu"] for p in full),
        "kv_fits_in_hbm": all(p.summary["kv_fits_in_hbm"] for p in full),
        "fleet": {
            **{k: v for k, v in fleet.items() if k != "sessions"},
            "replicas": replicas,
            "hit_ratio": (
                int(hits.sum()) / tokens["reused_prefix_tokens"]
                if tokens["reused_prefix_tokens"]
                and hits.null_count() == replicas - len(full)
                and len(full)
                else None
            ),
            "imbalance": float(work.max() / work.mean()) if work.mean() > 0 else 1.0,
            "calls_imbalance": _imbalance(per_replica.get_column("calls").to_numpy()),
            "busiest_replica": int(work.argmax()),
            "kv_block_size_notes": sorted(
                {n for p in full if (n := (p.summary.get("kv_tiers") or {}).get("block_size_note"))}
            ),
            "replica_load_bucket_s": float(load["bucket_s"][0]) if load.height else 0.0,
        },
    }
    tables = {
        "stages": stages,
        "footprint": footprint,
        "replicas": per_replica,
        "replica_load": load,
    }
    rows = [p.calls for p in full if p.calls.width]
    if rows:
        tables = {"calls": pl.concat(rows, how="diagonal_relaxed").sort("trace_row"), **tables}
    return {"tables": tables, "summary": summary}


def fleet_stages(frames: list[pl.DataFrame], output_tokens: int) -> pl.DataFrame:
    """Replicas' stage tables summed (replica order), with the shares recomputed fleet-wide."""
    ratio = lambda a, b: pl.when(b > 0).then(a / b).otherwise(0.0)  # noqa: E731
    return (
        pl.concat(frames)
        .group_by("stage", maintain_order=True)
        .agg(pl.col(list(KEYS)).sum())
        .with_columns(
            ratio(pl.col("flops"), pl.col("hbm_bytes")).alias("arithmetic_intensity"),
            ratio(pl.col("time_s"), pl.col("time_s").sum()).alias("time_share"),
            ratio(pl.col("energy_j"), pl.col("energy_j").sum()).alias("energy_share"),
            ratio(pl.col("energy_j"), pl.lit(float(output_tokens))).alias("j_per_output_token"),
        )
    )


def replica_table(parts: list[Partial], replicas: int) -> pl.DataFrame:
    by = {p.replica: p.summary.get("row") or {} for p in parts}
    df = pl.DataFrame(
        {c: [by.get(r, {}).get(c) for r in range(replicas)] for c in ROW}, schema=ROW
    ).with_columns(pl.Series("replica", np.arange(replicas, dtype=np.int32)))
    df = df.select("replica", *ROW).with_columns(
        pl.col(c).fill_null(0) for c in ROW if c not in ("kv_hit_tokens", "kv_block_size_tokens")
    )
    mean = float(df["work_s"].mean()) if replicas else 0.0
    return df.with_columns(
        (pl.col("work_s") / mean if mean > 0 else pl.lit(1.0)).alias("load_share"),
        pl.when(pl.col("reused_prefix_tokens") > 0)
        .then(pl.col("kv_hit_tokens") / pl.col("reused_prefix_tokens"))
        .otherwise(None)
        .alias("hit_ratio"),
    )


def _imbalance(x: np.ndarray) -> float:
    return float(x.max() / x.mean()) if x.size and x.mean() > 0 else 1.0


def _q(a: pl.Series, q: float) -> float:
    return float(a.quantile(q, interpolation="linear")) if a.len() else 0.0
