"""``agentx compare``: the cheapest configuration of each system serving a trace within an SLO."""

from __future__ import annotations

import click
import polars as pl

from agentx.cli._common import (
    apply_over_context,
    catalog_option,
    emit_json,
    json_option,
    load_scale_option,
    model_option,
    over_context_option,
    parse_names,
    precision_option,
    print_table,
    quiet_option,
    run_dir_option,
    trace_argument,
)
from agentx.errors import UsageError
from agentx.planner.slo import DEFAULT


@click.command(
    "compare",
    epilog='Example: agentx compare w.parquet --hw gb200,b300 --slo "tpot_p99<=50ms,ttft_p99<=3s" --load-scale 2000',
)
@trace_argument
@click.option(
    "--hw",
    required=True,
    help="Systems to compare, comma-separated (agentx hw list), e.g. gb200,b300,b200.",
)
@model_option()
@click.option(
    "--slo",
    default=DEFAULT,
    show_default=True,
    help="Service level, comma-separated METRIC<=VALUE with ms or s: tpot_p99, ttft_p50, "
    "ttft_p90, ttft_p99.",
)
@click.option(
    "--gpus",
    help="GPUs per model instance to try, comma-separated (default: node multiples up to the "
    "scale-up domain).",
)
@click.option(
    "--usd-per-gpu-hour",
    type=float,
    help="Price in USD per GPU-hour for every system (default: the cited catalog price per "
    "system, agentx/planner/prices.toml).",
)
@load_scale_option
@over_context_option
@precision_option("weight")
@precision_option("kv")
@catalog_option
@run_dir_option("compare, configurations, frontier, summary.json")
@json_option
@quiet_option
def command(
    trace, hw, model_name, slo, gpus, usd_per_gpu_hour, load_scale, over_context,
    weight_precision, kv_precision, catalog_files, run_dir, as_json, quiet,
) -> None:  # fmt: skip
    """For each system, the fewest GPUs that serve TRACE's load within the SLO, and what they cost.

    Searches GPUs per instance and attention layout; the decode batch is the largest meeting
    the TPOT limit. Prints GPUs, tokens/s per GPU, GPU-hours, J per output token, $ per
    million output tokens and peak HBM per GPU. Definitions: docs/planner.md.
    """
    from agentx import warm
    from agentx.traces.partitions import trace_rows

    # a first run of a small trace on a cold cache runs its kernels as Python (before they are
    # imported) while a process of its own compiles them for the next run (agentx/warm.py)
    interpreted = warm.interpret(trace_rows(trace) or 0)
    from agentx.catalog import load_catalog
    from agentx.planner.search import compare
    from agentx.planner.slo import parse_slo
    from agentx.progress import Phases
    from agentx.traces.io import read_trace

    systems = parse_names(hw)
    if not systems:
        raise UsageError("--hw needs at least one system, e.g. --hw gb200,b300")
    try:
        counts = [int(g) for g in parse_names(gpus)] if gpus else None
    except ValueError:
        raise UsageError(f"--gpus expects comma-separated integers, got '{gpus}'") from None
    if usd_per_gpu_hour is not None and not usd_per_gpu_hour >= 0:
        raise UsageError(f"--usd-per-gpu-hour must be ≥ 0, got {usd_per_gpu_hour:g}")
    limits = parse_slo(slo)
    cat = load_catalog(catalog_files)
    phases = Phases("compare", len(systems) + 1, enabled=False if quiet else None)
    if interpreted:
        warm.compile_later(__name__, click.get_current_context().params)
    phases.step("reading the trace")
    tr = read_trace(trace)
    tr, ctx = apply_over_context(
        tr, cat.model(model_name).max_context_tokens, over_context, quiet=quiet
    )
    results, tried, frontier = compare(
        cat, tr, systems, model_name, limits, load_scale=load_scale, gpus=counts,
        usd_per_gpu_hour=usd_per_gpu_hour, weight_precision=weight_precision,
        kv_precision=kv_precision, on_system=lambda hw: phases.step(f"searching {hw} layouts"),
    )  # fmt: skip
    phases.done()
    summary = {"model": model_name, "slo": limits, "load_scale": load_scale,
               "over_context": ctx, "systems": results}  # fmt: skip
    if run_dir is not None:
        from agentx.runs import write_run

        write_run(
            run_dir,
            "compare",
            {"compare": pl.DataFrame(results), "configurations": tried, "frontier": frontier},
            summary=summary,
            inputs={"trace": trace},
            config={"hw": ",".join(systems), "model": model_name, "slo": slo, "gpus": counts,
                    "usd_per_gpu_hour": usd_per_gpu_hour, "load_scale": load_scale,
                    "over_context": over_context, "weight_precision": weight_precision,
                    "kv_precision": kv_precision},
            catalog_version=cat.version,
        )  # fmt: skip
    if as_json:
        emit_json(results)
    else:
        _print(results, limits)
    if run_dir is not None and not quiet:
        click.echo(f"wrote {run_dir}", err=True)


def _print(results: list[dict], slo: dict) -> None:
    from agentx.planner.answer import headline
    from agentx.planner.search import TABLE_KEYS

    click.echo(headline(results, slo))
    click.echo("")
    print_table(pl.DataFrame([{k: r[k] for k in TABLE_KEYS} for r in results]))
