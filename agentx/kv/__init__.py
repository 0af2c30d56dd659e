"""KV cache tiers (SEED-4, 5, 7, 12, 13): immutable blocks placed in HBM, host DRAM and SSD.

Public API::

    replay_tiers(trace, cfg, capacities=None, policy="lru") -> KvResult
        per-call hits per tier, recompute tokens, bytes per link, transfer time and energy
        (``KvResult.per_call``, trace row order) and ``KvResult.summary`` for summary.json.
    kv_curve(trace, cfg, capacities_bytes=None) -> pl.DataFrame
        hit ratio and bytes per link against each tier's capacity, from one stack pass.
    capacities_for(cfg, hbm_bytes=…, dram_bytes=…, ssd_bytes=…) -> TierCapacities

See docs/kv-tiers.md for the block model, the algorithm and every assumption.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import CapacityError
from agentx.kv.blocks import MAX_REFS, BlockStream, build_blocks
from agentx.kv.policies import DRAM, HBM, NOWHERE, POLICIES, SSD, Outcome, outcome
from agentx.kv.tiers import (
    LINKS,
    PER_CALL,
    WRITE_POLICIES,
    TierCapacities,
    capacities_for,
    link_costs,
    per_call_frame,
    traffic_over_time,
)
from agentx.traces.io import Trace

TIER_NAMES = ("hbm", "dram", "ssd")


@dataclass(frozen=True)
class KvResult:
    per_call: pl.DataFrame  # PER_CALL columns, one row per trace row, trace order
    summary: dict  # JSON-able: summary.json["kv_tiers"]


def replay_tiers(
    trace: Trace,
    cfg: ServingConfig,
    capacities: TierCapacities | None = None,
    policy: str = "lru",
    *,
    block_size_tokens: int | None = None,
    write_policy: str = "write-through",
    share_prefix: bool = True,
    max_refs: int = MAX_REFS,
) -> KvResult:
    """Where each call's reused prefix is found, and what moving it costs (docs/kv-tiers.md).

    A stream of more than ``max_refs`` block references is re-blocked to the smallest
    power-of-two multiple of the block size that fits (``summary["block_size_note"]``)."""
    caps = capacities or capacities_for(cfg)
    bpt = cfg.kv_bytes_per_token
    with memory_guard(max_refs):
        stream = build_blocks(
            trace, block_size_tokens, share_prefix=share_prefix, max_refs=max_refs
        )
        out = outcome(policy, stream, caps.tokens(bpt))
        per_call = per_call_frame(out, stream, trace.calls.height, bpt, cfg, write_policy)
    return KvResult(per_call, summarize(out, per_call, stream, caps, policy, write_policy, cfg))


@contextmanager
def memory_guard(max_refs: int):
    """A budget too large for this machine's memory: one line with the way out, not a trace."""
    try:
        yield
    except MemoryError:
        raise CapacityError(
            f"out of memory replaying up to {max_refs:,} KV block references; "
            "lower --max-block-refs (or raise --block-size-tokens)"
        ) from None


def summarize(
    out: Outcome,
    per_call: pl.DataFrame,
    stream: BlockStream,
    caps: TierCapacities,
    policy: str,
    write_policy: str,
    cfg: ServingConfig,
) -> dict:
    bytes_per_token = cfg.kv_bytes_per_token
    costs = link_costs(cfg)  # each link alone, at the bandwidth one call gets
    rd = out.is_read
    reused = int(stream.reused_tokens.sum())
    tiers = {}
    for name, t in zip(TIER_NAMES, (HBM, DRAM, SSD), strict=True):
        sel = rd & (out.tier == t)
        tiers[name] = {"blocks": int(out.n[sel].sum()), "tokens": int(out.read_tokens[sel].sum())}
    miss = rd & (out.tier == NOWHERE)
    hit_tokens = sum(v["tokens"] for v in tiers.values())
    return {
        "policy": policy,
        "write_policy": write_policy,
        "block_size_tokens": stream.block_size_tokens,
        "block_size_note": stream.block_size_note,
        "kv_bytes_per_token": float(bytes_per_token),
        "capacities": caps.as_dict(),
        "calls": stream.n_calls,
        "block_references": stream.n_refs,
        "distinct_blocks": int((out.block_weight > 0).sum()),
        "input_tokens": int(stream.input_tokens.sum()),
        "reused_tokens": reused,
        "hits": tiers,
        "recompute": {"blocks": int(out.n[miss].sum()), "tokens": int(out.read_tokens[miss].sum())},
        "hit_ratio": hit_tokens / reused if reused else 0.0,
        "bytes": {link: float(per_call[f"kv_{link}_bytes"].sum()) for link in LINKS},
        "link_time_s": {k: float(per_call[f"kv_{k}_bytes"].sum()) / costs[k][0] for k in LINKS},
        "transfer_time_s": float(per_call["kv_transfer_time_s"].sum()),
        "transfer_energy_j": float(per_call["kv_transfer_energy_j"].sum()),
        "pinned_shared_bytes": float(out.pinned_tokens * bytes_per_token),
    }


def kv_curve(
    trace: Trace,
    cfg: ServingConfig,
    capacities_bytes: np.ndarray | None = None,
    *,
    capacities: TierCapacities | None = None,
    block_size_tokens: int | None = None,
    policy: str = "lru",
    write_policy: str = "write-through",
    max_refs: int = MAX_REFS,
) -> pl.DataFrame:
    from agentx.kv.curve import curve

    return curve(
        trace,
        cfg,
        capacities_bytes,
        capacities=capacities,
        block_size_tokens=block_size_tokens,
        policy=policy,
        write_policy=write_policy,
        max_refs=max_refs,
    )[0]


__all__ = [
    "MAX_REFS",
    "PER_CALL",
    "POLICIES",
    "TIER_NAMES",
    "WRITE_POLICIES",
    "KvResult",
    "TierCapacities",
    "build_blocks",
    "capacities_for",
    "kv_curve",
    "replay_tiers",
    "traffic_over_time",
]
