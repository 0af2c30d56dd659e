"""Admission control at SEED-16's layered time scales, and the oscillation metric (SEED-15).

Three policies decide how many waiting calls enter the fill stage and which filled calls
(in the ready buffer) join the decode batch:

- ``greedy``: whenever the decode pool has room (free KV and batch slots) *now*, admit every
  waiting call; when it is full, admit none. A ready call joins the decode batch whenever its
  KV fits now, with no reserve for growth. This is the naive scheduler of SEED-15: it ignores
  the work already in fill and in flight, so it floods the fill stage when decode frees up,
  the flood lands on a decode pool that is full again, calls pile up, and the cycle repeats.
- ``token-bucket``: admits at the smoothed (EWMA) arrival rate with a bounded burst, so a
  burst is spread over seconds instead of hitting the fill stage at once.
- ``pi``: a proportional-integral controller on the backlog inside the system (fill queue +
  transfers + ready buffer) sets the admission rate around the decode stage's observed uptake.

Both smoothed policies keep a KV reserve for context growth when admitting into decode and
cap the decode batch so the step time stays under a TPOT target. Time scales: token-level
(each decode step): bucket refill, admission, decode joins; buffer management (every second):
rate update; worker reconfiguration (every minute): the decode batch cap and, with
``resize_pools``, moving GPUs between the fill and decode pools (``resize_choice``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from agentx.dynamics.names import POLICIES
from agentx.errors import UnknownNameError

# Indices into the float64 policy vector the kernel reads (numba freezes these globals).
Q_KIND, Q_TARGET_BACKLOG, Q_TAU_S, Q_KP, Q_KI, Q_KV_RESERVE, Q_TPOT_TARGET_S, Q_BURST, Q_ALPHA = (
    range(9)
)
N_Q = 9


@dataclass(frozen=True)
class AdmissionPolicy:
    name: str = "greedy"
    target_backlog_calls: float = 8.0  # calls inside the system between admission and decode
    tau_s: float = 4.0  # time constant of the proportional term (rate = uptake + e / tau)
    kp: float = 0.25  # PI gains on backlog error (calls → calls/s)
    ki: float = 0.02
    kv_reserve: float = 0.10  # share of decode KV kept free for context growth
    tpot_target_s: float = 0.0  # 0 = no minute-level batch cap
    burst_calls: float = 4.0  # token-bucket depth
    ewma_alpha: float = 0.2  # per-second smoothing of observed rates

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise UnknownNameError("policy", self.name, POLICIES)

    def vector(self) -> np.ndarray:
        q = np.zeros(N_Q)
        q[Q_KIND] = POLICIES.index(self.name)
        q[Q_TARGET_BACKLOG] = self.target_backlog_calls
        q[Q_TAU_S] = self.tau_s
        q[Q_KP] = self.kp
        q[Q_KI] = self.ki
        q[Q_KV_RESERVE] = 0.0 if self.name == "greedy" else self.kv_reserve
        q[Q_TPOT_TARGET_S] = 0.0 if self.name == "greedy" else self.tpot_target_s
        q[Q_BURST] = self.burst_calls
        q[Q_ALPHA] = self.ewma_alpha
        return q


@njit(cache=True)
def fill_admissions(q, waiting, bucket, decode_has_room):
    """Token level: how many waiting calls enter the fill stage now (bucket already refilled).

    Greedy looks only at the decode pool as it is now: room → admit everything waiting,
    full → nothing. Work already in fill or in flight is not counted, so the information is
    stale by one fill latency: the over-correction of SEED-15.
    """
    if q[Q_KIND] == 0:
        return waiting if decode_has_room else 0
    return min(waiting, int(bucket))


@njit(cache=True)
def decode_fits(q, kv_used, ctx, kv_capacity):
    """Token level: may a ready sequence with ``ctx`` tokens join the decode batch now?"""
    return kv_used + ctx <= kv_capacity * (1.0 - q[Q_KV_RESERVE])


@njit(cache=True)
def update_rate(q, state, backlog, arrivals_last_s, uptake_last_s):
    """Buffer management, once a second. ``state`` = [rate, integral, ewma_arrivals, ewma_uptake]."""
    a = q[Q_ALPHA]
    state[2] = (1 - a) * state[2] + a * arrivals_last_s
    state[3] = (1 - a) * state[3] + a * uptake_last_s
    e = q[Q_TARGET_BACKLOG] - backlog
    if q[Q_KIND] == 1:
        state[0] = max(state[2], 0.05)
    elif q[Q_KIND] == 2:
        lim = q[Q_TARGET_BACKLOG] * 20.0  # anti-windup
        state[1] = min(lim, max(-lim, state[1] + e))
        state[0] = max(0.05, state[3] + q[Q_KP] * e + q[Q_KI] * state[1])


@njit(cache=True)
def batch_cap(q, max_batch, decode_time, ctx_grid, ctx_mean):
    """Worker reconfiguration, once a minute: largest batch whose step meets the TPOT target."""
    if q[Q_TPOT_TARGET_S] <= 0.0:
        return max_batch
    g = min(max(np.searchsorted(ctx_grid, ctx_mean), 1), ctx_grid.shape[0] - 1)
    for b in range(max_batch, 0, -1):
        if decode_time[b, g] <= q[Q_TPOT_TARGET_S]:
            return b
    return 1


@njit(cache=True)
def resize_choice(util_fill, util_decode, o, n_layouts):
    """Worker reconfiguration, once a minute: move one step of GPUs towards the busier pool.

    Layouts are ordered by fill-pool size, so ``o + 1`` gives fill more GPUs. A pool that was
    busy > 85 % of the last minute gains a step from one that was busy < 60 %.
    """
    if util_fill > 0.85 and util_decode < 0.6 and o + 1 < n_layouts:
        return o + 1
    if util_decode > 0.85 and util_fill < 0.6 and o > 0:
        return o - 1
    return o


def oscillation_index(series: np.ndarray, sample_s: float, window_s: float = 120.0) -> dict:
    """How much a queue-length series swings around its own slow trend.

    ``amplitude`` = standard deviation of the series minus its centred moving average over
    ``window_s`` (in the series' unit, e.g. calls); ``swing`` = amplitude / series mean: 0 for a flat or slowly drifting queue, about
    0.7 for a square wave between 0 and twice its mean. ``peak_period_s`` is the period of the
    largest non-DC peak of the periodogram and ``peak_share`` its share of the variance (a
    sharp periodic oscillation has a large share; noise spreads it out).
    """
    x = np.asarray(series, dtype=np.float64)
    mean = float(x.mean()) if x.size else 0.0
    if x.size < 4 or mean <= 0:
        return {
            "swing": 0.0,
            "amplitude": 0.0,
            "peak_period_s": float("nan"),
            "peak_share": 0.0,
            "mean": mean,
        }
    w = max(1, int(round(window_s / sample_s)))
    trend = np.convolve(np.pad(x, (w // 2, w - 1 - w // 2), mode="edge"), np.ones(w) / w, "valid")
    amplitude = float(np.std(x - trend))
    swing = amplitude / mean
    p = np.abs(np.fft.rfft(x - mean)) ** 2
    p[0] = 0.0
    k = int(np.argmax(p))
    share = float(p[k] / p.sum()) if p.sum() > 0 else 0.0
    period = float(x.size * sample_s / k) if k > 0 else float("nan")
    return {
        "swing": swing,
        "amplitude": amplitude,
        "peak_period_s": period,
        "peak_share": share,
        "mean": mean,
    }


def bursty_calls(
    seed: int = 0,
    waves: int = 10,
    per_wave: int = 100,
    period_s: float = 60.0,
    calls: int = 8,
    context_tokens: int = 40_000,
    think_s: float = 3.0,
    mean_output_tokens: float = 300.0,
):
    """The oscillation scenario: waves of agent sessions starting together every ``period_s``.

    Each session runs ``calls`` turns (appends of 300-2,000 tokens, geometric output lengths,
    exponential think times), the load a fleet of agents launched by cron-like triggers makes.
    """
    import polars as pl

    rng = np.random.default_rng(seed)
    n = waves * per_wave
    start = np.repeat(np.arange(waves) * period_s, per_wave) + rng.uniform(0, 2.0, n)
    ctx0 = rng.integers(context_tokens // 2, context_tokens * 3 // 2, n)
    new = rng.integers(300, 2000, (n, calls))
    out = rng.geometric(1.0 / mean_output_tokens, (n, calls))
    grown = np.cumsum(new + out, axis=1) - (new + out)
    prefix = np.where(np.arange(calls) == 0, 0, ctx0[:, None] + grown)
    think = rng.exponential(think_s, (n, calls))
    return pl.DataFrame(
        {
            "session_id": np.repeat([f"w{i:05d}" for i in range(n)], calls),
            "call_index": np.tile(np.arange(calls), n),
            "t_start_s": np.repeat(start, calls),
            "new_tokens": new.ravel(),
            "reused_prefix_tokens": prefix.ravel(),
            "output_tokens": out.ravel(),
            "think_time_s": np.where(np.arange(calls) == 0, np.nan, think).ravel(),
        }
    ).with_columns(pl.col("think_time_s").fill_nan(None))
