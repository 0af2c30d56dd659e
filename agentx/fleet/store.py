"""A fleet-wide shared KV store for the prefix every session of a client shares (SEED-7).

Tool definitions and system prompts are the same bytes in every session with the same
``shared_prefix_tokens``; a store such as Mooncake Store or LMCache's shared backend keeps them
once for the whole fleet instead of once per replica. Model: the store admits each distinct
shared prefix at its first use anywhere in the fleet (arrival order) while its capacity lasts,
and never evicts it (pinned, as those stores pin hot prefixes). A later call, on any replica,
whose replica would recompute part of its shared prefix loads that part from the store over
its replica's link instead. Only the replica's misses change; hits in its own tiers stay.

Costs: the load is on the call's critical path and overlaps the replica's own DRAM/SSD loads
(time = max of the links); energy per byte is the host link's (no NIC energy in the catalog,
so a lower bound). The HBM a replica saves by not holding the prefix is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from agentx.errors import UsageError

STORE_COLUMNS = ("kv_store_hit_tokens", "kv_store_to_hbm_bytes")


@dataclass(frozen=True)
class SharedStore:
    capacity_bytes: float
    link_bytes_per_s: float  # per replica link

    def __post_init__(self) -> None:
        for name, v in (
            ("--store-gb", self.capacity_bytes),
            ("--store-gbps", self.link_bytes_per_s),
        ):
            if not (v > 0 and math.isfinite(v)):
                raise UsageError(f"{name} must be a positive number, got {v}")

    def as_dict(self) -> dict:
        return asdict(self)


def store_tokens(
    calls: pl.DataFrame, order: np.ndarray, bytes_per_token: float, store: SharedStore | None
) -> np.ndarray:
    """Per trace row: shared-prefix tokens the store holds for the call (0 for the call that
    first brings a prefix to the fleet, for prefixes that did not fit, or with no store)."""
    shared = calls.get_column("shared_prefix_tokens").to_numpy().astype(np.int64)
    out = np.zeros(calls.height, np.int64)
    if store is None or calls.height == 0:
        return out
    s = shared[order]
    values, first = np.unique(s, return_index=True)  # each prefix's first arrival
    by_arrival = np.argsort(first, kind="stable")
    values, first = values[by_arrival], first[by_arrival]
    keep = values > 0
    values, first = values[keep], first[keep]
    fits = np.cumsum(values * bytes_per_token) <= store.capacity_bytes
    stored = values[fits]
    hold = np.isin(s, stored)
    hold[first[fits]] = False  # the first use computes it (and writes it to the store)
    out[order] = np.where(hold, s, 0)
    return out


def apply_store(
    per_call: pl.DataFrame,
    eligible: np.ndarray,
    store: SharedStore,
    bytes_per_token: float,
    j_per_byte: float,
) -> pl.DataFrame:
    """``per_call`` (agentx.kv columns) with the store's loads moved out of the recomputes."""
    rec = per_call.get_column("kv_recompute_tokens").to_numpy()
    hit = np.minimum(rec, eligible).astype(np.int64)
    nbytes = hit * bytes_per_token
    time_s = np.maximum(
        per_call.get_column("kv_transfer_time_s").to_numpy(), nbytes / store.link_bytes_per_s
    )
    return per_call.with_columns(
        pl.Series("kv_recompute_tokens", rec - hit),
        pl.Series("kv_transfer_time_s", time_s),
        pl.col("kv_transfer_energy_j") + pl.Series(nbytes * j_per_byte),
        pl.Series("kv_store_hit_tokens", hit),
        pl.Series("kv_store_to_hbm_bytes", nbytes.astype(np.float64)),
    )
