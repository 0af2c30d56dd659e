"""``agentx partition``: route a trace over a fleet and write one folder per replica."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import (
    catalog_option,
    emit_json,
    hw_option,
    json_option,
    model_option,
    quiet_option,
    trace_argument,
)
from agentx.cli._fleet import fleet_size, routing_options, store_of


@click.command(
    "partition",
    epilog="Example: agentx partition w.parquet --hw gb200 --replicas 64 --router kv-aware -o w-64/ "
    "&& agentx replay w-64/ --hw gb200 --engine ray",
)
@trace_argument
@hw_option
@model_option()
@click.option("--gpus", type=int, help="GPUs per replica (default: one node; 32 on NVL72).")
@routing_options
@catalog_option
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder of the partitioned dataset (replica=K/part-0.parquet + fleet.json).",
)
@json_option
@quiet_option
def command(
    trace,
    hw,
    model_name,
    gpus,
    replicas,
    gpus_total,
    router,
    balance_eps,
    overlap_weight,
    store_gb,
    store_gbps,
    catalog_files,
    out_dir,
    as_json,
    quiet,
) -> None:
    """Route every call of TRACE to a replica and write the hive-style partitioned dataset.

    Each replica's calls go to OUT/replica=K/part-0.parquet, so a Ray task (or any engine)
    reads only its own; the kv-aware and least-loaded routers price calls on --hw to know
    how long each keeps a replica busy. Replay it with 'agentx replay OUT --hw … --engine ray'.
    The session router without a store streams TRACE in batches of whole sessions (memory
    independent of its calls); the others hold the whole trace in memory.
    """
    from agentx.catalog import load_catalog
    from agentx.errors import UsageError
    from agentx.fleet import DEFAULT_ROUTER, plan_fleet
    from agentx.fleet.partition import write_dataset
    from agentx.fleet.stream import STREAMED_ROUTERS, partition_stream
    from agentx.fmt import num
    from agentx.io import ensure_distinct
    from agentx.replay.config import make_config
    from agentx.traces.io import read_trace

    cat = load_catalog(catalog_files)
    cfg = make_config(cat, hw, model_name, gpus=gpus)
    n = fleet_size(cfg, replicas, gpus_total)
    if n is None:
        raise UsageError("give --replicas or --gpus-total")
    ensure_distinct(out_dir, [trace, *catalog_files])
    router = router or DEFAULT_ROUTER
    store = store_of(store_gb, store_gbps)
    extra = {"hw": hw, "model": model_name, "gpus_per_replica": cfg.gpus}
    if router in STREAMED_ROUTERS and store is None:  # bounded memory at any trace size
        manifest = partition_stream(
            trace, out_dir, n, extra, eps=balance_eps, overlap_weight=overlap_weight,
            inputs=[trace, *catalog_files],
        )  # fmt: skip
        sizes = [manifest["calls_per_replica"][str(r)] for r in range(n)]
    else:  # routing state across sessions (or the store): the whole trace in memory
        parts, manifest = plan_fleet(
            read_trace(trace), cfg, n, router, eps=balance_eps, overlap_weight=overlap_weight,
            store=store,
        )  # fmt: skip
        write_dataset(parts, out_dir, {**manifest, **extra}, inputs=[trace, *catalog_files])
        sizes = [p.calls.height for p in parts]
    if as_json:
        emit_json({"output": str(out_dir), "replicas": len(sizes), "router": manifest.get("router"),
                   "calls": sum(sizes), "calls_per_replica": sizes})  # fmt: skip
    elif not quiet:
        click.echo(
            f"wrote {out_dir}: {len(sizes)} partitions, {num(sum(sizes))} calls "
            f"({num(min(sizes))}–{num(max(sizes))} per replica)",
            err=True,
        )
