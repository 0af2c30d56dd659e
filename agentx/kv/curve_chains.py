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
from agentx.kv import chains_result
from agentx.kv.blocks import geometry
from agentx.kv.chain_ops import A_CREATED, R_CALL, R_DIST, R_N, R_READ, R_RT, R_TOK
from agentx.kv.chains import chain_pass
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
    # no horizon: the summary reports the largest reuse distance, however deep
    st, acc = chain_pass(g, caps.tokens(bpt), horizon_tokens=np.inf, record=True)
    summary = chains_result(trace, cfg, caps, g, acc, st.glob).summary
    rec = st.records()
    max_dist_bytes = float(rec[:, R_DIST].max(initial=0)) * bpt
    if grid is None:
        grid = default_grid(max_dist_bytes)
    summary["curve"] = {"points": len(grid), "max_reuse_distance_bytes": max_dist_bytes}
    rec = rec[np.argsort(rec[:, R_DIST], kind="stable")]
    d_all = rec[:, R_DIST]
    p_tok = np.concatenate(([0], np.cumsum(rec[:, R_TOK])))  # every run: found or created
    reads = rec[rec[:, R_READ] == 1]
    d = reads[:, R_DIST]
    p_rt = np.concatenate(([0], np.cumsum(reads[:, R_RT])))
    p_n = np.concatenate(([0], np.cumsum(reads[:, R_N])))
    call, tok = reads[:, R_CALL], reads[:, R_TOK].astype(np.float64)
    # tokens created at every point: first uses and blocks past the horizon (the configured
    # point's creations, less its live runs deeper than its largest tier)
    c2 = np.maximum.accumulate(caps.tokens(bpt))[2]
    never = int(acc[:, A_CREATED].sum()) - int(p_tok[-1] - p_tok[np.searchsorted(d_all, c2, "right")])  # fmt: skip
    reused = float(g.reused.sum())
    n_calls = trace.calls.height
    rows = []
    for ti, tier in enumerate(TIERS):
        for c in grid:
            point = base.copy()
            point[ti] = c
            cap = np.maximum.accumulate(point / bpt)
            i0, i1, i2 = np.searchsorted(d, cap, "right")  # reads found in HBM, <= DRAM, <= SSD
            lo = (0, i0, i1)[ti]
            hi = (i0, i1, i2)[ti]
            ssd = np.bincount(call[i1:i2], weights=tok[i1:i2], minlength=n_calls) * bpt
            lower = np.bincount(call[i0:i2], weights=tok[i0:i2], minlength=n_calls) * bpt
            created = never + int(p_tok[-1] - p_tok[np.searchsorted(d_all, cap[2], "right")])
            found = int(p_rt[(i0, i1, i2)[ti]])
            rows.append(
                {
                    "tier": tier,
                    "capacity_bytes": float(c),
                    "hit_ratio": float(found) / reused if reused else 0.0,
                    "tier_hit_ratio": float(p_rt[hi] - p_rt[lo]) / reused if reused else 0.0,
                    "hit_blocks": int(p_n[hi] - p_n[lo]),
                    "hit_tokens": int(p_rt[hi] - p_rt[lo]),
                    "recompute_tokens": int(reused) - int(p_rt[i2]),
                    **link_sums(ssd, lower, float(created) * bpt, cfg),
                }
            )
    return pl.DataFrame(rows), summary
