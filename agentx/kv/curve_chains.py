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
from agentx.kv.curve import TIERS, check_grid, default_grid, link_totals
from agentx.kv.jit import bisect
from agentx.kv.tiers import TierCapacities, link_costs
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
    # (``keys``), made in record order (gathering the runs' columns in distance order took
    # 0.6 s of a 1 M-call curve)
    points = np.repeat(base[None, :], 1 + 3 * len(grid), axis=0)
    for ti in range(3):
        points[1 + ti * len(grid) : 1 + (ti + 1) * len(grid), ti] = grid
    cum = np.maximum.accumulate(points / bpt, axis=1)
    keys = np.unique(_key(cum))
    # the reads come bucketed by group (a counting sort): a point's loads are a slice of them
    tok_all, n_reads, rt, n_blk, reads = _group(rec, keys)
    # cumulative over the groups: [u] is the sum over runs at most keys[u - 1] deep
    c_tok, c_at, c_rt, c_n = (np.concatenate(([0], np.cumsum(a))) for a in (tok_all, n_reads, rt, n_blk))  # fmt: skip
    # tokens created at every point: first uses (the configured point's creations, less its
    # live runs deeper than its largest tier)
    never = int(acc[:, A_CREATED].sum()) - int(c_tok[-1] - c_tok[_upto(keys, cum[0])[2]])
    reused = float(g.reused.sum())
    n_calls = trace.calls.height
    rows = [None] * (3 * len(grid))
    costs = link_costs(cfg)
    for ti in range(3):
        # a tier's capacity only grows along the sorted grid, so each call's SSD and DRAM|SSD
        # load tokens (slices [i1, i2) and [i0, i2) of the grouped reads) grow and shrink at
        # the ends: integer sums, exact in any order
        loads = _Loads(reads, c_at, n_calls, bpt, costs)
        for gi in np.argsort(grid, kind="stable"):
            # the reads found in HBM, at most in DRAM, at most on SSD: the groups before u
            u = _upto(keys, cum[1 + ti * len(grid) + gi])
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
                **loads.move(u, float(created) * bpt),
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
    count, read tokens and blocks of its reads; the reads' call, tokens and group in record
    (time) order, then their calls and tokens bucketed by group (group 0's first)."""
    n, m = rec.shape[0], keys.size + 1
    tok_all, n_reads = np.zeros(m, np.int64), np.zeros(m, np.int64)
    rt, n_blk = np.zeros(m, np.int64), np.zeros(m, np.int64)
    grp = np.empty(n, np.int32)
    for i in range(n):
        u = bisect(keys, rec[i, R_DIST])  # how many keys are below the distance
        grp[i] = u
        tok_all[u] += rec[i, R_TOK]
        if rec[i, R_READ] == 1:
            n_reads[u] += 1
            rt[u] += rec[i, R_RT]
            n_blk[u] += rec[i, R_N]
    at = np.zeros(m, np.int64)  # each group's next free place
    for u in range(1, m):
        at[u] = at[u - 1] + n_reads[u - 1]
    size = at[m - 1] + n_reads[m - 1]
    reads = np.empty((5, size), np.int64)  # call, tokens, group; bucketed call, tokens
    j = 0
    for i in range(n):
        if rec[i, R_READ] == 1:
            u = grp[i]
            reads[0, j], reads[1, j], reads[2, j] = rec[i, R_CALL], rec[i, R_TOK], u
            reads[3, at[u]], reads[4, at[u]] = rec[i, R_CALL], rec[i, R_TOK]
            at[u] += 1
            j += 1
    return tok_all, n_reads, rt, n_blk, reads


class _Loads:
    """Per call its SSD-load and DRAM|SSD-load bytes and transfer time, over the reads of
    groups [u1, u2) and [u0, u2), whose ends only move forward; ``move`` gives
    ``link_sums``' totals at the new groups. A small move touches only the calls of the runs
    that enter or leave (slices of the bucketed reads: scattered calls, ~35 ns a run); a large
    one (a sweep's first point) sums every read again in time order, where neighbouring reads
    are neighbouring calls (a few ns a run). Each value is made by the same operations as
    ``link_sums`` makes it, so the totals are bit-identical to its."""

    def __init__(self, reads, c_at, n_calls: int, bpt: float, costs: dict) -> None:
        self.reads, self.c_at, self.bpt, self.costs = reads, c_at, bpt, costs
        self.bw = (costs["ssd_to_dram"][0], costs["dram_to_hbm"][0])
        self.tokens = np.zeros((n_calls, 2), np.int64)  # SSD, DRAM|SSD loads: one cache line
        self.bytes, self.time = np.zeros((2, n_calls)), np.zeros(n_calls)
        self.u = np.zeros(3, np.int64)  # u0, u1, u2 so far

    def move(self, u, created: float) -> dict:
        new = np.maximum(self.u, u)
        moved = int((self.c_at[new] - self.c_at[self.u]).sum())
        args = (self.tokens, self.bytes, self.time, self.bpt, *self.bw)
        if moved * 8 > self.reads.shape[1]:
            _fill(self.reads, *new, *args)
        else:
            _slide(self.reads, self.c_at[self.u], self.c_at[new], *args)
        self.u = new
        b = self.bytes
        return link_totals(float(b[0].sum()), float(b[1].sum()), float(self.time.sum()), created, self.costs)  # fmt: skip


@nb.njit(cache=True, inline="always")
def _refresh(c, tokens, byts, time, bpt, bw0, bw1):  # pragma: no cover (compiled)
    """Call c's bytes and time from its tokens: float(tokens) * bpt, each load's time, the
    slower (NaN kept, as np.maximum)."""
    x, y = tokens[c, 0] * bpt, tokens[c, 1] * bpt
    byts[0, c], byts[1, c] = x, y
    a, b = x / bw0, y / bw1
    time[c] = a if (a >= b or a != a) else b


@nb.njit(cache=True)
def _slide(reads, old, new, tokens, byts, time, bpt, bw0, bw1):  # pragma: no cover
    """Bucketed reads [old[2], new[2]) enter both loads, [old[1], new[1]) leave the SSD
    loads and [old[0], new[0]) the DRAM|SSD loads; then each touched call anew."""
    call, tok = reads[3], reads[4]
    for i in range(old[2], new[2]):
        tokens[call[i], 0] += tok[i]
        tokens[call[i], 1] += tok[i]
    for i in range(old[1], new[1]):
        tokens[call[i], 0] -= tok[i]
    for i in range(old[0], new[0]):
        tokens[call[i], 1] -= tok[i]
    for e in range(3):
        for i in range(old[e], new[e]):
            _refresh(call[i], tokens, byts, time, bpt, bw0, bw1)


@nb.njit(cache=True)
def _fill(reads, u0, u1, u2, tokens, byts, time, bpt, bw0, bw1):  # pragma: no cover
    """Every call's loads anew from the reads in time order: groups [u1, u2) on SSD, [u0,
    u2) in DRAM or on SSD."""
    tokens[:] = 0
    for i in range(reads.shape[1]):
        u = reads[2, i]
        if u0 <= u < u2:
            c = reads[0, i]
            tokens[c, 1] += reads[1, i]
            if u >= u1:
                tokens[c, 0] += reads[1, i]
    for c in range(time.size):
        _refresh(c, tokens, byts, time, bpt, bw0, bw1)
