"""Replay a trace through the cost model: per-call, per-stage and footprint tables + summary.

``replay_trace`` is the library behind ``agentx replay``. It prices every call with the closed
forms of ``agentx.replay.stages`` (one pass over whole columns), sums the stages, and sizes
the per-GPU HBM footprint with the resident KV of a full decode batch. Column meanings,
units and formulas: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import InputError
from agentx.replay.energy import coefficients
from agentx.replay.footprint import check_fits, describe, footprint_per_gpu
from agentx.replay.stages import KEYS, STAGES

TRACE_COLUMNS = (
    "session_id",
    "call_index",
    "agent_id",
    "t_start_s",
    "input_tokens",
    "reused_prefix_tokens",
    "new_tokens",
    "output_tokens",
)
CALL_KEYS = ("time_s", "energy_j", "flops", "hbm_bytes", "comm_bytes")
ENERGY_MODEL = (
    "E = P_static*gpus*t + e_flop(precision)*FLOPs + e_hbm*HBM bytes + e_link*link bytes; "
    "e_flop calibrated so a compute-bound GPU at its default efficiency draws its TDP"
)


@dataclass(frozen=True)
class ReplayResult:
    calls: pl.DataFrame  # one row per call: trace keys, token counts, per-stage columns
    stages: pl.DataFrame  # one row per stage
    footprint: pl.DataFrame  # component, bytes_per_gpu
    summary: dict


def _kv_frame(kv, n: int):
    if kv is None:
        return None
    per_call = getattr(kv, "per_call", kv)
    height = per_call.height if hasattr(per_call, "height") else len(next(iter(per_call.values())))
    if height != n:
        raise InputError(
            "<kv tiers>", f"expected {n} per-call rows (one per trace call), got {height}"
        )
    return per_call


def _col(calls, name: str, default=None):
    if hasattr(calls, "columns"):
        if name not in calls.columns:
            return default
        return calls.get_column(name).to_numpy().astype(np.float64, copy=False)
    if name not in calls:
        return default
    return np.asarray(calls[name], dtype=np.float64)


CALL_COLUMNS = (
    *(f"{st}_{k}" for st in STAGES for k in CALL_KEYS),
    "ttft_s",
    "decode_latency_s",
    "total_energy_j",
)


def price_calls(cfg: ServingConfig, calls, kv=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-call columns (rows in ``CALL_COLUMNS`` order) and stage totals (stage × ``KEYS``).

    Fills are packed into forward passes of ``prefill_chunk_tokens`` tokens with other fills,
    as a loaded fill pool runs them, so a call bears new/chunk of each pass's weight load;
    ttft_s prices the fill alone. Decode shares each step among ``decode_batch`` sequences.
    ``kv`` (per-call arrays from agentx.kv, optional): kv_recompute_tokens move from the
    reused prefix to the filled tokens (a call whose whole prefix is lost becomes a prefill);
    kv_transfer_time_s and kv_transfer_energy_j (reloads from DRAM/SSD) join the call's fill.
    """
    from agentx.replay.kernel import params, price

    n = np.ascontiguousarray(_col(calls, "new_tokens"))
    p = np.ascontiguousarray(_col(calls, "reused_prefix_tokens"))
    out = np.ascontiguousarray(_col(calls, "output_tokens"))
    xt = xe = np.zeros(0)
    if kv is not None:
        rec = _col(kv, "kv_recompute_tokens")
        if rec is not None:
            rec = np.minimum(rec, p)
            n, p = n + rec, p - rec
        xt = np.broadcast_to(_col(kv, "kv_transfer_time_s", 0.0), n.shape).astype(np.float64)
        xe = np.broadcast_to(_col(kv, "kv_transfer_energy_j", 0.0), n.shape).astype(np.float64)
    q, dtab, exp_tok = params(cfg)
    cols, sums = price(q, dtab, exp_tok, n, p, out, xt, xe)
    return cols, sums.sum(axis=0)


def call_frame(cfg: ServingConfig, calls, kv=None) -> pl.DataFrame:
    """The per-stage and latency columns of ``calls`` (see ``agentx.replay.stages.call_costs``)."""
    cols, _ = price_calls(cfg, calls, kv)
    return pl.DataFrame(dict(zip(CALL_COLUMNS, cols, strict=True)))


def resident_context(calls: pl.DataFrame, busy_s: np.ndarray, batch: int) -> tuple[float, float]:
    """(tokens, sequences) of KV resident in HBM at the busiest moment of the trace's timeline.

    A call holds its context (input + output tokens) from its arrival for ``busy_s`` (its
    fill and decode latency). When c calls are active and c > ``batch``, the decode batch
    holds ``batch`` of them at the active mean context; the peak over all arrival/finish
    events is reported (at equal times finishes first, each set in trace order).
    """
    if calls.height == 0:
        return 0.0, 0.0
    t0 = calls.get_column("t_start_s").to_numpy().astype(np.float64)
    ctx = (
        (calls.get_column("input_tokens") + calls.get_column("output_tokens"))
        .to_numpy()
        .astype(np.float64)
    )
    t1 = t0 + busy_s
    # Two sorts of n and one merge pass instead of sorting 2n events and their running sums.
    arrive, finish = np.argsort(t0, kind="stable"), np.argsort(t1, kind="stable")
    return _peak_resident(t0, t1, ctx, arrive, finish, float(batch))


