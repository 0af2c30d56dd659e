"""A fleet: R replicas of one serving configuration behind a router (docs/fleet.md).

Public API::

    plan_fleet(trace, cfg, replicas, router, ...) -> (partitions, manifest)
        the routing pass: an assignment column, then one partition per replica.
    replay_fleet(trace_or_dataset, cfg, replicas=..., router=..., engine="local"|"ray")
        -> {"tables": {...}, "summary": {...}}: every replica replayed with its own KV tiers
        (agentx.fleet.replica.replay_replica), merged (agentx.fleet.merge).
    replicas_for(cfg, gpus_total) -> R

Routing needs global state (who cached what, who is busy) so it runs once over the whole
trace; replicas are then independent, which is what lets them run as separate Ray tasks.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.errors import InputError, UsageError
from agentx.fleet.partition import Partition, is_dataset, read_dataset, split
from agentx.fleet.replica import ReplicaOptions
from agentx.fleet.router import ROUTERS, arrival_order, route
from agentx.fleet.store import SharedStore, store_tokens
from agentx.traces.io import Trace
from agentx.traces.schema import META_BLOCK_SIZE

DEFAULT_ROUTER = "session"
ROUTING_KEYS = ("router", "balance_eps", "overlap_weight", "router_block_size_tokens", "store")


def replicas_for(cfg: ServingConfig, gpus_total: int) -> int:
    """As many whole replicas of ``cfg`` as ``gpus_total`` GPUs hold."""
    r = gpus_total // cfg.gpus
    if r < 1:
        raise UsageError(
            f"--gpus-total {gpus_total} holds no replica of {cfg.gpus} GPUs; give at least {cfg.gpus}"
        )
    return r


def busy_times(trace: Trace, cfg: ServingConfig) -> np.ndarray:
    """Fill + decode latency of each call on one replica (as priced with the trace's reuse)."""
    from agentx.replay.replay import CALL_COLUMNS, price_calls

    cols, _ = price_calls(cfg, trace.calls)
    return cols[CALL_COLUMNS.index("ttft_s")] + cols[CALL_COLUMNS.index("decode_latency_s")]


def plan_fleet(
    trace: Trace,
    cfg: ServingConfig,
    replicas: int,
    router: str = DEFAULT_ROUTER,
    *,
    eps: float = 0.25,
    overlap_weight: float = 1.0,
    store: SharedStore | None = None,
) -> tuple[list[Partition], dict]:
    """Route every call, then split ``trace`` into one partition per replica."""
    if trace.calls.height == 0:
        raise InputError("<trace>", "expected at least one call to route, got none")
    busy = busy_times(trace, cfg) if router in ("kv-aware", "least-loaded") else None
    block = int(trace.meta.get(META_BLOCK_SIZE) or 64)
    assignment = route(
        trace.calls, replicas, router, busy_s=busy, eps=eps, overlap_weight=overlap_weight,
        block_size_tokens=block,
    )  # fmt: skip
    order = arrival_order(trace.calls)
    held = store_tokens(trace.calls, order, cfg.kv_bytes_per_token, store)
    t = trace.calls.get_column("t_start_s")
    manifest = {
        "sessions": int(trace.calls.get_column("session_id").n_unique()),
        "t_start_min_s": float(t.min()),
        "t_start_max_s": float(t.max()),
        "replicas": replicas,
        "router": router,
        "balance_eps": eps,
        "overlap_weight": overlap_weight,
        "router_block_size_tokens": block,
        "store": None if store is None else store.as_dict(),
    }
    return split(trace, assignment, held, replicas), manifest


def replay_fleet(
    source: Trace | os.PathLike | str,
    cfg: ServingConfig,
    *,
    replicas: int | None = None,
    router: str | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    eps: float = 0.25,
    overlap_weight: float = 1.0,
    store: SharedStore | None = None,
    options: ReplicaOptions | None = None,
    fn=None,
    quiet: bool = True,
) -> dict:
    """Replay a trace (routed here) or a partitioned dataset (routed by ``agentx partition``)
    on a fleet; returns merged tables and summary."""
    from agentx.fleet.engines import run
    from agentx.fleet.merge import bucket_for, merge
    from agentx.fleet.replica import replay_replica

    if isinstance(source, Trace):
        if router is not None and router not in ROUTERS:
            route(source.calls.head(0), 1, router)  # the unknown-name error
        parts, manifest = plan_fleet(
            source, cfg, replicas or 1, router or DEFAULT_ROUTER, eps=eps,
            overlap_weight=overlap_weight, store=store,
        )  # fmt: skip
    elif is_dataset(source):
        manifest, parts = read_dataset(source)
        for name, given in (("--replicas", replicas), ("--router", router)):
            have = manifest[name.removeprefix("--")]
            if given is not None and given != have:
                raise UsageError(f"{name} {given} differs from the dataset's {have} ({source})")
        if store is not None and store.as_dict() != manifest.get("store"):
            # which calls the store can serve is fleet-wide state, fixed by the routing pass
            raise UsageError(
                f"the shared store is set when partitioning; give --store-gb/--store-gbps to "
                f"agentx partition, not to replay ({source})"
            )
        if manifest.get("store"):
            store = SharedStore(**manifest["store"])
    else:
        raise UsageError(f"{source}: expected a trace or a partitioned dataset folder")
    span = manifest["t_start_max_s"] - manifest["t_start_min_s"]
    opts = dataclasses.replace(options or ReplicaOptions(), bucket_s=bucket_for(span))
    if store is not None:
        opts = dataclasses.replace(opts, store=store)
    partials = run(
        engine, parts, cfg, opts, address=ray_address, fn=fn or replay_replica, quiet=quiet
    )
    # the same from a trace or from its dataset
    routing = {k: manifest.get(k) for k in (*ROUTING_KEYS, "sessions")}
    return merge(partials, manifest["replicas"], routing)


__all__ = [
    "DEFAULT_ROUTER",
    "ROUTERS",
    "SharedStore",
    "plan_fleet",
    "replay_fleet",
    "replicas_for",
    "route",
]
