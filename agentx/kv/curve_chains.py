"""kv-curve for lru + write-through on a trace without hashes: every point from one chain pass.

The chain kernel (agentx.kv.chains) records each run of reused blocks (call, reuse distance,
blocks, block tokens, read tokens) with no horizon, so every distance is exact (the summary
reports the largest). Runs grouped by depth between the points' capacities (a counting
sort: no sort by distance) turn each point's sums into lookups of cumulative sums; only the
per-call transfer time needs the runs that load from DRAM or SSD at that point, a contiguous
slice of the grouped reads. Blocks used for the first time are
found nowhere at every point: the configured point's counts give
them. Results equal the block-stream path's (tests/test_kv_curve_chains.py).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.kv import chains, chains_result
from agentx.kv.blocks import geometry
from agentx.kv.chain_ops import A_CREATED, R_CALL, R_DIST, R_N, R_READ, R_RT, R_TOK
from agentx.kv.curve import TIERS, check_grid, default_grid, link_sums
from agentx.kv.jit import bisect
from agentx.kv.order import argsort
from agentx.kv.tiers import TierCapacities
from agentx.traces.io import Trace


def chain_curve(trace: Trace, cfg: ServingConfig, grid, caps: TierCapacities, block_size_tokens,
                max_refs: int) -> tuple[pl.DataFrame, dict]:  # fmt: skip
    """Rows and summary as agentx.kv.curve.curve gives them (``grid``: capacities in bytes
    or None for the default grid)."""
    bpt = cfg.kv_bytes_per_token
    g = geometry(trace, block_size_tokens, max_refs=max_refs)
    grid = None if grid is None else check_grid(grid)
    base = np.array([caps.hbm_bytes, caps.dram_bytes, caps.ssd_bytes])
    # no horizon: the summary reports the largest reuse distance, however deep (the window
    # holds a few times per call, not per block: it grows as needed)
    st, acc = chains.chain_pass(g, caps.tokens(bpt), horizon_tokens=np.inf, record=True)
    summary = chains_result(trace, cfg, caps, g, acc, st.glob).summary
    rec = st.records()
    max_dist_bytes = float(rec[:, R_DIST].max(initial=0)) * bpt
    if grid is None:
        grid = default_grid(max_dist_bytes)
    summary["curve"] = {"points": len(grid), "max_reuse_distance_bytes": max_dist_bytes}
    # every point's capacities (cumulative), the configured point's first: each count below
    # is of the runs at most one of these deep, so the sums are per group between them
    # (``keys``), made in one pass in record order (gathering the runs' columns in distance
    # order took 0.6 s of a 1 M-call curve)
    points = np.repeat(base[None, :], 1 + 3 * len(grid), axis=0)
    for ti in range(3):
        points[1 + ti * len(grid) : 1 + (ti + 1) * len(grid), ti] = grid
    cum = np.maximum.accumulate(points / bpt, axis=1)
    keys = np.unique(_key(cum))
    tok_all, n_reads, rt, n_blk, d, call, tok = _group(rec, keys)
    # the reads by distance, for the per-call sums: neighbours in it are mostly calls near
    # in time (np.add.at over them 3-4x faster than in record order); ties in any order
    # (viewed as np.int64: numba's arrays carry a dtype equal to numpy's but not it, which
    # sends np.add.at to its slow path: 6x slower)
    order = argsort(d)  # polars': numpy's is slow on AMD Zen 4 (agentx/kv/order.py)
    call, tok = call.view(np.int64)[order], tok.view(np.int64)[order]
    # cumulative over the groups: [u] is the sum over runs at most keys[u - 1] deep
    c_tok, c_at, c_rt, c_n = (np.concatenate(([0], np.cumsum(a))) for a in (tok_all, n_reads, rt, n_blk))  # fmt: skip
    # tokens created at every point: first uses (the configured point's creations, less its
    # live runs deeper than its largest tier)
    never = int(acc[:, A_CREATED].sum()) - int(c_tok[-1] - c_tok[_upto(keys, cum[0])[2]])
    reused = float(g.reused.sum())
    n_calls = trace.calls.height
    rows = [None] * (3 * len(grid))
    for ti in range(3):
        # a tier's capacity only grows along the sorted grid, so each call's SSD and DRAM|SSD
        # load tokens (slices [i1, i2) and [i0, i2) of the grouped reads) grow and shrink at
        # the ends: integer sums, exact in any order
        ssd, lower = _Sliding(call, tok, n_calls), _Sliding(call, tok, n_calls)
        for gi in np.argsort(grid, kind="stable"):
            # the reads found in HBM, at most in DRAM, at most on SSD: the groups before u
            u = _upto(keys, cum[1 + ti * len(grid) + gi])
            i0, i1, i2 = c_at[u]
            lo, hi = (0, u[0], u[1])[ti], u[ti]
            created = never + int(c_tok[-1] - c_tok[u[2]])
            rows[ti * len(grid) + gi] = {
                "tier": TIERS[ti],
                "capacity_bytes": float(grid[gi]),
                "hit_ratio": float(int(c_rt[hi])) / reused if reused else 0.0,
                "tier_hit_ratio": float(c_rt[hi] - c_rt[lo]) / reused if reused else 0.0,
                "hit_blocks": int(c_n[hi] - c_n[lo]),
                "hit_tokens": int(c_rt[hi] - c_rt[lo]),
                "recompute_tokens": int(reused) - int(c_rt[u[2]]),
                **link_sums(ssd.move(i1, i2) * bpt, lower.move(i0, i2) * bpt, float(created) * bpt, cfg),
            }  # fmt: skip
    return pl.DataFrame(rows), summary


def _key(caps) -> np.ndarray:
    """Capacities as integer distance keys (a run at distance d is found within c iff
    d <= floor(c): distances are integers, and a float key would convert them all)."""
    return np.floor(np.minimum(np.asarray(caps, np.float64), 2.0**62)).astype(np.int64)


def _upto(keys: np.ndarray, caps) -> np.ndarray:
    """Per capacity, its group bound in the cumulative sums (each is one of ``keys``)."""
    return np.searchsorted(keys, _key(caps)) + 1


@nb.njit(cache=True)
def _group(rec, keys):  # pragma: no cover (compiled)
    """Runs grouped by depth: group u holds the runs deeper than keys[u - 1] and at most
    keys[u] deep (the last: deeper than all). Per group the tokens of all runs, and the
    count, read tokens and blocks of its reads; the reads' distances, calls and tokens as
    plain columns, in record order."""
    n, m = rec.shape[0], keys.size + 1
    tok_all, n_reads = np.zeros(m, np.int64), np.zeros(m, np.int64)
    rt, n_blk = np.zeros(m, np.int64), np.zeros(m, np.int64)
    d_r, call, tok = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    j = 0
    for i in range(n):
        d = rec[i, R_DIST]
        u = bisect(keys, d)  # how many keys are below d
        tok_all[u] += rec[i, R_TOK]
        if rec[i, R_READ] == 1:
            n_reads[u] += 1
            rt[u] += rec[i, R_RT]
            n_blk[u] += rec[i, R_N]
            d_r[j], call[j], tok[j] = d, rec[i, R_CALL], rec[i, R_TOK]
            j += 1
    return tok_all, n_reads, rt, n_blk, d_r[:j], call[:j], tok[:j]


class _Sliding:
    """Per-call sums of ``tok`` over a slice [a, b) of runs whose ends only move forward."""

    def __init__(self, call: np.ndarray, tok: np.ndarray, n_calls: int) -> None:
        self.call, self.tok, self.n = call, tok, n_calls
        self.sums = np.zeros(n_calls, np.int64)
        self.a = self.b = 0

    def _add(self, lo: int, hi: int, sign: int) -> None:
        # np.add.at costs the slice, not the calls (a bincount made three per-call arrays at
        # every move: 0.27 s of a 1 M-call curve); integer adds, exact
        if hi > lo:
            tok = self.tok[lo:hi]
            np.add.at(self.sums, self.call[lo:hi], tok if sign > 0 else -tok)

    def move(self, a: int, b: int) -> np.ndarray:
        self._add(self.b, max(b, self.b), 1)
        self._add(self.a, max(a, self.a), -1)
        self.a, self.b = max(a, self.a), max(b, self.b)
        return self.sums.astype(np.float64)