@numba.njit(cache=True, error_model="numpy")
def _peak_resident(t0, t1, ctx, arrive, finish, batch):  # pragma: no cover (compiled)
    n, i, j = t0.size, 0, 0
    active, tokens, best, best_seqs = 0.0, 0.0, -1.0, 0.0
    while i < n or j < n:
        if i == n or (j < n and t1[finish[j]] <= t0[arrive[i]]):
            active -= 1.0
            tokens -= ctx[finish[j]]
            j += 1
        else:
            active += 1.0
            tokens += ctx[arrive[i]]
            i += 1
        resident = tokens * min(1.0, batch / max(active, 1.0)) if active > 0 else 0.0
        if resident > best:
            best, best_seqs = resident, min(active, batch)
    return best, best_seqs


def replay_trace(trace, cfg: ServingConfig, kv=None) -> ReplayResult:
    """Price every call of ``trace`` (a Trace or a calls frame) on ``cfg``; ``kv`` is an
    optional ``agentx.kv`` result whose per-call reloads and recomputes enter the fills."""
    check_fits(cfg)
    df = trace.calls if hasattr(trace, "calls") else trace
    kv_calls = _kv_frame(kv, df.height)
    cols, sums = price_calls(cfg, df, kv_calls)
    frame = pl.DataFrame(dict(zip(CALL_COLUMNS, cols, strict=True)))
    parts = [df.select([c for c in TRACE_COLUMNS if c in df.columns]), frame]
    if isinstance(kv_calls, pl.DataFrame):
        # the tier outcome of each call travels with its costs (docs/metrics.md, kv_* columns)
        parts.append(kv_calls.select([c for c in kv_calls.columns if c.startswith("kv_")]))
    calls = pl.concat(parts, how="horizontal")
    totals = {st: {k: float(sums[i, j]) for j, k in enumerate(KEYS)} for i, st in enumerate(STAGES)}
    t_all = sum(v["time_s"] for v in totals.values())
    e_all = sum(v["energy_j"] for v in totals.values())
    out_tokens = float(df.get_column("output_tokens").sum()) if df.height else 0.0
    for v in totals.values():
        v["arithmetic_intensity"] = v["flops"] / v["hbm_bytes"] if v["hbm_bytes"] > 0 else 0.0
        v["time_share"] = v["time_s"] / t_all if t_all > 0 else 0.0
        v["energy_share"] = v["energy_j"] / e_all if e_all > 0 else 0.0
        v["j_per_output_token"] = v["energy_j"] / out_tokens if out_tokens > 0 else 0.0
    stage_df = pl.DataFrame([{"stage": st, **totals[st]} for st in STAGES])

    tokens, seqs = resident_context(
        df, frame["ttft_s"].to_numpy() + frame["decode_latency_s"].to_numpy(), cfg.decode_batch
    )
    fp = footprint_per_gpu(cfg, tokens, sequences=seqs or None)
    fp_df = pl.DataFrame(fp.as_rows())
    coef = coefficients(cfg)
    summary = {
        "system": cfg.system.name,
        "model": cfg.model.name,
        "layout": describe(cfg),
        "gpus": cfg.gpus,
        "decode_batch": cfg.decode_batch,
        "calls": df.height,
        "sessions": int(df.get_column("session_id").n_unique()) if df.height else 0,
        "tokens": {c: int(df.get_column(c).sum()) for c in TRACE_COLUMNS[4:]},
        "stages": totals,
        "total_time_s": t_all,
        "total_energy_j": e_all,
        "j_per_output_token": e_all / out_tokens if out_tokens > 0 else 0.0,
        "average_power_w_per_gpu": e_all / (t_all * cfg.gpus) if t_all > 0 else 0.0,
        "latency_s": {
            c: {"p50": _q(frame[c], 0.5), "p90": _q(frame[c], 0.9), "p99": _q(frame[c], 0.99)}
            for c in ("ttft_s", "decode_latency_s")
        },
        "hbm_peak_bytes_per_gpu": fp.total_bytes,
        "hbm_capacity_bytes_per_gpu": fp.capacity_bytes,
        "kv_fits_in_hbm": fp.fits,
        "kv_resident_tokens": tokens,
        "calls_over_max_context": int(
            (
                (df.get_column("input_tokens") + df.get_column("output_tokens"))
                > cfg.model.max_context_tokens
            ).sum()
        ),
        "kv_resident_sequences": seqs,
        "footprint": {r["component"]: r["bytes_per_gpu"] for r in fp.as_rows()},
        "energy_model": ENERGY_MODEL
        if coef.calibrated
        else ENERGY_MODEL + " (no TDP published: fallback pJ/FLOP, no static power)",
    }
    if kv is not None and hasattr(kv, "summary"):
        summary["kv_tiers"] = kv.summary
    return ReplayResult(calls, stage_df, fp_df, summary)


def _q(a: pl.Series, q: float) -> float:
    return float(a.quantile(q, interpolation="linear")) if a.len() else 0.0
