"""Replay a trace through the cost model: per-call, per-stage and footprint tables + summary.

``replay_trace`` is the library behind ``agentx replay``. It prices every call with the closed
forms of ``agentx.replay.stages`` (one pass over whole columns), sums the stages, and sizes
the per-GPU HBM footprint with the resident KV of a full decode batch. Column meanings,
units and formulas: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import InputError
from agentx.replay.energy import coefficients
from agentx.replay.footprint import check_fits, describe, footprint_per_gpu
from agentx.replay.stages import CALL_KEYS, KEYS, STAGES, stage_arrays

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
STAGE_SUMS = KEYS
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


def resident_context(calls: pl.DataFrame, busy_s: np.ndarray, batch: int) -> tuple[float, float]:
    """(tokens, sequences) of KV resident in HBM at the busiest moment of the trace's timeline.

    A call holds its context (input + output tokens) from its arrival for ``busy_s`` (its
    fill and decode latency). When c calls are active and c > ``batch``, the decode batch
    holds ``batch`` of them at the active mean context; the peak over all arrival/finish
    events is reported. Vectorized as cumulative sums over the sorted events.
    """
    if calls.height == 0:
        return 0.0, 0.0
    t0 = calls.get_column("t_start_s").to_numpy().astype(np.float64)
    ctx = (
        (calls.get_column("input_tokens") + calls.get_column("output_tokens"))
        .to_numpy()
        .astype(np.float64)
    )
    times = np.concatenate([t0, t0 + busy_s])
    starts_last = np.repeat([1, 0], t0.size)  # at equal times a finish frees its KV first
    order = np.lexsort((starts_last, times))
    sign = np.repeat([1.0, -1.0], t0.size)[order]
    active = np.cumsum(sign)
    tokens = np.cumsum(sign * np.concatenate([ctx, ctx])[order])
    scale = np.minimum(1.0, batch / np.maximum(active, 1.0))
    resident = np.where(active > 0, tokens * scale, 0.0)
    i = int(np.argmax(resident))
    return float(resident[i]), float(min(active[i], batch))


def replay_trace(trace, cfg: ServingConfig, kv=None) -> ReplayResult:
    """Price every call of ``trace`` (a Trace or a calls frame) on ``cfg``; ``kv`` is an
    optional ``agentx.kv`` result whose per-call reloads and recomputes enter the fills."""
    check_fits(cfg)
    df = trace.calls if hasattr(trace, "calls") else trace
    kv_calls = _kv_frame(kv, df.height)
    stages, lat = stage_arrays(cfg, df, kv_calls)
    cols: dict[str, np.ndarray] = {}
    for st in STAGES:
        for k in CALL_KEYS:
            cols[f"{st}_{k}"] = np.asarray(
                np.broadcast_to(stages[st][k], (df.height,)), dtype=np.float64
            )
    cols.update(lat)
    cols["total_energy_j"] = sum(cols[f"{st}_energy_j"] for st in STAGES)
    calls = pl.concat(
        [df.select([c for c in TRACE_COLUMNS if c in df.columns]), pl.DataFrame(cols)],
        how="horizontal",
    )

    totals = {
        st: {k: float(np.sum(np.broadcast_to(stages[st][k], (df.height,)))) for k in STAGE_SUMS}
        for st in STAGES
    }
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
        df, np.broadcast_to(lat["ttft_s"] + lat["decode_latency_s"], (df.height,)), cfg.decode_batch
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
            c: {"p50": _q(lat[c], 0.5), "p90": _q(lat[c], 0.9), "p99": _q(lat[c], 0.99)}
            for c in ("ttft_s", "decode_latency_s")
        },
        "hbm_peak_bytes_per_gpu": fp.total_bytes,
        "hbm_capacity_bytes_per_gpu": fp.capacity_bytes,
        "kv_fits_in_hbm": fp.fits,
        "kv_resident_tokens": tokens,
        "kv_resident_sequences": seqs,
        "footprint": {r["component"]: r["bytes_per_gpu"] for r in fp.as_rows()},
        "energy_model": ENERGY_MODEL
        if coef.calibrated
        else ENERGY_MODEL + " (no TDP published: fallback pJ/FLOP, no static power)",
    }
    if kv is not None and hasattr(kv, "summary"):
        summary["kv_tiers"] = kv.summary
    return ReplayResult(calls, stage_df, fp_df, summary)


def _q(a: np.ndarray, q: float) -> float:
    return float(np.quantile(a, q)) if np.size(a) else 0.0
