"""``agentx replay``: a trace through the four-stage cost model on one serving configuration."""

from __future__ import annotations

import dataclasses

import click
import polars as pl

from agentx.cli._common import (
    catalog_option,
    emit_json,
    hw_option,
    json_option,
    model_option,
    pools_option,
    precision_option,
    print_table,
    quiet_option,
    run_dir_option,
    trace_argument,
)
from agentx.errors import UsageError
from agentx.progress import Phases

GB = 1e9


@click.command(
    "replay",
    epilog="Example: agentx replay w.parquet --hw gb200 --model kimi-k2 --gpus 32 -o runs/gb200-32",
)
@trace_argument
@hw_option
@model_option()
@click.option(
    "--gpus", type=int, help="GPUs serving one model instance (default: one node; 32 on NVL72)."
)
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
@click.option(
    "--kv-tiers/--no-kv-tiers",
    default=True,
    show_default=True,
    help="Place KV blocks in HBM/DRAM/SSD (agentx.kv): reloads and recomputes enter the fills.",
)
@click.option(
    "--calls",
    "calls_mode",
    type=click.Choice(["full", "summary", "none"]),
    default="full",
    show_default=True,
    help="calls.parquet: every per-call column, the queried subset (docs/metrics.md), or none.",
)
@click.option(
    "--chunk-rows",
    type=int,
    default=1 << 20,
    show_default=True,
    help="Calls priced and written per partition (cut between sessions); results do not depend on it.",
)
@catalog_option
@run_dir_option("calls, stages, footprint, summary.json")
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
    kv_tiers,
    calls_mode,
    chunk_rows,
    catalog_files,
    run_dir,
    as_json,
    quiet,
) -> None:
    """Price every call of TRACE on a system: time, energy, FLOPs, bytes per stage and HBM per GPU.

    Stages: prefill, midfill (fill onto a cached prefix), decode attention, decode experts.
    Column definitions: docs/metrics.md.
    """
    from agentx.catalog import load_catalog
    from agentx.replay.config import make_config
    from agentx.replay.replay import (
        TRACE_COLUMNS,
        calls_columns,
        merge_partials,
        replay_chunks,
        write_calls,
    )
    from agentx.traces.io import read_trace_columns

    if decode_batch is not None and interactivity is not None:
        raise UsageError("give --decode-batch or --interactivity, not both")
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
    )
    phases = Phases("replay", 4, enabled=False if quiet else None)
    phases.step("reading the trace")
    # only the columns pricing and the KV model read stay in memory (every row is validated)
    cols = [*TRACE_COLUMNS, *(KV_COLUMNS if kv_tiers else ())]
    tr = read_trace_columns(trace, cols)
    operating_point = None
    if interactivity is not None:
        from agentx.replay.interactivity import decode_context_tokens, with_interactivity

        cfg, operating_point = with_interactivity(
            cfg, interactivity, decode_context_tokens(tr.calls)
        )
    kv = None
    if kv_tiers:
        from agentx.kv import replay_tiers

        phases.step("placing KV blocks in HBM/DRAM/SSD")
        kv = replay_tiers(tr, cfg)
    phases.step("pricing the four stages")
    calls_path = None
    if run_dir is not None:
        from pathlib import Path

        from agentx.io import ensure_distinct

        ensure_distinct(run_dir, [trace])
        ensure_distinct(Path(run_dir) / "x", [trace])
        if calls_mode != "none":
            calls_path = Path(run_dir) / "calls.parquet"
    # Partitions are priced, written as row groups of calls.parquet and dropped as they come.
    parts = replay_chunks(tr.calls, cfg, kv.per_call if kv is not None else None, chunk_rows)
    meta = {"agentx.run_kind": "replay", "agentx.table": "calls"}
    cols = calls_columns(calls_mode, tr.calls.columns + list(_priced_columns(kv)))
    result = merge_partials(
        write_calls(parts, calls_path, meta, cols), cfg, kv.summary if kv is not None else None
    )
    note = (result.summary.get("kv_tiers") or {}).get("block_size_note")
    if note and not quiet:
        click.echo(f"note: {note}", err=True)
    if operating_point is not None:
        result.summary["interactivity"] = operating_point
    if run_dir is not None:
        from agentx.runs import write_run

        config = {
            "hw": hw, "model": model_name, "gpus": cfg.gpus, "tp": cfg.tp, "ep": cfg.ep, "pp": cfg.pp,
            "dp_attention": cfg.dp_attention, "weight_precision": cfg.weight_precision,
            "kv_precision": cfg.kv_precision, "decode_batch": cfg.decode_batch,
            "interactivity_tokens_per_s_per_user": interactivity,
            "prefill_chunk_tokens": cfg.prefill_chunk_tokens, "routing_skew": cfg.routing_skew,
            "pools": cfg.pools, "kv_tiers": kv is not None, "calls": calls_mode,
            "efficiencies": dataclasses.asdict(cfg.efficiencies),
        }  # fmt: skip
        phases.step("writing the run")
        write_run(
            run_dir,
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


KV_COLUMNS = ("is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes")


def _priced_columns(kv) -> tuple[str, ...]:
    from agentx.replay.replay import CALL_COLUMNS

    return (*CALL_COLUMNS, *(kv.per_call.columns if kv is not None else ()))


def _print(result) -> None:
    s = result.summary
    st = result.stages.select(
        "stage",
        "time_s",
        "time_share",
        "energy_j",
        "energy_share",
        "j_per_output_token",
        "arithmetic_intensity",
        (pl.col("hbm_bytes") / GB).alias("hbm_gb"),
        (pl.col("comm_bytes") / GB).alias("comm_gb"),
    )
    click.echo(
        f"{s['model']} on {s['layout']}: {s['calls']:,} calls, {s['tokens']['output_tokens']:,} output tokens"
    )
    if "interactivity" in s:
        op = s["interactivity"]
        click.echo(
            f"decode batch {op['decode_batch']} for {op['target_tokens_per_s_per_user']:g} tokens/s per user "
            f"at {op['context_tokens']:,.0f} tokens of context ({op['tokens_per_s_per_user']:.1f} reached; "
            f"limited by {op['limited_by']})"
        )
    print_table(st)
    click.echo(
        f"total {s['total_time_s']:.4g} instance-s, {s['total_energy_j']:.4g} J, "
        f"{s['j_per_output_token']:.4g} J per output token"
    )
    click.echo("")
    print_table(
        result.footprint.select("component", (pl.col("bytes_per_gpu") / GB).alias("gb_per_gpu"))
    )
    verdict = "fits" if s["kv_fits_in_hbm"] else "does NOT fit"
    click.echo(
        f"HBM peak per GPU {s['hbm_peak_bytes_per_gpu'] / GB:.1f} GB of {s['hbm_capacity_bytes_per_gpu'] / GB:.0f} GB "
        f"({verdict}; {s['kv_resident_sequences']:.0f} sequences, {s['kv_resident_tokens']:,.0f} tokens resident)"
    )
