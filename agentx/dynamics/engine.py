"""Time-driven replay of a trace through fill and decode pools (SEED-15/16/17).

``simulate(calls, fill, decode, policy, cfg)`` takes a canonical trace frame and two service
models (the same object for an aggregated pool), precomputes everything that is known in
advance as columns (fill work of each call: fills are predictable, SEED-15; decode tables),
runs the numba kernel in ``kernel.py`` and returns per-call and per-interval frames plus a
summary with the Little's-law and loss checks.

Arrivals: a session's first call arrives at its ``t_start_s``; call k+1 arrives at
``max(t_start_s[k+1], done[k] + think_time_s[k+1])``, so a slow system delays the session
the way a real agent waits for its answer before running tools.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from agentx.dynamics import kernel as K
from agentx.dynamics.admission import AdmissionPolicy, oscillation_index
from agentx.dynamics.service import ServiceModel, service_tables
from agentx.errors import UnknownNameError

POOLS = ("disaggregated", "aggregated")
STATUS = {K.UNARRIVED: "not_arrived", K.DONE: "done", K.DROPPED: "dropped"}
REASONS = {
    K.R_TIMEOUT: "admission_timeout",
    K.R_TOO_LONG: "context_exceeds_kv_capacity",
    K.R_KV_EXHAUSTED: "kv_exhausted_during_decode",
    K.R_HORIZON: "unfinished_at_horizon",
}
TS_COLUMNS = (
    "t_s",
    "admission_queue_len",
    "fill_queue_len",
    "ready_buffer_len",
    "decode_batch_size",
    "utilisation",
    "power_w",
    "in_system",
    "kv_used_tokens",
    "step_time_s",
    "fill_gpus",
)


@dataclass(frozen=True)
class SimConfig:
    pools: str = "disaggregated"
    max_batch: int = 256  # decode sequences per step of the decode pool
    chunk_tokens: int = 4096  # aggregated: fill tokens piggybacked on each decode step
    max_wait_s: float = math.inf  # admission-queue timeout (dropped with a reason)
    sample_s: float = 1.0  # timeseries interval
    horizon_s: float = math.inf  # stop the clock here; calls still inside are reported
    link_latency_s: float = 20e-6
    resize_pools: bool = False  # disaggregated: move GPUs between pools once a minute

    def __post_init__(self) -> None:
        if self.pools not in POOLS:
            raise UnknownNameError("pool layout", self.pools, POOLS)


@dataclass(frozen=True)
class SimResult:
    calls: pl.DataFrame
    timeseries: pl.DataFrame
    summary: dict


def simulate(
    calls: pl.DataFrame,
    fill: ServiceModel,
    decode: ServiceModel,
    policy: AdmissionPolicy | None = None,
    cfg: SimConfig | None = None,
    layouts: list[tuple[ServiceModel, ServiceModel]] | None = None,
) -> SimResult:
    """Replay ``calls`` on a fill pool and a decode pool (the same model when aggregated).

    ``layouts``: the (fill, decode) splits the minute-level controller may move between when
    ``cfg.resize_pools``, ordered by fill-pool size and containing (fill, decode).
    """
    policy = policy or AdmissionPolicy()
    cfg = cfg or SimConfig()
    agg = cfg.pools == "aggregated"
    if agg:
        fill = decode
    layouts = [(fill, decode)] if agg or not layouts else list(layouts)
    start = next((k for k, (f, d) in enumerate(layouts) if f is fill and d is decode), None)
    if start is None:
        layouts, start = [(fill, decode)], 0
    sid = calls["session_id"]
    n = calls.height
    same_next = np.zeros(n, dtype=bool)
    if n > 1:
        same_next[:-1] = (sid[:-1] == sid[1:]).to_numpy()
    next_call = np.where(same_next, np.arange(n) + 1, -1).astype(np.int64)
    first_calls = np.flatnonzero(calls["call_index"].to_numpy() == 0).astype(np.int64)
    new = calls["new_tokens"].to_numpy().astype(np.float64)
    prefix = calls["reused_prefix_tokens"].to_numpy().astype(np.float64)
    out = calls["output_tokens"].to_numpy().astype(np.int64)
    opt, work, energy, dec, pre = _layout_tables(layouts, new, prefix, cfg.max_batch, agg)
    link_j_per_byte = fill.link(decode.gpus)[1]
    p = np.zeros(K.N_P)
    p[K.P_MODE] = 1.0 if agg else 0.0
    p[K.P_MAX_BATCH] = cfg.max_batch
    p[K.P_CHUNK] = cfg.chunk_tokens
    p[K.P_MAX_WAIT] = cfg.max_wait_s
    p[K.P_SAMPLE] = cfg.sample_s
    p[K.P_KV_BPT] = decode.kv_bytes_per_token
    p[K.P_LINK_J_PER_B] = link_j_per_byte
    p[K.P_HORIZON] = cfg.horizon_s
    p[K.P_LINK_LAT_S] = cfg.link_latency_s
    p[K.P_OPT0] = start
    p[K.P_RESIZE] = 1.0 if (cfg.resize_pools and not agg and len(layouts) > 1) else 0.0
    columns = (
        calls["t_start_s"].to_numpy().astype(np.float64),
        calls["think_time_s"].fill_null(0.0).to_numpy().astype(np.float64),
        new, prefix, out, next_call, first_calls, work, energy,
    )  # fmt: skip
    tables = (dec[0], dec[1], dec[2], pre[0], pre[1], pre[2], opt)
    res = K.simulate_kernel(columns, tables, p, policy.vector())
    arrival, admitted, first, done, status, reason, preempt, kv_moved, ts, stats = res
    n_steps, busy_dec_s, busy_fill_s = int(stats[0]), float(stats[1]), float(stats[2])
    link_bps = float(opt[start, K.O_LINK_BPS])
    frame = _calls_frame(
        calls, arrival, admitted, first, done, status, reason, preempt, kv_moved, out
    )
    tsf = pl.DataFrame({c: ts[:, k] for k, c in enumerate(TS_COLUMNS)})
    tsf = tsf.with_columns(
        pl.col(c).cast(pl.Int64)
        for c in TS_COLUMNS
        if c.endswith("_len") or c in ("decode_batch_size", "in_system", "fill_gpus")
    )
    summary = _summary(frame, tsf, cfg, policy, n_steps, link_bps)
    summary.update(
        iterations=int(stats[3]),
        pool_resizes=int(stats[4]),
        final_fill_gpus=0 if agg else int(opt[int(stats[5]), K.O_GPUS_FILL]),
        decode_busy_s=float(busy_dec_s),
        fill_busy_s=float(busy_fill_s),
        fill_gpus=0 if agg else fill.gpus,
        decode_gpus=decode.gpus,
        kv_capacity_tokens=float(decode.kv_capacity_tokens),
        # aggregated: share of the pool's busy time spent on fills piggybacked on decode steps
        fill_share_of_steps=float(busy_fill_s / max(busy_fill_s + busy_dec_s, 1e-12))
        if agg
        else 0.0,
    )
    return SimResult(frame, tsf, summary)


def _layout_tables(layouts, new, prefix, max_batch: int, agg: bool):
    """Everything the kernel needs per layout, stacked on a leading layout axis."""
    opt = np.zeros((len(layouts), K.N_O))
    work, energy, dec_t, dec_e, pre_t, pre_e = [], [], [], [], [], []
    for k, (f, d) in enumerate(layouts):
        per_gpu = f.link(d.gpus)[0]
        opt[k] = (0.0 if agg else f.gpus, d.gpus, d.kv_capacity_tokens,
                  min(f.gpus, d.gpus) * per_gpu, 0.0 if agg else f.idle_power_w, d.idle_power_w)  # fmt: skip
        fc = f.fill(new, prefix)
        work.append(np.asarray(fc.time_s, dtype=np.float64))
        energy.append(np.asarray(fc.energy_j, dtype=np.float64))
        tab, pre = service_tables(d, max_batch), service_tables(f, 1)
        dec_t.append(tab.decode_time_s)
        dec_e.append(tab.decode_energy_j)
        pre_t.append(pre.prefill_time_s)
        pre_e.append(pre.prefill_energy_j)
    grid = (tab.ctx_grid_tokens,)
    return (opt, np.stack(work), np.stack(energy), (np.stack(dec_t), np.stack(dec_e), *grid),
            (np.stack(pre_t), np.stack(pre_e), pre.fill_grid_tokens))  # fmt: skip


def _calls_frame(calls, arrival, admitted, first, done, status, reason, preempt, kv_moved, out):
    f = pl.DataFrame(
        {
            "session_id": calls["session_id"],
            "call_index": calls["call_index"],
            "arrival_s": arrival,
            "admitted_s": admitted,
            "first_token_s": first,
            "done_s": done,
            "status": pl.Series(status.astype(np.int64)).replace_strict(
                STATUS, return_dtype=pl.String
            ),
            "drop_reason": pl.Series(reason.astype(np.int64)).replace_strict(
                {0: None, **REASONS}, return_dtype=pl.String
            ),
            "preemptions": preempt,
            "kv_moved_bytes": kv_moved,
            "output_tokens": out,
        }
    )
    f = f.with_columns(
        pl.col(c).fill_nan(None) for c in ("arrival_s", "admitted_s", "first_token_s", "done_s")
    )
    ok = pl.col("status") == "done"
    return f.with_columns(
        queue_delay_s=pl.col("admitted_s") - pl.col("arrival_s"),
        ttft_s=pl.col("first_token_s") - pl.col("arrival_s"),
        tpot_s=pl.when(ok & (pl.col("output_tokens") > 1)).then(
            (pl.col("done_s") - pl.col("first_token_s")) / (pl.col("output_tokens") - 1)
        ),
        e2e_s=pl.when(ok).then(pl.col("done_s") - pl.col("arrival_s")),
    )


def _summary(
    f: pl.DataFrame,
    ts: pl.DataFrame,
    cfg: SimConfig,
    policy: AdmissionPolicy,
    n_steps: int,
    link_bps: float,
) -> dict:
    arrived = f.filter(pl.col("arrival_s").is_not_null())
    t0 = float(arrived["arrival_s"].min()) if arrived.height else 0.0
    t1 = float(arrived["done_s"].max()) if arrived.height else 0.0
    span = max(t1 - t0, 1e-9)
    stay = (arrived["done_s"] - arrived["arrival_s"]).fill_null(0.0)
    lam = arrived.height / span
    w = float(stay.mean()) if arrived.height else 0.0
    in_window = ts.filter((pl.col("t_s") >= t0) & (pl.col("t_s") < t1))
    l_sampled = float(in_window["in_system"].mean()) if in_window.height else 0.0
    q = lambda c, x: None if f[c].drop_nulls().is_empty() else float(f[c].quantile(x))  # noqa: E731
    energy = float((ts["power_w"] * cfg.sample_s).sum())
    out_tokens = int(f.filter(pl.col("status") == "done")["output_tokens"].sum())
    backlog = (ts["fill_queue_len"] + ts["ready_buffer_len"]).to_numpy()
    return {
        "pools": cfg.pools,
        "policy": policy.name,
        "config": asdict(cfg),
        "policy_params": asdict(policy),
        "calls": f.height,
        "done": int((f["status"] == "done").sum()),
        "dropped": int((f["status"] == "dropped").sum()),
        "not_arrived": int((f["status"] == "not_arrived").sum()),
        "drop_reasons": {
            r: int(c)
            for r, c in f["drop_reason"].drop_nulls().value_counts().sort("drop_reason").iter_rows()
        },
        "preemptions": int(f["preemptions"].sum()),
        "decode_steps": int(n_steps),
        "span_s": span,
        "arrival_rate_per_s": lam,
        "mean_time_in_system_s": w,
        "littles_law": {
            "lambda_w": lam * w,
            "mean_in_system_sampled": l_sampled,
            "rel_error": abs(l_sampled - lam * w) / max(lam * w, 1e-12),
        },
        "ttft_s_p50": q("ttft_s", 0.5),
        "ttft_s_p99": q("ttft_s", 0.99),
        "tpot_s_p50": q("tpot_s", 0.5),
        "tpot_s_p99": q("tpot_s", 0.99),
        "queue_delay_s_p99": q("queue_delay_s", 0.99),
        "e2e_s_p50": q("e2e_s", 0.5),
        "energy_j": energy,
        "output_tokens": out_tokens,
        "energy_per_output_token_j": energy / max(out_tokens, 1),
        "mean_power_w": float(ts["power_w"].mean()) if ts.height else 0.0,
        "mean_utilisation": float(ts["utilisation"].mean()) if ts.height else 0.0,
        "kv_moved_bytes": float(f["kv_moved_bytes"].sum()),
        "kv_transfer_s": float(f["kv_moved_bytes"].sum()) / link_bps if link_bps > 0 else 0.0,
        "oscillation_backlog": oscillation_index(backlog, cfg.sample_s),
        "oscillation_batch": oscillation_index(ts["decode_batch_size"].to_numpy(), cfg.sample_s),
    }
