"""Fleet options shared by ``agentx replay`` and ``agentx partition`` (docs/fleet.md)."""

from __future__ import annotations

import click

from agentx.errors import UsageError

ROUTER_HELP = (
    "How calls reach replicas: round-robin (per call), session (consistent hashing with "
    "bounded loads), kv-aware (Dynamo's cost: cached prefix vs load), least-loaded."
)


# agentx.fleet.router.ROUTERS, not imported: the fleet loads numba, which `agentx replay
# --help` would then import for its options; tests/test_fleet.py checks the two agree
ROUTERS = ("round-robin", "session", "kv-aware", "least-loaded")


def routing_options(f):
    """--replicas, --gpus-total, --router, --balance-eps, --overlap-weight, --store-gb/-gbps."""
    for opt in reversed(
        (
            click.option(
                "--replicas",
                type=int,
                default=None,
                help="Replicas of the serving configuration behind a router (a fleet).",
            ),
            click.option(
                "--gpus-total",
                type=int,
                default=None,
                help="GPUs of the fleet: replicas = whole replicas of --gpus that fit.",
            ),
            click.option(
                "--router",
                type=click.Choice(ROUTERS),
                default=None,
                help=ROUTER_HELP + "  [default: session]",
            ),
            click.option(
                "--balance-eps",
                type=float,
                default=0.25,
                show_default=True,
                help="session router: a replica holds at most ceil((1+eps) × mean) sessions.",
            ),
            click.option(
                "--overlap-weight",
                type=float,
                default=1.0,
                show_default=True,
                help="kv-aware router: weight of prefill blocks against decode blocks.",
            ),
            click.option(
                "--store-gb",
                type=float,
                default=None,
                help="Fleet-wide shared KV store for prefixes shared across sessions (GB).",
            ),
            click.option(
                "--store-gbps",
                type=float,
                default=50.0,
                show_default=True,
                help="Bandwidth of each replica's link to the shared store (GB/s).",
            ),
        )
    ):
        f = opt(f)
    return f


def engine_options(f):
    for opt in reversed(
        (
            click.option(
                "--engine",
                type=click.Choice(("local", "ray")),
                default="local",
                show_default=True,
                help="Run replicas in this process or as Ray tasks (pip install 'agentx[ray]').",
            ),
            click.option(
                "--ray-address",
                default=None,
                help="auto (this machine's cluster) or ray://host:port; none starts a local Ray.",
            ),
            click.option(
                "--max-block-refs",
                type=int,
                default=None,
                help="KV block references one instance (or one replica's task) holds at most "
                "(~16 B each with lru; default 300 M); past it the block size doubles until it fits.",
            ),
        )
    ):
        f = opt(f)
    return f


def fleet_size(cfg, replicas: int | None, gpus_total: int | None) -> int | None:
    from agentx.fleet import replicas_for

    if replicas is not None and gpus_total is not None:
        raise UsageError("give --replicas or --gpus-total, not both")
    if replicas is not None and replicas < 1:
        raise UsageError(f"--replicas must be at least 1, got {replicas}")
    return replicas_for(cfg, gpus_total) if gpus_total is not None else replicas


def store_of(store_gb: float | None, store_gbps: float):
    from agentx.fleet.store import SharedStore

    return None if store_gb is None else SharedStore(store_gb * 1e9, store_gbps * 1e9)


def print_fleet(summary: dict, replicas_df) -> None:
    from agentx.cli._common import print_table
    from agentx.fmt import num

    f = summary["fleet"]
    hr = "n/a" if f["hit_ratio"] is None else num(f["hit_ratio"])
    click.echo(
        f"{summary['model']} on {f['replicas']} × {summary['layout']} ({f['router']} router): "
        f"{num(summary['calls'])} calls, {num(summary['total_time_s'])} instance-s, "
        f"{num(summary['total_energy_j'])} J"
    )
    print_table(
        replicas_df.select(
            "replica", "calls", "sessions", "work_s", "load_share", "hit_ratio", "energy_j"
        )
    )
    click.echo(
        f"fleet hit ratio {hr}; imbalance (max/mean work) {num(f['imbalance'])}; "
        f"busiest replica {f['busiest_replica']}"
    )


def replay_fleet_command(
    trace,
    cfg,
    fleet: dict,
    *,
    kv_tiers,
    calls_mode,
    run_dir,
    as_json,
    quiet,
    catalog_version,
    hw,
    model,
):
    """``agentx replay`` on a fleet: route (or read a partitioned dataset), replay, merge."""
    import dataclasses

    from agentx.cli._common import emit_json
    from agentx.fleet import replay_fleet
    from agentx.fleet.partition import is_dataset
    from agentx.fleet.replica import ReplicaOptions
    from agentx.traces.io import read_trace

    replicas = fleet_size(cfg, fleet["replicas"], fleet["gpus_total"])
    source = trace if is_dataset(trace) else read_trace(trace)
    if not is_dataset(trace) and replicas is None:
        raise UsageError("a fleet needs --replicas or --gpus-total")
    result = replay_fleet(
        source, cfg, replicas=replicas, router=fleet["router"], engine=fleet["engine"],
        ray_address=fleet["ray_address"], eps=fleet["balance_eps"],
        overlap_weight=fleet["overlap_weight"], store=store_of(fleet["store_gb"], fleet["store_gbps"]),
        options=ReplicaOptions(
            kv_tiers=kv_tiers, calls=calls_mode, max_block_refs=fleet["max_block_refs"]
        ), quiet=quiet,
    )  # fmt: skip
    summary = result["summary"]
    for note in summary["fleet"]["kv_block_size_notes"]:
        if not quiet:
            click.echo(f"note: {note}", err=True)
    if calls_mode == "none":
        result["tables"].pop("calls", None)
    if run_dir is not None:
        from agentx.runs import write_run

        config = {
            "hw": hw, "model": model, "gpus": cfg.gpus, "tp": cfg.tp, "ep": cfg.ep, "pp": cfg.pp,
            "dp_attention": cfg.dp_attention, "weight_precision": cfg.weight_precision,
            "kv_precision": cfg.kv_precision, "decode_batch": cfg.decode_batch,
            "prefill_chunk_tokens": cfg.prefill_chunk_tokens, "routing_skew": cfg.routing_skew,
            "pools": cfg.pools, "kv_tiers": kv_tiers,
            "efficiencies": dataclasses.asdict(cfg.efficiencies),
            "fleet": {k: v for k, v in summary["fleet"].items() if k in (
                "replicas", "router", "balance_eps", "overlap_weight", "store")},
            "engine": fleet["engine"], "calls": calls_mode,
        }  # fmt: skip
        write_run(
            run_dir,
            "replay",
            result["tables"],
            summary=summary,
            inputs={"trace": trace},
            config=config,
            catalog_version=catalog_version,
        )
    if as_json:
        emit_json(summary)
    else:
        print_fleet(summary, result["tables"]["replicas"])
    if run_dir is not None and not quiet:
        click.echo(f"wrote {run_dir}", err=True)
