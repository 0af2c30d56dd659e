"""Agentic serving as the public agentic benchmarks run it: N closed-loop sessions on one
instance with a prefix cache in HBM, optional DRAM/SSD offload and preemption (docs/dynamics.md).

``prepare(trace)`` builds, once per trace, the block references of every call
(``agentx.kv.blocks``: the trace's block hashes, shared system + tool prefixes under one id;
without hashes, prefixes matched by token counts) in session order. ``instance_for(cfg)`` sizes
the HBM pool from the footprint and reads the offload tiers and links of the system.
``simulate_users(prep, inst, users, cfg)`` runs the kernel (``agentic_kernel``) and returns
per-call and per-second frames and a summary; ``sweep`` runs several N on one preparation.

This module owns the runs (``simulate_users``, ``sweep``); their settings, instance and
prepared trace live in ``agentx.dynamics.agentic_setup``, their frames and summary in
``agentx.dynamics.agentic_frames``, both re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from agentx.dynamics import agentic_kernel as K
from agentx.dynamics import prefix_cache as PC

# The frames and summary (agentx.dynamics.agentic_frames) and what a run is set up on
# (agentx.dynamics.agentic_setup): re-exported, every name importable from here as before.
from agentx.dynamics.agentic_frames import SUMMARY_COLUMNS, TS_COLUMNS, _calls_frame, _summary
from agentx.dynamics.agentic_setup import (
    FREE_ORDER,
    OFFLOAD,
    PREEMPTION,
    AgenticConfig,
    Instance,
    Prepared,
    check_pool,
    instance_for,
    prepare,
)
from agentx.errors import UsageError

__all__ = [
    "FREE_ORDER",
    "OFFLOAD",
    "PREEMPTION",
    "SUMMARY_COLUMNS",
    "TS_COLUMNS",
    "AgenticConfig",
    "AgenticResult",
    "Instance",
    "Prepared",
    "check_pool",
    "instance_for",
    "prepare",
    "simulate_users",
    "sweep",
]


@dataclass(frozen=True)
class AgenticResult:
    calls: pl.DataFrame
    timeseries: pl.DataFrame
    summary: dict


def simulate_users(
    prep: Prepared,
    inst: Instance,
    users: int,
    cfg: AgenticConfig | None = None,
    pool_blocks: int | None = None,
) -> AgenticResult:
    """Run ``users`` closed-loop sessions; ``pool_blocks`` overrides the HBM pool (tests)."""
    cfg = cfg or AgenticConfig()
    if users < 1:
        raise UsageError(f"--users must be positive integers, got {users}")
    bs = prep.block_size_tokens
    bpt = inst.kv_bytes_per_token
    if pool_blocks is None:
        pool_blocks = int(inst.pool_tokens // bs)
    check_pool(prep, inst, pool_blocks)
    dram = int(inst.dram_bytes / (bpt * bs)) if cfg.offload != "none" else 0
    ssd = int(inst.ssd_bytes / (bpt * bs)) if cfg.offload == "dram+ssd" else 0
    n_blocks = int(prep.refs.max()) + 1 if prep.refs.size else 1
    cache = PC.new_state(n_blocks, pool_blocks, dram, ssd, cfg.free_order == "in-order")
    p = np.zeros(K.N_P)
    p[K.P_USERS], p[K.P_MAX_RUN], p[K.P_BUDGET], p[K.P_BLOCK] = (
        users, cfg.max_running, cfg.token_budget, bs,
    )  # fmt: skip
    p[K.P_BPT], p[K.P_DRAM_BPS], p[K.P_SSD_BPS] = bpt, inst.dram_bytes_per_s, inst.ssd_bytes_per_s
    p[K.P_FLOOR] = inst.prices.floor_s
    p[K.P_SAMPLE], p[K.P_SWAP], p[K.P_HORIZON] = (
        cfg.sample_s, float(cfg.preemption == "swap"), cfg.horizon_s,
    )  # fmt: skip
    c = prep.calls
    cols = (
        c["input_tokens"].to_numpy().astype(np.int64),
        c["reused_prefix_tokens"].to_numpy().astype(np.int64),
        c["output_tokens"].to_numpy().astype(np.int64),
        np.minimum(c["think_time_s"].to_numpy().astype(np.float64), cfg.max_think_s)
        * cfg.think_scale,
        prep.next_call, prep.firsts, prep.spans, prep.reads,
    )  # fmt: skip
    pr = inst.prices
    prices = (pr.decode_s, pr.ctx_grid, pr.fill_s, pr.new_grid, pr.prefix_grid)
    res, preempt, ts, stats = K.agentic_kernel(cols, prep.refs, prices, p, cache)
    calls = _calls_frame(prep, res, preempt, users)
    tsf = pl.DataFrame({n: ts[:, k] for k, n in enumerate(TS_COLUMNS)}).with_columns(
        pl.col("in_system_mean") / cfg.sample_s,
        *(pl.col(n).cast(pl.Int64) for n in TS_COLUMNS[3:5] + TS_COLUMNS[6:]),
        users=pl.lit(users, pl.Int64),
    )
    q = pl.col("queried_tokens")
    tsf = tsf.with_columns(
        gpu_prefix_hit_ratio=pl.when(q > 0).then(pl.col("gpu_hit_tokens") / q),
        offload_hit_ratio=pl.when(q > 0).then(pl.col("offload_hit_tokens") / q),
    )
    summary = _summary(calls, tsf, inst, users, pool_blocks * bs, stats, cfg.sample_s)
    summary.update(
        instance=inst.name,
        block_size_tokens=bs,
        prefix_matching=prep.note,
        evictions=int(stats[1]),
        iterations=int(stats[0]),
        config={k: (None if v == math.inf else v) for k, v in asdict(cfg).items()},  # strict JSON
        pricing=pr.source,
    )
    return AgenticResult(calls, tsf, summary)


def sweep(prep: Prepared, inst: Instance, users: list[int], cfg: AgenticConfig | None = None):
    """Several N on one preparation: (calls, timeseries, one summary row per N)."""
    runs = [simulate_users(prep, inst, n, cfg) for n in users]
    table = pl.DataFrame([{k: r.summary[k] for k in SUMMARY_COLUMNS} for r in runs])
    return (
        pl.concat([r.calls for r in runs]),
        pl.concat([r.timeseries for r in runs]),
        table,
        [r.summary for r in runs],
    )
