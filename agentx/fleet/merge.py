"""Merging replicas' partial tables into the fleet's: calls in trace order, stages summed,
per-replica load / hit ratio / imbalance, and load per replica over time (docs/metrics.md).

The merge visits partials in replica order whatever order an engine finished them in, so
the local and Ray engines give the same bytes.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from agentx.fleet.replica import Partial
from agentx.replay.stages import KEYS, STAGES

WORK = [pl.col(f"{st}_time_s") for st in STAGES]
BUCKETS_S = (1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0)


def bucket_for(span_s: float, buckets: int = 200) -> float:
    """The smallest round bucket that cuts ``span_s`` into at most ``buckets`` pieces."""
    for b in BUCKETS_S:
        if span_s / b <= buckets:
            return b
    return BUCKETS_S[-1] * math.ceil(span_s / (BUCKETS_S[-1] * buckets))


def merge(partials: list[Partial], replicas: int, fleet: dict) -> dict:
    """Tables ``calls``, ``stages``, ``footprint``, ``replicas``, ``replica_load`` and the
    fleet summary from the replicas' partials."""
    parts = sorted(partials, key=lambda p: p.replica)
    full = [p for p in parts if p.calls.height]
    calls = pl.concat([p.calls for p in full], how="diagonal_relaxed").sort("trace_row")
    calls = calls.with_columns(pl.sum_horizontal(WORK).alias("work_s"))
    sums = {st: dict.fromkeys(KEYS, 0.0) for st in STAGES}
    for p in full:
        for row in p.stages.iter_rows(named=True):
            for k in KEYS:
                sums[row["stage"]][k] += row[k]
    out_tokens = float(calls.get_column("output_tokens").sum())
    t_all = sum(v["time_s"] for v in sums.values())
    e_all = sum(v["energy_j"] for v in sums.values())
    for v in sums.values():
        v["arithmetic_intensity"] = v["flops"] / v["hbm_bytes"] if v["hbm_bytes"] > 0 else 0.0
        v["time_share"] = v["time_s"] / t_all if t_all > 0 else 0.0
        v["energy_share"] = v["energy_j"] / e_all if e_all > 0 else 0.0
        v["j_per_output_token"] = v["energy_j"] / out_tokens if out_tokens > 0 else 0.0
    stages = pl.DataFrame([{"stage": st, **sums[st]} for st in STAGES])
    footprint = (
        pl.concat([p.footprint for p in full])
        .group_by("component", maintain_order=True)
        .agg(pl.col("bytes_per_gpu").max())
    )
    per_replica = replica_table(parts, replicas, calls)
    span = float(calls["t_start_s"].max() - calls["t_start_s"].min()) if calls.height else 0.0
    load = replica_load(calls, replicas, bucket_for(span))
    work = per_replica.get_column("work_s").to_numpy()
    reused = float(calls.get_column("reused_prefix_tokens").sum())
    hits = [p.summary.get("hit_tokens", -1) for p in full]
    first = full[0].summary if full else {}
    summary = {
        "system": first.get("system"),
        "model": first.get("model"),
        "layout": first.get("layout"),
        "gpus": first.get("gpus", 0) * replicas,
        "gpus_per_replica": first.get("gpus"),
        "calls": calls.height,
        "sessions": int(calls.get_column("session_id").n_unique()) if calls.height else 0,
        "tokens": {
            c: int(calls.get_column(c).sum())
            for c in ("input_tokens", "reused_prefix_tokens", "new_tokens", "output_tokens")
        },
        "stages": sums,
        "total_time_s": t_all,
        "total_energy_j": e_all,
        "j_per_output_token": e_all / out_tokens if out_tokens > 0 else 0.0,
        "latency_s": {
            c: {q: _q(calls[c], v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
            for c in ("ttft_s", "decode_latency_s")
        },
        "hbm_peak_bytes_per_gpu": max(p.summary["hbm_peak_bytes_per_gpu"] for p in full),
        "kv_fits_in_hbm": all(p.summary["kv_fits_in_hbm"] for p in full),
        "fleet": {
            **fleet,
            "replicas": replicas,
            "hit_ratio": sum(hits) / reused if reused and min(hits, default=-1) >= 0 else None,
            "imbalance": float(work.max() / work.mean()) if work.mean() > 0 else 1.0,
            "calls_imbalance": _imbalance(per_replica.get_column("calls").to_numpy()),
            "busiest_replica": int(work.argmax()),
            "kv_block_size_notes": sorted(
                {n for p in full if (n := (p.summary.get("kv_tiers") or {}).get("block_size_note"))}
            ),
            "replica_load_bucket_s": float(load["bucket_s"][0]) if load.height else 0.0,
        },
    }
    return {
        "tables": {
            "calls": calls,
            "stages": stages,
            "footprint": footprint,
            "replicas": per_replica,
            "replica_load": load,
        },
        "summary": summary,
    }


def replica_table(parts: list[Partial], replicas: int, calls: pl.DataFrame) -> pl.DataFrame:
    agg = calls.group_by("replica").agg(
        pl.len().alias("calls"),
        pl.col("session_id").n_unique().alias("sessions"),
        pl.col("input_tokens").sum(),
        pl.col("reused_prefix_tokens").sum(),
        pl.col("output_tokens").sum(),
        pl.col("work_s").sum(),
        pl.col("total_energy_j").sum().alias("energy_j"),
    )
    base = pl.DataFrame({"replica": np.arange(replicas, dtype=np.int32)})
    df = base.join(agg, on="replica", how="left").fill_null(0)
    hits = {p.replica: p.summary.get("hit_tokens", -1) for p in parts}
    peak = {p.replica: p.summary.get("hbm_peak_bytes_per_gpu", 0.0) for p in parts}
    bs = {p.replica: (p.summary.get("kv_tiers") or {}).get("block_size_tokens") for p in parts}
    mean = float(df["work_s"].mean()) if replicas else 0.0
    return df.with_columns(
        # unknown (no KV tiers) stays null rather than reading as zero hits
        pl.Series("kv_hit_tokens", [_known(hits.get(r, 0)) for r in range(replicas)], pl.Int64),
        pl.Series("hbm_peak_bytes_per_gpu", [float(peak.get(r, 0.0)) for r in range(replicas)]),
        pl.Series("kv_block_size_tokens", [bs.get(r) for r in range(replicas)], pl.Int64),
        (pl.col("work_s") / mean if mean > 0 else pl.lit(1.0)).alias("load_share"),
    ).with_columns(
        pl.when(pl.col("reused_prefix_tokens") > 0)
        .then(pl.col("kv_hit_tokens") / pl.col("reused_prefix_tokens"))
        .otherwise(None)
        .alias("hit_ratio")
    )


def replica_load(calls: pl.DataFrame, replicas: int, bucket_s: float) -> pl.DataFrame:
    """Calls and instance-seconds of work arriving per replica per time bucket."""
    if calls.height == 0:
        return pl.DataFrame(
            schema={"replica": pl.Int32, "bucket_start_s": pl.Float64, "calls": pl.UInt32,
                    "work_s": pl.Float64, "utilization": pl.Float64, "bucket_s": pl.Float64}
        )  # fmt: skip
    return (
        calls.with_columns(((pl.col("t_start_s") // bucket_s) * bucket_s).alias("bucket_start_s"))
        .group_by("replica", "bucket_start_s")
        .agg(pl.len().alias("calls"), pl.col("work_s").sum())
        .with_columns(
            (pl.col("work_s") / bucket_s).alias("utilization"), pl.lit(bucket_s).alias("bucket_s")
        )
        .sort("replica", "bucket_start_s")
    )


def _known(hit_tokens: int) -> int | None:
    return None if hit_tokens < 0 else hit_tokens


def _imbalance(x: np.ndarray) -> float:
    return float(x.max() / x.mean()) if x.size and x.mean() > 0 else 1.0


def _q(a: pl.Series, q: float) -> float:
    return float(a.quantile(q, interpolation="linear")) if a.len() else 0.0
