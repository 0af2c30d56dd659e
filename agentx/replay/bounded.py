"""Exact whole-trace statistics in bounded memory: spill files, quantiles, the HBM peak sweep.

A replay too large for memory (agentx.replay.outofcore) still reports the exact latency
quantiles and the exact resident-KV peak of ``resident_context``. Per-call values go to
spill files on disk; the quantiles come from a radix select over those files (a 65,536-bin
histogram of the values' order-preserving bit patterns per pass, then the few values of the
bins that hold the wanted ranks, sorted); the peak comes from the same arrival/finish merge
as ``resident_context``, run over time buckets in order with its state carried across them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numba as nb
import numpy as np

GATHER_VALUES = 1 << 23  # a radix-select bin with at most this many values is sorted outright


class Spill:
    """Append-only binary files of fixed-dtype records, one per bucket, in ``folder``."""

    def __init__(self, folder: Path, name: str, n_buckets: int, dtype) -> None:
        self.paths = [Path(folder) / f"{name}-{i:05d}.bin" for i in range(n_buckets)]
        self.dtype = np.dtype(dtype)
        self.counts = np.zeros(n_buckets, np.int64)

    def add(self, bucket: np.ndarray, records: np.ndarray) -> None:
        """Append ``records`` (structured, ``self.dtype``) to their buckets, keeping their order."""
        small = len(self.paths) <= 1 << 16  # 16-bit keys sort stably by radix, in O(n)
        order = np.argsort(bucket.astype(np.uint16 if small else np.int64), kind="stable")
        cuts = np.searchsorted(bucket[order], np.arange(len(self.paths) + 1))
        for b in np.flatnonzero(np.diff(cuts)):
            with open(self.paths[b], "ab") as f:
                records[order[cuts[b] : cuts[b + 1]]].tofile(f)
            self.counts[b] += cuts[b + 1] - cuts[b]

    def append(self, b: int, records: np.ndarray) -> None:
        with open(self.paths[b], "ab") as f:
            records.tofile(f)
        self.counts[b] += len(records)

    def take(self, b: int, keep: bool = False) -> np.ndarray:
        """Bucket ``b``'s records in the order they were added (removed unless ``keep``)."""
        p = self.paths[b]
        if not p.exists():
            return np.zeros(0, self.dtype)
        out = np.fromfile(p, self.dtype)
        if not keep:
            os.remove(p)
        return out


def time_buckets(sample: np.ndarray, n_buckets: int) -> np.ndarray:
    """Inner bounds of about ``n_buckets`` time ranges holding equal shares of ``sample``."""
    if n_buckets <= 1 or sample.size == 0:
        return np.zeros(0)
    return np.unique(np.quantile(sample, np.arange(1, n_buckets) / n_buckets))


def bucket_of(times: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    return np.searchsorted(bounds, times, side="right")


def _keys(values: np.ndarray) -> np.ndarray:
    """Unsigned keys in the order of the float64 values (no NaN)."""
    b = np.ascontiguousarray(values, np.float64).view(np.uint64)
    neg = (b >> np.uint64(63)).astype(bool)
    return np.where(neg, ~b, b | np.uint64(1 << 63))


def _value(key: np.uint64) -> float:
    k = np.uint64(key)
    b = k & ~np.uint64(1 << 63) if k >> np.uint64(63) else ~k
    return float(np.array([b], np.uint64).view(np.float64)[0])


def quantiles(chunks, n: int, qs, gather: int = GATHER_VALUES) -> list[float]:
    """Linear-interpolated quantiles ``qs`` (as polars ``quantile(q, "linear")``) of ``n``
    float64 values that ``chunks()`` yields afresh on every call; memory is one chunk and
    at most ``gather`` values. Exact: every wanted rank is found by radix select."""
    if n == 0:
        return [0.0 for _ in qs]
    ranks = set()
    for q in qs:
        f = (n - 1) * q
        ranks.update({int(np.floor(f)), int(np.ceil(f))})
    found = _select(chunks, sorted(ranks), n, gather)
    out = []
    for q in qs:
        f = (n - 1) * q
        lo, hi = int(np.floor(f)), int(np.ceil(f))
        a, b = found[lo], found[hi]
        out.append(a if lo == hi else a + (b - a) * (f - lo))
    return out


def _select(chunks, ranks: list[int], n: int, gather: int) -> dict[int, float]:
    # rank -> (bits, prefix, rank within the group, group size): the group is every key whose
    # top ``bits`` bits equal ``prefix``. A small group is sorted; a large one histogrammed on
    # its next 16 bits, which narrows it to one sub-bin (64 bits: one key value).
    todo = {r: (0, 0, r, n) for r in ranks}
    found: dict[int, float] = {}
    while todo:
        groups = {(b, p): c for b, p, _, c in todo.values()}
        hist = {g: np.zeros(1 << 16, np.int64) for g, c in groups.items() if c > gather}
        vals: dict = {g: [] for g in groups if g not in hist}
        for chunk in chunks():
            k = _keys(chunk)
            for bits, prefix in groups:
                sel = k if bits == 0 else k[(k >> np.uint64(64 - bits)) == np.uint64(prefix)]
                if (bits, prefix) in vals:
                    vals[(bits, prefix)].append(sel)
                    continue
                sub = ((sel >> np.uint64(48 - bits)) & np.uint64(0xFFFF)).astype(np.int64)
                hist[(bits, prefix)] += np.bincount(sub, minlength=1 << 16)
        srt = {g: np.sort(np.concatenate(v)) for g, v in vals.items()}
        nxt = {}
        for r, (bits, prefix, rr, _) in todo.items():
            if (bits, prefix) in srt:
                found[r] = _value(srt[(bits, prefix)][rr])
                continue
            cum = np.cumsum(hist[(bits, prefix)])
            sub = int(np.searchsorted(cum, rr, side="right"))
            before = int(cum[sub - 1]) if sub else 0
            key = (prefix << 16) | sub
            if bits + 16 == 64:
                found[r] = _value(np.uint64(key))
            else:
                nxt[r] = (bits + 16, key, rr - before, int(cum[sub]) - before)
        todo = nxt
    return found


def peak_state() -> np.ndarray:
    """Sweep state carried across buckets: active calls, tokens, best resident, its sequences."""
    return np.array([0.0, 0.0, -1.0, 0.0])


def sweep_bucket(t0, ctx0, t1, ctx1, batch: float, state: np.ndarray) -> None:
    """Advance the arrival/finish merge of ``resident_context`` over one time bucket: arrivals
    (``t0``, ``ctx0``) and finishes (``t1``, ``ctx1``), each in trace order; ties as there."""
    arrive, finish = np.argsort(t0, kind="stable"), np.argsort(t1, kind="stable")
    _sweep(t0, t1, ctx0, ctx1, arrive, finish, float(batch), state)


@nb.njit(cache=True, error_model="numpy")
def _sweep(t0, t1, ctx0, ctx1, arrive, finish, batch, st):  # pragma: no cover (compiled)
    n, m, i, j = t0.size, t1.size, 0, 0
    active, tokens, best, best_seqs = st[0], st[1], st[2], st[3]
    while i < n or j < m:
        if i == n or (j < m and t1[finish[j]] <= t0[arrive[i]]):
            active -= 1.0
            tokens -= ctx1[finish[j]]
            j += 1
        else:
            active += 1.0
            tokens += ctx0[arrive[i]]
            i += 1
        resident = tokens * min(1.0, batch / max(active, 1.0)) if active > 0 else 0.0
        if resident > best:
            best, best_seqs = resident, min(active, batch)
    st[0], st[1], st[2], st[3] = active, tokens, best, best_seqs
