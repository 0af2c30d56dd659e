"""Routing a trace over R replicas: one pass in arrival order writing a replica per call.

Policies (docs/fleet.md):

* ``round-robin``: call k in arrival order goes to replica k mod R (vectorized).
* ``session``: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam,
  "Consistent Hashing with Bounded Loads", SODA 2018): a session hashes onto a ring of virtual
  nodes and takes the first replica clockwise whose load is below ceil((1 + eps) m / R), m the
  sessions placed so far; all its calls follow it (affinity keeps its prefix cache warm).
* ``kv-aware``: NVIDIA Dynamo's KV router cost (docs.nvidia.com/dynamo, "Router Design"):
  cost_r = overlap_weight × prefill blocks_r + active decode blocks_r, where prefill blocks
  are the call's blocks not covered by the prefix cached on r; lowest cost wins (Dynamo's
  temperature 0), ties to the longer cached prefix, then to the replica idle longest.
* ``least-loaded``: fewest calls in flight, ties to the replica idle longest.

In-flight work needs each call's busy time; the caller passes the priced fill + decode
latency of one replica (agentx.replay). The router's view of what a replica caches is
unbounded (no evictions): it remembers, per (session, agent) chain and per shared-prefix
group, the longest prefix it left on each replica, as Dynamo's indexer does from KV events
before any removal. What replicas really hit is decided later by each replica's own tiers.
"""

from __future__ import annotations

import hashlib

import numba as nb
import numpy as np
import polars as pl

from agentx.errors import CapacityError, UnknownNameError, UsageError

ROUTERS = ("round-robin", "session", "kv-aware", "least-loaded")
ORDER = ("t_start_s", "session_id", "call_index")  # arrival order, as agentx.kv.blocks
VNODES = 64  # virtual nodes per replica on the hash ring
MAX_CHAIN_CELLS = 400_000_000  # chains × replicas of the kv-aware view (int32: 1.6 GB)


def arrival_order(calls: pl.DataFrame) -> np.ndarray:
    """Trace rows in arrival order (ties by session and call index)."""
    return (
        calls.select(ORDER)
        .with_row_index("_row")
        .sort(list(ORDER), maintain_order=True)
        .get_column("_row")
        .to_numpy()
        .astype(np.int64)
    )


