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
from agentx.traces.io import Trace


@dataclass(frozen=True)
class ReplicaOptions:
    """What every replica replays with, besides its serving configuration."""

    kv_tiers: bool = True
    kv_policy: str = "lru"
    store: SharedStore | None = None
    calls: str = "full"  # "summary"/"none": ship back only the columns docs/metrics.md queries
    max_block_refs: int | None = None  # a task's KV stream budget (agentx.kv MAX_REFS default)


@dataclass(frozen=True)
class Partial:
    replica: int
    calls: pl.DataFrame  # replay calls columns + trace_row, trace-row order within the replica
    stages: pl.DataFrame | None
    footprint: pl.DataFrame | None
    summary: dict = field(default_factory=dict)


def replay_replica(part: Trace, cfg: ServingConfig, opts: ReplicaOptions, replica: int) -> Partial:
    """Price ``part`` (one replica's calls, with ``trace_row`` and ``fleet_store_tokens``) on
    one replica of ``cfg`` with its own HBM/DRAM/SSD tiers."""
    from agentx.replay.replay import merge_partials, replay_partition

    df = part.calls
    if df.height == 0:
        return Partial(replica, pl.DataFrame(), None, None, {"calls": 0})
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
        df.get_column("trace_row"), pl.lit(replica, dtype=pl.Int32).alias("replica")
    )
    summary = dict(res.summary)
    summary["hit_tokens"] = _hit_tokens(calls)
    if opts.calls != "full":
        from agentx.replay.replay import calls_columns

        calls = calls.select([*calls_columns("summary", calls.columns), "trace_row", "replica"])
    return Partial(replica, calls, res.stages, res.footprint, summary)


def _hit_tokens(calls: pl.DataFrame) -> int:
    cols = [c for c in ("kv_hbm_hit_tokens", "kv_dram_hit_tokens", "kv_ssd_hit_tokens",
                        "kv_store_hit_tokens") if c in calls.columns]  # fmt: skip
    return int(np.sum([calls.get_column(c).sum() for c in cols])) if cols else -1
