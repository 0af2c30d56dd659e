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
    finish_frame,
    link_costs,
    per_call_frame,
    traffic_over_time,
)
from agentx.traces.io import Trace

TIER_NAMES = ("hbm", "dram", "ssd")
# trace columns only the KV model reads (pricing and calls.parquet never do)
# calls per batch of a streaming replay's chain kernel, each put at its rows while the next runs
ROW_BATCH = 1 << 19
KV_ONLY_COLUMNS = ("is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes")


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
    lazy: bool = False,
    beside=None,
) -> KvResult:
    """Where each call's reused prefix is found, and what moving it costs (docs/kv-tiers.md).

    A stream of more than ``max_refs`` block references is re-blocked to the smallest
    power-of-two multiple of the block size that fits (``summary["block_size_note"]``).
    ``lazy`` (the streaming replay): where the chain kernel runs, ``per_call`` is an
    ``agentx.kv.rows.RowOutcome`` whose ``slice`` makes each partition's rows, and
    ``summary`` is complete once every row was sliced (agentx/kv/rows.py); the trace is
    handed over: ``KV_ONLY_COLUMNS`` are dropped from ``trace.calls`` (in place) once the
    geometry is made, before the kernel runs. ``beside``: called once, when the chain
    kernel is about to run on one core (or at once where there is none), for a caller that
    starts work of its own on the other (the kernel lets go of the GIL); with the calls' time
    order (the geometry's ``row``, ties by session and call) where the kernel has one, else
    with None."""
    caps = capacities or capacities_for(cfg)
    bpt = cfg.kv_bytes_per_token
    if policy == "lru" and write_policy == "write-through" and not has_hashes(trace):
        # the common case needs no block stream: chain positions are the blocks (kv/chains.py)
        with memory_guard(max_refs):
            return _replay_chains(trace, cfg, caps, block_size_tokens, share_prefix, max_refs, lazy, beside)  # fmt: skip
    if beside is not None:
        beside(None)
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


def has_hashes(trace: Trace) -> bool:
    df = trace.calls
    return df.height > 0 and bool(df["block_hashes"].is_not_null().all())


def _replay_chains(trace, cfg, caps, block_size_tokens, share_prefix, max_refs, lazy=False, beside=None):  # fmt: skip
    from agentx.kv.blocks import geometry
    from agentx.kv.chains import chain_outcomes

    g = geometry(trace, block_size_tokens, share_prefix=share_prefix, max_refs=max_refs)
    if lazy:  # handed over by the streaming replay: what only the geometry read goes now
        for c in KV_ONLY_COLUMNS:
            if c in trace.calls.columns:
                trace.calls.drop_in_place(c)
    if beside is not None:
        beside(g.row)
    # a streaming replay takes the outcome by rows: put there beside the kernel (chains.py)
    by_row = ROW_BATCH if lazy else 0
    sums = np.zeros(7, np.int64)
    acc, glob = chain_outcomes(g, caps.tokens(cfg.kv_bytes_per_token), by_row=by_row, sums=sums)
    g = _ChainFacts.of(g)  # the per-call geometry goes before the frame comes (10 M-call peak)
    if lazy:
        from agentx.kv.rows import LazyKvResult, RowOutcome

        counts, geo = _chain_counts(g, acc, glob, sums)
        rows = RowOutcome(acc, trace.calls.height, cfg,
                          lambda sums: _summary(counts, sums, geo, caps, "lru", "write-through", cfg))  # fmt: skip
        return LazyKvResult(rows)
    return chains_result(trace, cfg, caps, g, acc, glob, sums)


def chains_result(trace, cfg, caps, g, acc, glob, sums=None) -> KvResult:
    """The per-call frame and summary from the chain kernel's outputs (also kv-curve's);
    ``g``: the Geometry, or its ``_ChainFacts``."""
    from agentx.kv.rows import acc_columns

    bpt = cfg.kv_bytes_per_token
    counts, geo = _chain_counts(g, acc, glob, sums)
    # the time order names every trace row once
    per_call = finish_frame(acc_columns(acc), g.row, trace.calls.height, cfg, bpt, every_row=True)
    return KvResult(per_call, _summary(counts, per_call, geo, caps, "lru", "write-through", cfg))