def stable_hash(keys: list[str]) -> np.ndarray:
    """64-bit hashes that do not change across processes, versions or machines."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little")
            for k in keys
        ],
        dtype=np.uint64,
    )


def route(
    calls: pl.DataFrame,
    replicas: int,
    policy: str,
    *,
    busy_s: np.ndarray | None = None,
    eps: float = 0.25,
    overlap_weight: float = 1.0,
    block_size_tokens: int = 64,
) -> np.ndarray:
    """Replica (int32, 0..R-1) of every trace row under ``policy``."""
    check_routing(replicas, policy, eps)
    n = calls.height
    order = arrival_order(calls)
    out = np.empty(n, np.int32)
    if policy == "round-robin" or replicas == 1:
        out[order] = (np.arange(n) % replicas).astype(np.int32)
        return out
    if policy == "session":
        sid = calls.get_column("session_id")
        first = sid.gather(order).unique(maintain_order=True).to_list()  # by first arrival
        loads = np.zeros(replicas, np.int64)
        owner = bounded_load_assign(stable_hash(first), replicas, eps, loads)
        code = pl.Series(first).to_frame("session_id").with_row_index("_k")
        k = calls.select("session_id").join(code, on="session_id", how="left")["_k"].to_numpy()
        return owner[k].astype(np.int32)
    if busy_s is None:
        raise UsageError(f"router '{policy}' needs the calls' busy times")
    t0 = calls.get_column("t_start_s").to_numpy().astype(np.float64)
    t1 = t0 + np.asarray(busy_s, np.float64)
    finish = np.argsort(t1, kind="stable")
    if policy == "least-loaded":
        _least_loaded(order, finish, t0, t1, replicas, out)
        return out
    b = max(int(block_size_tokens), 1)
    chain = (
        calls.select(pl.struct("session_id", "agent_id").rank("dense") - 1)
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )
    n_chain = int(chain.max()) + 1 if n else 0
    if n_chain * replicas > MAX_CHAIN_CELLS:
        raise CapacityError(
            f"kv-aware routing of {n_chain:,} session chains over {replicas} replicas needs "
            f"{n_chain * replicas * 4 / 1e9:.1f} GB; use --router session or fewer replicas"
        )
    shared = calls.get_column("shared_prefix_tokens").to_numpy().astype(np.int64)
    group = np.unique(shared, return_inverse=True)[1].astype(np.int64).reshape(-1)
    col = lambda c: calls.get_column(c).to_numpy().astype(np.int64)  # noqa: E731
    _kv_aware(
        order, finish, t0, t1, replicas, col("input_tokens"), col("output_tokens"),
        col("reused_prefix_tokens"), shared, chain, n_chain, group, b, float(overlap_weight), out,
    )  # fmt: skip
    return out


def check_routing(replicas: int, policy: str, eps: float) -> None:
    if policy not in ROUTERS:
        raise UnknownNameError("router", policy, ROUTERS)
    if replicas < 1:
        raise UsageError(f"--replicas must be at least 1, got {replicas}")
    if eps < 0:
        raise UsageError(f"--balance-eps must be non-negative, got {eps}")


def bounded_load_assign(
    keys: np.ndarray, replicas: int, eps: float, loads: np.ndarray
) -> np.ndarray:
    """Replica of each key (in arrival order) by consistent hashing with bounded loads;
    ``loads`` (per replica, updated) counts keys placed."""
    vn = np.arange(replicas * VNODES, dtype=np.int64)
    ring_h = stable_hash([f"replica-{v // VNODES}-{v % VNODES}" for v in vn])
    by = np.argsort(ring_h, kind="stable")
    ring, owner = ring_h[by], (vn[by] // VNODES).astype(np.int64)
    start = np.searchsorted(ring, keys, side="left") % ring.size
    return _bounded(start, owner, replicas, eps, loads)


@nb.njit(cache=True)
def _bounded(start, owner, replicas, eps, loads):  # pragma: no cover (compiled)
    out = np.empty(start.size, np.int64)
    for m in range(start.size):
        cap = np.ceil((1.0 + eps) * (m + 1) / replicas)
        j = start[m]
        while loads[owner[j]] + 1 > cap:
            j = (j + 1) % owner.size
        out[m] = owner[j]
        loads[owner[j]] += 1
    return out


@nb.njit(cache=True)
def _least_loaded(order, finish, t0, t1, replicas, out):  # pragma: no cover (compiled)
    inflight = np.zeros(replicas, np.int64)
    last = np.full(replicas, -1, np.int64)  # arrival index of the replica's last call
    done = np.zeros(order.size, np.bool_)
    j = 0
    for i in range(order.size):
        c = order[i]
        while j < finish.size and t1[finish[j]] <= t0[c] and done[finish[j]]:
            inflight[out[finish[j]]] -= 1
            j += 1
        best = 0
        for r in range(1, replicas):
            if inflight[r] < inflight[best] or (
                inflight[r] == inflight[best] and last[r] < last[best]
            ):
                best = r
        out[c] = best
        inflight[best] += 1
        last[best] = i
        done[c] = True


@nb.njit(cache=True)
def _kv_aware(
    order, finish, t0, t1, replicas, inp, outp, reused, shared, chain, n_chain, group, b, w, out
):  # pragma: no cover (compiled)
    active = np.zeros(replicas, np.int64)  # decode blocks of calls in flight
    last = np.full(replicas, -1, np.int64)
    held = np.zeros((n_chain, replicas), np.int64)  # prefix tokens a chain left on r
    seen = np.zeros((group.max() + 1 if group.size else 1, replicas), np.int64)
    done = np.zeros(order.size, np.bool_)
    j = 0
    for i in range(order.size):
        c = order[i]
        while j < finish.size and t1[finish[j]] <= t0[c] and done[finish[j]]:
            f = finish[j]
            active[out[f]] -= (inp[f] + outp[f] + b - 1) // b
            j += 1
        blocks = (inp[c] + b - 1) // b
        best, best_cost, best_ov = -1, 0.0, -1
        for r in range(replicas):
            ov = min(reused[c], max(held[chain[c], r], seen[group[c], r]))
            cost = w * (blocks - ov // b) + active[r]
            if (
                best < 0
                or cost < best_cost
                or (
                    cost == best_cost and (ov > best_ov or (ov == best_ov and last[r] < last[best]))
                )
            ):
                best, best_cost, best_ov = r, cost, ov
        out[c] = best
        active[best] += (inp[c] + outp[c] + b - 1) // b
        last[best] = i
        held[chain[c], best] = max(held[chain[c], best], inp[c] + outp[c])
        seen[group[c], best] = max(seen[group[c], best], shared[c])
        done[c] = True
