"""``agentx kv-curve``: KV hit ratio and bytes per link against each tier's capacity."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from agentx.cli._common import (
    catalog_option,
    emit_json,
    gpus_option,
    hw_option,
    json_option,
    precision_option,
    print_table,
    quiet_option,
)
from agentx.errors import UsageError
from agentx.units import GB


@click.command(
    "kv-curve",
    epilog="Example: agentx kv-curve w.parquet --hw gb200 --model deepseek-v3 -o runs/kv-gb200",
)
@click.argument("trace", type=click.Path(path_type=Path))
@hw_option
@click.option(
    "--model",
    "model_name",
    default="kimi-k2",
    show_default=True,
    help="Model whose KV bytes per token count.",
)
@gpus_option()
@precision_option("kv")
@click.option(
    "--block-size-tokens",
    type=int,
    help="Serving KV block in tokens (default: the trace's hash block, else 64).",
)
@click.option(
    "--policy",
    type=click.Choice(["lru", "seed7"]),
    default="lru",
    show_default=True,
    help="lru, or seed7: shared prefix pinned in DRAM, compaction-dead blocks freed.",
)
@click.option(
    "--write-policy",
    type=click.Choice(["write-through", "write-back"]),
    default="write-through",
    show_default=True,
    help="New blocks copied to DRAM (and SSD) when written, or only when evicted.",
)
@click.option(
    "--hbm-kv-gb",
    type=float,
    help="HBM for KV in the whole instance, GB (default: what the footprint leaves).",
)
@click.option(
    "--dram-gb", type=float, help="Host DRAM for KV, GB (default: host DRAM per GPU × GPUs)."
)
@click.option("--ssd-tb", type=float, help="SSD for KV, TB (default: SSD per node × nodes).")
@click.option(
    "--capacities-gb",
    help="Comma-separated capacities to sweep (default: 0 and 1 GB … full reuse, log-spaced).",
)
@click.option(
    "--max-block-refs",
    type=int,
    help="Memory budget in block references (default 300 M: ~5 GB at peak with lru, ~14 GB "
    "with seed7); past it the block size doubles until the trace fits.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write a run directory (kv_curve.parquet, summary.json, run.json); "
    "a path ending in .parquet gets the curve alone.",
)
@catalog_option
@json_option
@quiet_option
def command(trace, hw, model_name, gpus, kv_precision, block_size_tokens, policy, write_policy,
            hbm_kv_gb, dram_gb, ssd_tb, capacities_gb, max_block_refs, output, catalog_files,
            as_json, quiet) -> None:  # fmt: skip
    """Hit ratio (token-weighted over each call's reused prefix) and bytes per link as each tier
    (HBM, DRAM, SSD) grows while the other two keep their configured size: one exact LRU
    stack pass over every KV block reference of TRACE (SEED-5, 7, 13)."""
    from agentx import warm
    from agentx.traces.partitions import trace_rows

    # a first run of a small trace on a cold cache runs its kernels as Python (before they are
    # imported) while a process of its own compiles them for the next run (agentx/warm.py)
    interpreted = warm.interpret(trace_rows(trace) or 0, warm.GEOMETRY)
    from agentx.catalog import load_catalog
    from agentx.io import check_output, write_parquet_atomic
    from agentx.replay.config import make_config
    from agentx.replay.footprint import capacities_for
    from agentx.replay.pricing import KV_COLUMNS, TRACE_COLUMNS
    from agentx.traces.io import read_trace_columns

    if output is not None:
        check_output(output, [trace, *catalog_files])
        if output.suffix != ".parquet" and output.exists() and not output.is_dir():
            raise UsageError(
                f"-o {output} is a file; give a run directory, or a name ending in .parquet "
                "for the curve alone"
            )
    grid = _grid(capacities_gb)
    cat = load_catalog(catalog_files)
    cfg = make_config(cat, hw, model_name, gpus=gpus, kv_precision=kv_precision)
    caps = capacities_for(
        cfg,
        hbm_bytes=None if hbm_kv_gb is None else hbm_kv_gb * GB,
        dram_bytes=None if dram_gb is None else dram_gb * GB,
        ssd_bytes=None if ssd_tb is None else ssd_tb * 1e12,
    )
    if interpreted:
        warm.compile_later(__name__, click.get_current_context().params)
    else:  # numba and the KV kernels' modules are imported while the trace is read
        warm.prepare(("agentx.kv.curve", "agentx.kv.curve_chains"))
    # the columns the KV model reads, every row validated; session ids as UInt32 codes
    tr = read_trace_columns(trace, [*TRACE_COLUMNS, *KV_COLUMNS], session_codes=True)
    warm.ready()
    from agentx.kv.blocks import MAX_REFS
    from agentx.kv.curve import curve as kv_curve

    max_block_refs = MAX_REFS if max_block_refs is None else max_block_refs
    curve, kv = kv_curve(tr, cfg, grid, capacities=caps, block_size_tokens=block_size_tokens,
                         policy=policy, write_policy=write_policy, max_refs=max_block_refs)  # fmt: skip
    config = {"hw": hw, "model": model_name, "gpus": cfg.gpus, "kv_precision": kv_precision,
              "policy": policy, "write_policy": write_policy, "block_size_tokens": block_size_tokens,
              "max_block_refs": max_block_refs, "capacities_gb": grid and [g / GB for g in grid]}  # fmt: skip
    if output is not None and output.suffix == ".parquet":
        meta = {
            "agentx.kv_curve": f"{hw} {model_name} gpus={cfg.gpus} policy={policy} {write_policy}"
        }
        write_parquet_atomic(curve, output, meta, inputs=[trace, *catalog_files])
    elif output is not None:
        from agentx.runs import write_run

        summary = {"hw": hw, "model": model_name, "gpus": cfg.gpus, "kv_tiers": kv}
        write_run(output, "kv-curve", {"kv_curve": curve}, summary=summary,
                  inputs={"trace": trace}, config=config, catalog_version=cat.version,
                  guard=catalog_files)  # fmt: skip
    note = kv["block_size_note"]
    if note and not quiet:
        click.echo(f"note: {note}", err=True)
    if as_json:
        emit_json({"hw": hw, "model": model_name, "gpus": cfg.gpus, "policy": policy,
                   "write_policy": write_policy, "block_size_tokens": kv["block_size_tokens"],
                   "block_size_note": note, "capacities": caps.as_dict(), "curve": curve.to_dicts()})  # fmt: skip
    else:
        _print(curve, caps, kv, f"{model_name} on {cfg.gpus} × {hw}", f"{policy}, {write_policy}")
    if output is not None and not quiet:
        click.echo(f"wrote {output}", err=True)


def _print(curve: pl.DataFrame, caps, kv: dict, what: str, policy: str) -> None:
    gb = [c for c in curve.columns if c.endswith("_bytes") and c != "capacity_bytes"]
    print_table(
        curve.select(
            "tier",
            (pl.col("capacity_bytes") / GB).alias("capacity_gb"),
            "hit_ratio",
            "tier_hit_ratio",
            "recompute_tokens",
            *[(pl.col(c) / GB).alias(c.replace("_bytes", "_gb")) for c in gb],
        )
    )
    note = " (re-blocked: see note)" if kv["block_size_note"] else ""
    click.echo(
        f"\n{what}: HBM {caps.hbm_bytes / GB:,.0f} GB, DRAM {caps.dram_bytes / GB:,.0f} GB, "
        f"SSD {caps.ssd_bytes / 1e12:,.1f} TB for KV; {policy}; "
        f"{kv['block_size_tokens']}-token blocks{note}"
    )


def _grid(text: str | None):
    if text is None:
        return None
    try:
        vals = [float(v) * GB for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--capacities-gb expects comma-separated numbers, got '{text}'") from None
    if not vals or any(v < 0 for v in vals):
        raise UsageError(f"--capacities-gb expects non-negative numbers, got '{text}'")
    return vals
