"""What every engine runs per replica: its KV tiers, then the replay seam → partial tables.

``replay_replica`` (tiers of one replica + ``agentx.replay.replay.replay_partition`` and
``merge_partials`` over that replica alone) is pure (same partition and configuration, same bytes out) and needs
nothing but the partition, so the local engine runs it in a loop and the Ray engine in one task
per replica; ``agentx.fleet.merge`` is the only other piece.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.fleet.store import SharedStore, apply_store
from agentx.replay.stages import STAGES
from agentx.traces.io import Trace

WORK = [pl.col(f"{st}_time_s") for st in STAGES]
LATENCY = ("ttft_s", "decode_latency_s")


@dataclass(frozen=True)
class ReplicaOptions:
    """What every replica replays with, besides its serving configuration."""

    kv_tiers: bool = True
    kv_policy: str = "lru"
    store: SharedStore | None = None
    calls: str = "full"  # "summary": only the columns docs/metrics.md queries; "none": no rows
    max_block_refs: int | None = None  # a task's KV stream budget (agentx.kv MAX_REFS default)
    bucket_s: float = 60.0  # replica_load buckets (the driver picks them from the trace's span)


@dataclass(frozen=True)
class Partial:
    """What a replica's task sends back: aggregates always; per-call rows as ``calls`` asks."""

    replica: int
    calls: pl.DataFrame  # calls columns + trace_row, replica, work_s (empty with calls="none")
    stages: pl.DataFrame | None
    footprint: pl.DataFrame | None
    summary: dict = field(default_factory=dict)  # the replica's replay summary + "row"
    load: pl.DataFrame | None = None  # its replica_load rows
    latency: pl.DataFrame | None = None  # ttft_s, decode_latency_s per call (fleet quantiles)


def replay_replica(part: Trace, cfg: ServingConfig, opts: ReplicaOptions, replica: int) -> Partial:
    """Price ``part`` (one replica's calls, with ``trace_row`` and ``fleet_store_tokens``) on
    one replica of ``cfg`` with its own HBM/DRAM/SSD tiers."""
    from agentx.replay.replay import merge_partials, replay_partition

    df = part.calls
    if df.height == 0:
        return Partial(replica, pl.DataFrame(), None, None, {"calls": 0, "row": {}})
    kv = None
    if opts.kv_tiers:
        from agentx.kv import MAX_REFS, replay_tiers
        from agentx.kv.tiers import link_costs

        kv = replay_tiers(
            part, cfg, policy=opts.kv_policy, max_refs=opts.max_block_refs or MAX_REFS
        )
        if opts.store is not None:
            per_call = apply_store(
                kv.per_call,
                df.get_column("fleet_store_tokens").to_numpy(),
                opts.store,
                cfg.kv_bytes_per_token,
                link_costs(cfg)["dram_to_hbm"][1],
            )
            kv = type(kv)(per_call, kv.summary)
    # one replica is one instance: its own partition through the replay seam, merged alone
    # (its HBM peak and latency quantiles are its own)
    res = merge_partials([replay_partition(df, cfg, kv and kv.per_call)], cfg, kv and kv.summary)
    calls = res.calls.with_columns(
        df.get_column("trace_row"),
        pl.lit(replica, dtype=pl.Int32).alias("replica"),
        pl.sum_horizontal(WORK).alias("work_s"),
    )
    summary = dict(res.summary)
    summary["row"] = replica_row(calls, summary)
    load, latency = replica_load(calls, opts.bucket_s), calls.select(LATENCY)
    if opts.calls == "none":
        calls = pl.DataFrame()
    elif opts.calls != "full":
        from agentx.replay.replay import calls_columns

        keep = [*calls_columns("summary", calls.columns), "trace_row", "replica", "work_s"]
        calls = calls.select(keep)
    return Partial(replica, calls, res.stages, res.footprint, summary, load, latency)


def replica_row(calls: pl.DataFrame, summary: dict) -> dict:
    """The replica's row of the ``replicas`` table (docs/metrics.md), before load_share."""
    row = calls.select(
        pl.len().alias("calls"),
        pl.col("session_id").n_unique().alias("sessions"),
        pl.col("input_tokens").sum(),
        pl.col("reused_prefix_tokens").sum(),
        pl.col("output_tokens").sum(),
        pl.col("work_s").sum(),
        pl.col("total_energy_j").sum().alias("energy_j"),
    ).row(0, named=True)
    hit = _hit_tokens(calls)
    row["kv_hit_tokens"] = None if hit < 0 else hit  # unknown without KV tiers, not zero
    row["hbm_peak_bytes_per_gpu"] = float(summary["hbm_peak_bytes_per_gpu"])
    row["kv_block_size_tokens"] = (summary.get("kv_tiers") or {}).get("block_size_tokens")
    return row


def replica_load(calls: pl.DataFrame, bucket_s: float) -> pl.DataFrame:
    """Calls and instance-seconds of work arriving at the replica per time bucket."""
    return (
        calls.with_columns(((pl.col("t_start_s") // bucket_s) * bucket_s).alias("bucket_start_s"))
        .group_by("replica", "bucket_start_s")
        .agg(pl.len().alias("calls"), pl.col("work_s").sum())
        .with_columns(
            (pl.col("work_s") / bucket_s).alias("utilization"), pl.lit(bucket_s).alias("bucket_s")
        )
        .sort("bucket_start_s")
    )


def _hit_tokens(calls: pl.DataFrame) -> int:
    cols = [c for c in ("kv_hbm_hit_tokens", "kv_dram_hit_tokens", "kv_ssd_hit_tokens",
                        "kv_store_hit_tokens") if c in calls.columns]  # fmt: skip
    return int(np.sum([calls.get_column(c).sum() for c in cols])) if cols else -1