def _chain_counts(g, acc, glob, sums=None) -> tuple[dict, _GeoView]:
    """The summary's counters (exact integers) and geometry facts, from the kernel's outputs;
    ``sums``: each ``acc`` column's sum, when made already (``chain_outcomes``)."""
    tok = acc.sum(axis=0, dtype=np.int64) if sums is None else sums
    counts = {
        "hits": {
            t: {"blocks": int(glob[i]), "tokens": int(tok[i])} for i, t in enumerate(TIER_NAMES)
        },
        "recompute": {"blocks": int(glob[3]), "tokens": int(tok[3])},
        "distinct_blocks": int(glob[4]),
        "block_references": g.n_refs,
        "pinned_tokens": 0,
    }
    return counts, _GeoView(g.bs, g.note, _Totals.of(g.n_in), _Totals.of(g.reused))


@dataclass(frozen=True)
class _ChainFacts:
    """What ``chains_result`` reads of a geometry: no per-call column but the time order."""

    bs: int
    note: str
    n_in: _Totals
    reused: _Totals
    row: np.ndarray
    n_refs: int

    @classmethod
    def of(cls, g) -> _ChainFacts:
        return cls(g.bs, g.note, _Totals.of(g.n_in), _Totals.of(g.reused), g.row, g.n_refs)


def summarize(
    out: Outcome,
    per_call: pl.DataFrame,
    stream: BlockStream,
    caps: TierCapacities,
    policy: str,
    write_policy: str,
    cfg: ServingConfig,
) -> dict:
    rd = out.is_read
    tiers = {}
    for name, t in zip(TIER_NAMES, (HBM, DRAM, SSD), strict=True):
        sel = rd & (out.tier == t)
        tiers[name] = {"blocks": int(out.n[sel].sum()), "tokens": int(out.read_tokens[sel].sum())}
    miss = rd & (out.tier == NOWHERE)
    counts = {
        "hits": tiers,
        "recompute": {"blocks": int(out.n[miss].sum()), "tokens": int(out.read_tokens[miss].sum())},
        "distinct_blocks": int((out.block_weight > 0).sum()),
        "block_references": stream.n_refs,
        "pinned_tokens": out.pinned_tokens,
    }
    geo = _GeoView(
        stream.block_size_tokens, stream.block_size_note, stream.input_tokens, stream.reused_tokens
    )
    return _summary(counts, per_call, geo, caps, policy, write_policy, cfg)


@dataclass(frozen=True)
class _GeoView:
    bs: int
    note: str
    n_in: np.ndarray
    reused: np.ndarray


@dataclass(frozen=True)
class _Totals:
    """A per-call column reduced to what ``_summary`` asks of it: its length and its sum."""

    n: int
    total: int

    @classmethod
    def of(cls, a) -> _Totals:
        return a if isinstance(a, _Totals) else cls(len(a), int(a.sum()))

    def __len__(self) -> int:
        return self.n

    def sum(self) -> int:
        return self.total


def _summary(counts, per_call, g, caps, policy, write_policy, cfg) -> dict:
    bytes_per_token = cfg.kv_bytes_per_token
    costs = link_costs(cfg)  # each link alone, at the bandwidth one call gets
    reused = int(g.reused.sum())
    hit_tokens = sum(v["tokens"] for v in counts["hits"].values())
    return {
        "policy": policy,
        "write_policy": write_policy,
        "block_size_tokens": g.bs,
        "block_size_note": g.note,
        "kv_bytes_per_token": float(bytes_per_token),
        "capacities": caps.as_dict(),
        "calls": len(g.n_in),
        "block_references": counts["block_references"],
        "distinct_blocks": counts["distinct_blocks"],
        "input_tokens": int(g.n_in.sum()),
        "reused_tokens": reused,
        "hits": counts["hits"],
        "recompute": counts["recompute"],
        "hit_ratio": hit_tokens / reused if reused else 0.0,
        "bytes": {link: float(per_call[f"kv_{link}_bytes"].sum()) for link in LINKS},
        "link_time_s": {k: float(per_call[f"kv_{k}_bytes"].sum()) / costs[k][0] for k in LINKS},
        "transfer_time_s": float(per_call["kv_transfer_time_s"].sum()),
        "transfer_energy_j": float(per_call["kv_transfer_energy_j"].sum()),
        # what a call's reload time and energy are made of: agentx sql derives the per-call
        # kv_transfer_* columns a --calls summary file leaves out from them (analysis.derived)
        "links": {k: {"bytes_per_s": costs[k][0], "j_per_byte": costs[k][1]} for k in LINKS},
        "pinned_shared_bytes": float(counts["pinned_tokens"] * bytes_per_token),
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
