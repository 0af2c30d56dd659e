"""``agentx replay``: a trace through the four-stage cost model on one serving configuration."""

from __future__ import annotations

import contextlib
import dataclasses

import click

from agentx.cli._common import (
    catalog_option,
    emit_json,
    gpus_option,
    hw_option,
    json_option,
    load_scale_option,
    model_option,
    over_context_option,
    pools_option,
    precision_option,
    quiet_option,
    run_dir_option,
    say_over_context,
    serving_engine_config,
    serving_engine_option,
    trace_or_dataset_argument,
)
from agentx.cli._fleet import engine_options, routing_options
from agentx.cli._replay import _load, _priced_columns, _print, calls_options
from agentx.errors import UsageError
from agentx.progress import Phases

# What a replay imports after its read, numba first: agentx.warm.prepare imports them during it
KERNEL_MODULES = ("agentx.replay.chunks", "agentx.kv.chains", "agentx.kv.rows", "agentx.traces.transform")  # fmt: skip


@click.command(
    "replay",
    epilog="Example: agentx replay w.parquet --hw gb200 --model kimi-k2 --gpus 32 -o runs/gb200-32",
)
@trace_or_dataset_argument
@hw_option
@model_option()
@gpus_option()
@click.option(
    "--tp", type=int, help="Tensor-parallel ranks of attention (default 8, or 1 with DP attention)."
)
@click.option(
    "--ep", type=int, help="Expert-parallel ranks (default: all GPUs of a pipeline stage)."
)
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages.")
@click.option(
    "--dp-attention/--tp-attention",
    default=None,
    help="Data-parallel attention (default for MLA models).",
)
@precision_option("weight")
@precision_option("kv")
@click.option(
    "--decode-batch",
    type=int,
    default=None,
    help="Sequences per decode step of the instance.  [default: 64]",
)
@click.option(
    "--interactivity",
    type=float,
    default=None,
    metavar="TOKENS_PER_S",
    help="Target tokens/s per user: the decode batch becomes the largest that meets it at "
    "the trace's mean decode context and still fits in HBM (instead of --decode-batch).",
)
@click.option(
    "--prefill-chunk-tokens",
    type=int,
    default=8192,
    show_default=True,
    help="Tokens per fill forward pass.",
)
@click.option(
    "--routing-skew",
    type=float,
    default=0.0,
    show_default=True,
    help="Zipf exponent of expert routing (0 = uniform).",
)
@pools_option
@serving_engine_option
@click.option(
    "--kv-tiers/--no-kv-tiers",
    default=True,
    show_default=True,
    help="Place KV blocks in HBM/DRAM/SSD (agentx.kv): reloads and recomputes enter the fills.",
)
@load_scale_option
@over_context_option
@calls_options
@routing_options
@engine_options
@catalog_option
@run_dir_option("calls, stages, footprint, summary.json (a fleet adds replicas, replica_load)")
@json_option
@quiet_option
def command(
    trace,
    hw,
    model_name,
    gpus,
    tp,
    ep,
    pp,
    dp_attention,
    weight_precision,
    kv_precision,
    decode_batch,
    interactivity,
    prefill_chunk_tokens,
    routing_skew,
    pools,
    serving_engine,
    kv_tiers,
    load_scale,
    over_context,
    calls_mode,
    chunk_rows,
    replicas,
    gpus_total,
    router,
    balance_eps,
    overlap_weight,
    store_gb,
    store_gbps,
    engine,
    ray_address,
    max_block_refs,
    catalog_files,
    run_dir,
    as_json,
    quiet,
) -> None:
    """Price every call of TRACE on a system: time, energy, FLOPs, bytes per stage and HBM per GPU.

    Stages: prefill, midfill (fill onto a cached prefix), decode attention, decode experts.
    Column definitions: docs/metrics.md.
    """
    from agentx import warm
    from agentx.traces.partitions import trace_rows

    fleet = dict(replicas=replicas, gpus_total=gpus_total, router=router, balance_eps=balance_eps,
                 overlap_weight=overlap_weight, store_gb=store_gb, store_gbps=store_gbps,
                 engine=engine, ray_address=ray_address, max_block_refs=max_block_refs)  # fmt: skip
    fleet_run = (
        trace.is_dir()
        or any(fleet[k] is not None for k in ("replicas", "gpus_total", "router"))
        or (engine != "local" or store_gb is not None)
    )
    rows = 0 if fleet_run else trace_rows(trace) or 0
    # a first run of a small trace on a cold cache runs its kernels as Python (before they are
    # imported) while a process of its own compiles them for the next run (agentx/warm.py)
    interpreted = warm.interpret(rows)
    from agentx.catalog import load_catalog
    from agentx.replay.config import engine_note, make_config

    if decode_batch is not None and interactivity is not None:
        raise UsageError("give --decode-batch or --interactivity, not both")
    if run_dir is not None:  # refuse a bad -o before the work, not after
        from agentx.io import check_output

        check_output(run_dir, [trace, *catalog_files])
    cat = load_catalog(catalog_files)
    cfg = make_config(
        cat,
        hw,
        model_name,
        gpus=gpus,
        tp=tp,
        ep=ep,
        pp=pp,
        dp_attention=dp_attention,
        weight_precision=weight_precision,
        kv_precision=kv_precision,
        decode_batch=64 if decode_batch is None else decode_batch,
        prefill_chunk_tokens=prefill_chunk_tokens,
        routing_skew=routing_skew,
        pools=pools,
        engine=serving_engine,
    )
    if (note := engine_note(cfg)) and not quiet:
        click.echo(f"note: {note}", err=True)
    if fleet_run:
        from agentx.cli._fleet import replay_fleet_command

        if interactivity is not None:
            raise UsageError("--interactivity applies to one instance; not with a fleet")
        return replay_fleet_command(
            trace, cfg, fleet, kv_tiers=kv_tiers, calls_mode=calls_mode, run_dir=run_dir, as_json=as_json, quiet=quiet,
            catalog_version=cat.version, hw=hw, model=model_name,
        )  # fmt: skip
    phases = Phases("replay", 4, enabled=False if quiet else None)
    meta = {"agentx.run_kind": "replay", "agentx.table": "calls"}
    from agentx.traces.partitions import OUT_OF_CORE_ROWS

    # whether calls.parquet is written: pricing beside its writer thread leaves it the second
    # core (kernel_for), which the compile helper, started here, must know
    writes = run_dir is not None and calls_mode != "none"
    if interpreted:
        warm.compile_later(__name__, click.get_current_context().params)
    else:  # numba and the kernels are imported (and a first run compiles pricing) on the
        # other core while this one reads the trace; _load waits for them after the read
        warm.prepare(KERNEL_MODULES, cfg, min(rows, chunk_rows), parallel=not writes)
    # a trace too large for memory replays out of core (same results)
    streamed = load_scale == 1.0 and over_context == "warn" and interactivity is None
    streamed = streamed and rows > OUT_OF_CORE_ROWS
    # run.json names the trace by its hash, made while the run works: beside the KV kernel
    # when there is one (_load), else from the start
    fingerprint = run_dir is not None
    if fingerprint and (streamed or not kv_tiers):
        from agentx.io import prefetch_fingerprint

        prefetch_fingerprint(trace)
    tr = kv = operating_point = arrived = cuts = None
    if not streamed:
        tr, kv, cfg, operating_point, context, arrived, cuts = _load(trace, cfg, kv_tiers, load_scale, over_context, interactivity, quiet, phases, max_block_refs, fingerprint, chunk_rows)  # fmt: skip
    warm.ready()  # (where no trace was read here: the streamed path)
    from agentx.replay.chunks import replay_chunks
    from agentx.replay.replay import (
        KV_COLUMNS,
        TRACE_COLUMNS,
        calls_columns,
        merge_partials,
        write_calls,
    )

    phases.step("pricing the four stages")
    with contextlib.ExitStack() as stack:
        # calls.parquet streams into the run's temporary folder; the run appears whole or not at all
        folder = None
        if run_dir is not None:
            from agentx.io import atomic_dir

            folder = stack.enter_context(atomic_dir(run_dir, [trace, *catalog_files]))
        calls_path = folder / "calls.parquet" if writes else None
        result = None
        if streamed:
            from agentx.cli import recycled_pages
            from agentx.replay.outofcore import replay_file
            from agentx.traces.partitions import NotStreamable

            recycled_pages()

            read = [*TRACE_COLUMNS, *(KV_COLUMNS if kv_tiers else ())]
            cols = calls_columns(calls_mode, read + list(_priced_columns(kv_tiers)), False)
            try:
                result = replay_file(trace, cfg, kv_tiers=kv_tiers, calls_path=calls_path,
                                     meta=meta, columns=cols, rows=chunk_rows,
                                     max_refs=max_block_refs)  # fmt: skip
                over = {"calls_over": result.summary["calls_over_max_context"], "compactions": 0}
                say_over_context(over, cfg.model.max_context_tokens, "warn", quiet=quiet)
            except NotStreamable:  # read whole: its errors (or its layout) need the whole file
                tr, kv, cfg, operating_point, context, arrived, cuts = _load(trace, cfg, kv_tiers, load_scale, over_context, interactivity, quiet, phases, max_block_refs, fingerprint, chunk_rows)  # fmt: skip
        if result is None:
            # Partitions are priced, written as row groups of calls.parquet and dropped as they come.
            per_call = kv.per_call if kv is not None else None
            cols = calls_columns(
                calls_mode, tr.calls.columns + list(_priced_columns(kv is not None)), False
            )
            # only what calls.parquet keeps is priced per call (the stage sums take every row)
            priced = () if calls_path is None else cols
            parts = replay_chunks(tr.calls, cfg, per_call, chunk_rows, priced, calls_path is None,
                                  cuts=cuts() if cuts is not None else None)  # fmt: skip
            # the KV summary's per-link sums come with the partitions (kv/rows.py): read it after
            kv_summary = (lambda k=kv: k.summary) if kv is not None else None
            session_names = tr.session_names
            # from here the trace and the per-call KV outcome live only in the partition generator,
            # which lets go of them after the last partition, before the merge's whole-trace figures
            tr = kv = per_call = None
            # the last row groups are written while the merge sorts (the run's stack closes it)
            written = write_calls(parts, calls_path, meta, cols, session_names, finish=stack)
            result = merge_partials(written, cfg, kv_summary, arrived)
        note = (result.summary.get("kv_tiers") or {}).get("block_size_note")
        if note and not quiet:
            click.echo(f"note: {note}", err=True)
        if operating_point is not None:
            result.summary["interactivity"] = operating_point
        if over_context != "warn":
            result.summary["over_context"] = context
        if folder is not None:
            from agentx.runs import write_run_files

            config = {
                "hw": hw, "model": model_name, "gpus": cfg.gpus, "tp": cfg.tp, "ep": cfg.ep, "pp": cfg.pp,
                "dp_attention": cfg.dp_attention, "weight_precision": cfg.weight_precision,
                "kv_precision": cfg.kv_precision, "decode_batch": cfg.decode_batch,
                "interactivity_tokens_per_s_per_user": interactivity,
                "prefill_chunk_tokens": cfg.prefill_chunk_tokens, "routing_skew": cfg.routing_skew,
                "pools": cfg.pools, "kv_tiers": kv_tiers, "calls": calls_mode,
                "load_scale": load_scale, "over_context": over_context,
                "efficiencies": dataclasses.asdict(cfg.efficiencies),
            }  # fmt: skip
            config.update(serving_engine_config(serving_engine))
            phases.step("writing the run")
            write_run_files(
                folder,
                "replay",
                {"stages": result.stages, "footprint": result.footprint},
                summary=result.summary,
                inputs={"trace": trace},
                config=config,
                catalog_version=cat.version,
                written=("calls",) if calls_path is not None else (),
            )
    phases.done()
    if as_json:
        emit_json(result.summary)
    else:
        _print(result)
    if run_dir is not None and not quiet:
        click.echo(f"wrote {run_dir}", err=True)
