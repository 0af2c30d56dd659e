"""Whole-trace figures of the merge: the resident-KV peak and exact latency quantiles.

Both read plain float arrays of every call (8 B per call each), so a streaming driver keeps
only those columns of its partitions.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import polars as pl

from agentx.kv.order import argsort_times, resort_ties

QUANTILES = (0.5, 0.9, 0.99)


def quantiles(values, qs=QUANTILES) -> list[float]:
    """Linear-interpolated quantiles, equal to polars' ``Series.quantile(q, "linear")``:
    index (n−1)·q between the order statistics at its floor and ceiling, ``lo + f·(hi − lo)``.
    No sort: ``order_statistics`` (tests compare with polars). ``values``: an array, or a
    list of arrays that together are the values."""
    n = sum(v.size for v in values) if isinstance(values, list) else values.size
    if n == 0:
        return [0.0 for _ in qs]
    pos = [(n - 1) * q for q in qs]
    ranks = sorted({int(np.floor(p)) for p in pos} | {int(np.ceil(p)) for p in pos})
    at = dict(zip(ranks, order_statistics(values, ranks), strict=True))
    out = []
    for p in pos:
        lo, hi = float(at[int(np.floor(p))]), float(at[int(np.ceil(p))])
        out.append(lo if lo == hi else float((p - np.floor(p)) * (hi - lo) + lo))
    return out


def order_statistics(values, ranks) -> list:
    """The values at ``ranks`` (ascending, distinct) of ``values`` sorted (NaN last), as
    ``np.partition(values, ranks)`` places them; ``values``: an array, or a list of arrays
    taken together. That call selects every rank over the whole array with numpy's generic
    introselect (0.23-0.29 s for the six ranks of p50/p90/p99 of 10 M latencies); here each
    rank is one single-rank partition (numpy's AVX-512 selection where the CPU has it) of
    only what lies past the last rank, and a rank right after the last is the least of those
    values (``fmin``: NaN only where all are), 0.09-0.12 s."""
    a = np.concatenate(values) if isinstance(values, list) else np.array(values, copy=True)
    out, lo = [], 0
    for k in ranks:
        if k == lo and k > 0:
            out.append(np.fmin.reduce(a[lo:]))
            continue
        a[lo:].partition(k - lo)
        out.append(a[k])
        lo = k + 1
    return out


class Arrivals(NamedTuple):
    """The arrival side of ``resident_context``: start times and contexts (input + output
    tokens) in stable time order, and the calls' own start times and token columns (views,
    no copies) for the finish side."""

    t0s: np.ndarray
    ctx0: np.ndarray
    t0: np.ndarray
    parts: tuple


def arrivals(calls: pl.DataFrame, by_time: np.ndarray | None = None) -> Arrivals:
    """The arrival side of ``resident_context``, which needs no latency. A streaming replay
    makes it while the chain kernel holds the other core (agentx/cli/cmd_replay.py); its
    views of the trace's columns spare the merge a copy of them from the partitions' slices
    (240 MB at 10 M calls). ``by_time``: the rows in order of start time, ties in any order
    (the KV geometry's ``row``), which spares the sort."""
    t0, parts = _starts(calls), _tokens(calls)
    return Arrivals(*_sorted_with(t0, parts, by_time=by_time), t0, parts)


def resident_context(
    calls: pl.DataFrame, busy_s: np.ndarray, batch: int, arrived=None, reuse: bool = False,
    pool=None,
) -> tuple[float, float]:  # fmt: skip
    """(tokens, sequences) of KV resident in HBM at the busiest moment of the trace's timeline.

    A call holds its context (input + output tokens) from its arrival for ``busy_s`` (its
    fill and decode latency). When c calls are active and c > ``batch``, the decode batch
    holds ``batch`` of them at the active mean context; the peak over all arrival/finish
    events is reported (at equal times finishes first, each set in trace order).
    ``arrived``: ``arrivals(calls)``, when made already; ``reuse``: ``busy_s`` (float64) may
    be overwritten (with the finish times: one 8 B-per-call array less at the merge's peak);
    ``pool``: an executor with a free worker, which sorts half of the finish times.
    """
    busy_s = np.asarray(busy_s, np.float64)
    if isinstance(arrived, Arrivals) and arrived.t0.size == calls.height:
        t0, parts = arrived.t0, arrived.parts
    else:
        t0, parts = _starts(calls), _tokens(calls)
    return peak_resident(t0, parts, busy_s, batch, arrived, reuse, pool)


def peak_resident(
    t0: np.ndarray, ctx, busy_s: np.ndarray, batch: int, arrived=None, reuse=False, pool=None
) -> tuple[float, float]:
    """(tokens, sequences) of KV resident at the busiest moment (see ``resident_context``);
    ``ctx``: each call's context, or a tuple of arrays that add up to it.

    Events in time order, finishes before arrivals at equal times and each set in trace
    order. Each sort is ``agentx.kv.order.argsort_times`` (the kind fast on this CPU, stable
    or not) whose runs of equal times are put back in trace order: the permutation of a
    stable sort. The finish times are sorted (and their contexts gathered) in two halves of
    the trace, on two cores with ``pool``; the merge pass takes the earlier head of the two
    at each finish, the first half's at equal times (trace order).
    """
    if t0.size == 0:
        return 0.0, 0.0
    ctx = ctx if isinstance(ctx, tuple) else (ctx,)
    t0s, ctx0 = _sorted_with(t0, ctx) if arrived is None else arrived[:2]
    t1 = np.add(t0, busy_s, out=busy_s if reuse else None)
    h = t1.size // 2

    def half(s: slice):
        return _sorted_with(t1[s], tuple(p[s] for p in ctx))

    later = pool.submit(half, slice(h, None)) if pool is not None else None
    first = half(slice(0, h))
    second = later.result() if later is not None else half(slice(h, None))
    return _sweep(t0s, ctx0, *first, *second, float(batch), pool)


def _sweep(t0s, ctx0, t1a, ctx1a, t1b, ctx1b, batch: float, pool) -> tuple[float, float]:
    """``_peak`` over all events, in two pieces on two cores with ``pool``: the events before
    the middle arrival i (the arrivals before it and the finishes at or before its time, as
    the merge takes them) and the rest, which starts from the counts and tokens those leave.
    Contexts are whole token counts, so every partial sum is exact in any order and the
    second piece sees the very values one sweep would; the first piece's peak wins ties."""
    n = t0s.size
    if pool is None or n < 2:
        return _peak(t0s, ctx0, t1a, ctx1a, t1b, ctx1b, batch, 0.0, 0.0)
    i = n // 2
    a = int(np.searchsorted(t1a, t0s[i], "right"))  # NaN finishes sort last: never before
    b = int(np.searchsorted(t1b, t0s[i], "right"))
    tokens = float(ctx0[:i].sum()) - float(ctx1a[:a].sum()) - float(ctx1b[:b].sum())
    rest = (t0s[i:], ctx0[i:], t1a[a:], ctx1a[a:], t1b[b:], ctx1b[b:], batch, float(i - a - b))
    later = pool.submit(_peak, *rest, tokens)
    head = _peak(t0s[:i], ctx0[:i], t1a[:a], ctx1a[:a], t1b[:b], ctx1b[:b], batch, 0.0, 0.0)
    tail = later.result()
    return tail if tail[0] > head[0] else head


def _starts(calls: pl.DataFrame) -> np.ndarray:
    # (a contiguous float column is used as it is: no second copy)
    return np.asarray(calls.get_column("t_start_s").to_numpy(), np.float64)


def _tokens(calls: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return tuple(calls.get_column(c).to_numpy() for c in ("input_tokens", "output_tokens"))


def _sorted_with(t: np.ndarray, parts: tuple, step: int = 1 << 20, by_time=None):
    """``t`` sorted stably and the sum of ``parts`` (float64; exact below 2^53) in the same
    order, gathered a slice at a time: one permutation and no whole-length temporaries.
    ``by_time``: an order of ``t`` already made (ties in any order; not changed)."""
    # ties in any order (a quicksort, or the geometry's order): put back in trace order below
    order = argsort_times(t) if by_time is None else by_time.copy()
    ts = t[order]
    resort_ties(order, ts)  # permutes equal values only, so ``ts`` stays right
    out = np.empty(order.size)
    for a in range(0, order.size, step):
        o = order[a : a + step]
        out[a : a + o.size] = parts[0][o]
        for p in parts[1:]:
            out[a : a + o.size] += p[o]
    return ts, out


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _peak(t0s, ctx0, t1a, ctx1a, t1b, ctx1b, batch, active, tokens):  # pragma: no cover
    """The sweep over arrivals ``t0s``/``ctx0`` and the finishes of the trace's two halves
    (``t1a``/``ctx1a`` of the first, ``t1b``/``ctx1b`` of the second), each in stable time
    order: at equal times a finish comes before an arrival, and the first half's first.
    ``active``, ``tokens``: the calls and tokens resident before the first event."""
    n, na, nb = t0s.size, t1a.size, t1b.size
    i = a = b = 0
    best, best_seqs = -1.0, 0.0
    while i < n or a < na or b < nb:
        # the earlier head of the two halves (NaN, sorted last, after any number)
        take_a = a < na and (b == nb or t1a[a] <= t1b[b] or t1b[b] != t1b[b])
        t = t1a[a] if take_a else (t1b[b] if b < nb else 0.0)
        if (a < na or b < nb) and (i == n or t <= t0s[i]):
            active -= 1.0
            if take_a:
                tokens -= ctx1a[a]
                a += 1
            else:
                tokens -= ctx1b[b]
                b += 1
        else:
            active += 1.0
            tokens += ctx0[i]
            i += 1
        resident = tokens * min(1.0, batch / max(active, 1.0)) if active > 0 else 0.0
        if resident > best:
            best, best_seqs = resident, min(active, batch)
    return best, best_seqs
