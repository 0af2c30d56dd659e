"""Hit ratio and bytes per link against each tier's capacity, from one stack pass (SEED-13).

One Mattson pass gives every reference's reuse distance; each point of the curve is then a
vectorized comparison over the segments. Each tier is swept in turn while the other two keep
the configured capacities (an inclusive hierarchy: a smaller tier below a larger one adds
nothing). ``hit_ratio`` counts reused-prefix tokens found in the swept tier or a faster one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import UsageError
from agentx.kv import has_hashes, memory_guard, summarize
from agentx.kv.blocks import MAX_REFS, build_blocks
from agentx.kv.policies import DRAM, NOWHERE, SSD, outcome, prepare, tiers_of
from agentx.kv.tiers import LINKS, TierCapacities, capacities_for, link_costs, per_call_frame
from agentx.traces.io import Trace

TIERS = ("hbm", "dram", "ssd")


def default_grid(max_dist_bytes: float, points: int = 16) -> np.ndarray:
    """0, then log-spaced from 1 GB to just past the largest reuse distance (full reuse)."""
    top = max(max_dist_bytes * 1.01, 2e9)
    return np.concatenate(([0.0], np.geomspace(1e9, top, points - 1)))


def curve(
    trace: Trace,
    cfg: ServingConfig,
    capacities_bytes=None,
    *,
    capacities: TierCapacities | None = None,
    block_size_tokens: int | None = None,
    policy: str = "lru",
    write_policy: str = "write-through",
    max_refs: int = MAX_REFS,
) -> tuple[pl.DataFrame, dict]:
    """Rows (tier, capacity_bytes, hit_ratio, tier_hit_ratio, hit_blocks, hit_tokens,
    recompute_tokens, bytes per link, transfer time and energy) for each tier and capacity,
    and the summary at the configured capacities (``replay_tiers``' summary, plus the grid)."""
    if policy == "belady":
        raise UsageError(
            "policy 'belady' needs one MIN run per capacity; use --policy lru or seed7"
        )
    caps = capacities or capacities_for(cfg)
    with memory_guard(max_refs):
        if policy == "lru" and write_policy == "write-through" and not has_hashes(trace):
            from agentx.kv.curve_chains import chain_curve

            return chain_curve(trace, cfg, capacities_bytes, caps, block_size_tokens, max_refs)
        return _curve(trace, cfg, capacities_bytes, caps, block_size_tokens, policy, write_policy, max_refs)  # fmt: skip


def _curve(trace, cfg, capacities_bytes, caps, block_size_tokens, policy, write_policy, max_refs):
    bpt = cfg.kv_bytes_per_token
    stream = build_blocks(trace, block_size_tokens, max_refs=max_refs)
    st = prepare(policy, stream)
    d = (st[0] if policy == "seed7" else st).dist_tokens
    max_dist_bytes = float(d.max(initial=0)) * bpt
    grid = (
        default_grid(max_dist_bytes) if capacities_bytes is None else check_grid(capacities_bytes)
    )
    base = np.array([caps.hbm_bytes, caps.dram_bytes, caps.ssd_bytes])
    out = st_out = outcome(policy, stream, base / bpt, stack=st)
    pc = per_call_frame(out, stream, trace.calls.height, bpt, cfg, write_policy)
    summary = summarize(out, pc, stream, caps, policy, write_policy, cfg)
    summary["curve"] = {"points": len(grid), "max_reuse_distance_bytes": max_dist_bytes}
    reused = float(stream.reused_tokens.sum())
    rows = []
    quick = policy == "lru" and write_policy == "write-through"
    for ti, tier in enumerate(TIERS):
        for c in grid:
            point = base.copy()
            point[ti] = c
            if quick:  # only the tiers change from point to point: no per-call frame
                out = replace(st_out, tier=tiers_of(st.dist_tokens, point / bpt))
                links = _link_sums(out, stream.n_calls, bpt, cfg)
            else:
                out = outcome(policy, stream, point / bpt, stack=st)
                pc = per_call_frame(out, stream, trace.calls.height, bpt, cfg, write_policy)
                links = {f"{k}_bytes": float(pc[f"kv_{k}_bytes"].sum()) for k in LINKS}
                links["transfer_time_s"] = float(pc["kv_transfer_time_s"].sum())
                links["transfer_energy_j"] = float(pc["kv_transfer_energy_j"].sum())
            rd = out.is_read
            found = rd & (out.tier <= ti)
            exact = rd & (out.tier == ti)
            rows.append(
                {
                    "tier": tier,
                    "capacity_bytes": float(c),
                    "hit_ratio": float(out.read_tokens[found].sum()) / reused if reused else 0.0,
                    "tier_hit_ratio": float(out.read_tokens[exact].sum()) / reused
                    if reused
                    else 0.0,
                    "hit_blocks": int(out.n[exact].sum()),
                    "hit_tokens": int(out.read_tokens[exact].sum()),
                    "recompute_tokens": int(out.read_tokens[rd & (out.tier == NOWHERE)].sum()),
                    **links,
                }
            )
    return pl.DataFrame(rows), summary


def check_grid(capacities_bytes) -> np.ndarray:
    grid = np.asarray(capacities_bytes, np.float64)
    if grid.ndim != 1 or (grid < 0).any() or not np.isfinite(grid).all():
        raise UsageError("capacities must be a list of non-negative byte counts")
    return grid


def _link_sums(out, n_calls: int, bpt: float, cfg: ServingConfig) -> dict:
    """Bytes per link, transfer time and energy summed over calls (write-through): the
    totals of ``per_call_frame`` from two per-call sums instead of its whole frame."""
    rd = out.is_read
    seg_tok = (out.n * out.block_tokens).astype(np.float64)
    low = np.flatnonzero(rd & ((out.tier == DRAM) | (out.tier == SSD)))  # the loads, a few
    call, tok, on_ssd = out.call[low], seg_tok[low], out.tier[low] == SSD
    ssd = np.bincount(call, weights=np.where(on_ssd, tok, 0), minlength=n_calls) * bpt
    lower = np.bincount(call, weights=tok, minlength=n_calls) * bpt
    return link_sums(ssd, lower, float(seg_tok[out.tier == NOWHERE].sum()) * bpt, cfg)


def link_sums(ssd: np.ndarray, lower: np.ndarray, created: float, cfg: ServingConfig) -> dict:
    """Totals from per-call SSD-load and DRAM|SSD-load bytes and the created bytes: a call's
    transfer time is the slower of its two loads."""
    costs = link_costs(cfg)
    t = np.maximum(ssd / costs["ssd_to_dram"][0], lower / costs["dram_to_hbm"][0])
    return link_totals(float(ssd.sum()), float(lower.sum()), float(t.sum()), created, costs)


def link_totals(ssd: float, lower: float, time_s: float, created: float, costs: dict) -> dict:
    """``link_sums``' row from its sums: SSD-load and DRAM|SSD-load bytes, transfer time and
    created bytes (written down both links, write-through); ``costs``: ``link_costs``."""
    sums = {"ssd_to_dram": ssd, "dram_to_hbm": lower, "hbm_to_dram": created, "dram_to_ssd": created}  # fmt: skip
    return {
        **{f"{k}_bytes": sums[k] for k in LINKS},
        "transfer_time_s": time_s,
        "transfer_energy_j": float(sum(sums[k] * costs[k][1] for k in LINKS)),
    }
