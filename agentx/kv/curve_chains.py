"""kv-curve for lru + write-through on a trace without hashes: every point from one chain pass.

The chain kernel (agentx.kv.chains) records each run of reused blocks (call, reuse distance,
blocks, block tokens, read tokens) with no horizon, so every distance is exact (the summary
reports the largest). Runs sorted by distance turn each point's sums into
prefix-sum lookups; only the per-call transfer time needs the runs that load from DRAM or
SSD at that point, a contiguous slice of the sorted reads. Blocks used for the first time are
found nowhere at every point: the configured point's counts give
them. Results equal the block-stream path's (tests/test_kv_curve_chains.py).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.kv import chains, chains_result
from agentx.kv.blocks import geometry
from agentx.kv.chain_ops import A_CREATED, R_CALL, R_DIST, R_N, R_READ, R_RT, R_TOK
from agentx.kv.curve import TIERS, check_grid, default_grid, link_sums
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
    # order among equal distances never matters: searches stop between distinct distances
    order = np.argsort(rec[:, R_DIST])
    d_all = rec[order, R_DIST]
    p_tok = np.concatenate(([0], np.cumsum(rec[order, R_TOK])))  # every run: found or created
    order = order[rec[order, R_READ] == 1]
    d = rec[order, R_DIST]
    p_rt = np.concatenate(([0], np.cumsum(rec[order, R_RT])))
    p_n = np.concatenate(([0], np.cumsum(rec[order, R_N])))
    call, tok = rec[order, R_CALL], rec[order, R_TOK]
    # tokens created at every point: first uses (the configured point's creations, less its
    # live runs deeper than its largest tier)
    c2 = np.maximum.accumulate(caps.tokens(bpt))[2]
    never = int(acc[:, A_CREATED].sum()) - int(p_tok[-1] - p_tok[_upto(d_all, [c2])[0]])
    reused = float(g.reused.sum())
    n_calls = trace.calls.height
    rows = [None] * (3 * len(grid))
    for ti in range(3):
        # a tier's capacity only grows along the sorted grid, so each call's SSD and DRAM|SSD
        # load tokens (slices [i1, i2) and [i0, i2) of the sorted reads) grow and shrink at
        # the ends: integer sums, exact in any order
        ssd, lower = _Sliding(call, tok, n_calls), _Sliding(call, tok, n_calls)
        for gi in np.argsort(grid, kind="stable"):
            point = base.copy()
            point[ti] = grid[gi]
            cap = np.maximum.accumulate(point / bpt)
            i0, i1, i2 = _upto(d, cap)  # reads found in HBM, <= DRAM, <= SSD
            lo, hi = (0, i0, i1)[ti], (i0, i1, i2)[ti]
            created = never + int(p_tok[-1] - p_tok[_upto(d_all, cap[2:])[0]])
            rows[ti * len(grid) + gi] = {
                "tier": TIERS[ti],
                "capacity_bytes": float(grid[gi]),
                "hit_ratio": float(int(p_rt[hi])) / reused if reused else 0.0,
                "tier_hit_ratio": float(p_rt[hi] - p_rt[lo]) / reused if reused else 0.0,
                "hit_blocks": int(p_n[hi] - p_n[lo]),
                "hit_tokens": int(p_rt[hi] - p_rt[lo]),
                "recompute_tokens": int(reused) - int(p_rt[i2]),
                **link_sums(ssd.move(i1, i2) * bpt, lower.move(i0, i2) * bpt, float(created) * bpt, cfg),
            }  # fmt: skip
    return pl.DataFrame(rows), summary


def _upto(d_sorted: np.ndarray, caps) -> np.ndarray:
    """How many sorted integer distances are <= each capacity (searched as integers: a float
    key would convert the whole array at every search)."""
    keys = np.floor(np.minimum(np.asarray(caps, np.float64), 2.0**62)).astype(np.int64)
    return np.searchsorted(d_sorted, keys, "right")


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
