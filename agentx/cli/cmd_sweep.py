"""``agentx sweep``: latency–throughput operating points per stage, system and GPU count."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from agentx.cli._common import (
    catalog_option,
    emit_json,
    json_option,
    model_option,
    print_table,
    quiet_option,
    run_dir_option,
)
from agentx.units import GB


def _names(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@click.command(
    "sweep",
    epilog="Example: agentx sweep seed-study -o runs/seed-study",
)
@click.argument("scenario", required=False)
@click.option(
    "--hw", help="Systems, comma-separated (overrides the scenario), e.g. b200,b300,gb200."
)
@click.option("--gpus", help="GPU counts, comma-separated, e.g. 16,32,64.")
@model_option("Model name (agentx models list); default kimi-k2.", default=None)
@catalog_option
@run_dir_option("sweep.parquet, summary.json", required=True)
@json_option
@quiet_option
def command(scenario, hw, gpus, model_name, catalog_files, run_dir, as_json, quiet) -> None:
    """Sweep decode batch, fill batch and context for every system × GPU count (SEED-18..21).

    SCENARIO is a bundled name (seed-study) or a TOML file; --hw/--gpus/--model override it.
    Writes one row per operating point and prints the best points and the SEED-19/20/21 checks.
    """
    from agentx.catalog import load_catalog
    from agentx.dynamics.sweep import load_scenario, sweep
    from agentx.dynamics.verdicts import seed_verdicts
    from agentx.errors import UsageError
    from agentx.io import check_output
    from agentx.progress import Phases
    from agentx.runs import write_run

    scenario_file = scenario if scenario and Path(scenario).exists() else None
    check_output(run_dir, [scenario_file, *catalog_files])
    sc, label = load_scenario(scenario) if scenario else ({"checks": {}}, None)
    systems = _names(hw) or sc.get("systems")
    try:
        counts = [int(g) for g in _names(gpus)] if gpus else sc.get("gpus")
    except ValueError:
        raise UsageError(f"--gpus expects comma-separated integers, got '{gpus}'") from None
    if not systems or not counts:
        raise UsageError("give a SCENARIO or both --hw and --gpus")
    model = model_name or sc.get("model", "kimi-k2")
    extra = {k: sc[k] for k in ("weight_precision", "kv_precision") if k in sc}
    cat = load_catalog(catalog_files)
    phases = Phases("sweep", 2, enabled=False if quiet else None)
    phases.step(f"{len(systems)} systems × {len(counts)} GPU counts")
    df, skipped = sweep(cat, systems, counts, model, **extra)
    verdicts = (
        seed_verdicts(df, float(sc["checks"].get("hbm_limit_bytes", 80e9))) if df.height else {}
    )
    summary = {
        "scenario": label,
        "systems": systems,
        "gpus": counts,
        "model": model,
        "points": df.height,
        "skipped": skipped,
        **verdicts,
    }
    phases.step("writing the run")
    write_run(
        run_dir,
        "sweep",
        {"sweep": df},
        summary=summary,
        config={"scenario": label, "systems": systems, "gpus": counts, "model": model, **extra},
        catalog_version=cat.version,
        guard=[scenario_file, *catalog_files],
    )
    phases.done()
    if as_json:
        emit_json(summary)
    else:
        _print(df, summary)
    if not quiet:
        click.echo(f"wrote {run_dir}", err=True)


def _print(df: pl.DataFrame, s: dict) -> None:
    fit = df.filter(pl.col("fits"))
    best = (
        fit.group_by("system", "gpus", "stage", maintain_order=True)
        .agg(
            pl.col("tokens_per_s_per_gpu").max().alias("max_tokens_per_s_per_gpu"),
            pl.col("per_user_tokens_per_s").max().alias("max_per_user_tokens_per_s"),
            pl.col("ttft_s").min().alias("min_ttft_s"),
            (pl.col("hbm_peak_bytes_per_gpu").max() / GB).alias("max_hbm_gb_per_gpu"),
        )
        .sort("stage", "system", "gpus")
    )
    print_table(best)
    for r in s.get("skipped", []):
        click.echo(f"skipped {r['system']} × {r['gpus']}: {r['reason']}")
    v = s.get("verdict")
    if v:
        click.echo("")
        click.echo(
            f"SEED-19 GB200 leads decode (> 1 %) on {v['seed19_mean_lead_share']:.0%} of the interactivity range, "
            f"leads or ties on {v['seed19_mean_lead_or_tie_share']:.0%}: "
            f"{'agrees' if v['seed19_gb200_leads_decode_most_of_curve'] else 'DISAGREES'}"
        )
        for r in s["seed20_midfill"]:
            click.echo(
                f"SEED-20 {r['gpus']} GPUs: lowest midfill TTFT {r['lowest_ttft_system']}; B300/GB200 best midfill throughput {r['b300_over_gb200_throughput']:.2f}"
            )
        click.echo(
            f"SEED-20 GB200 lowest TTFT: {'agrees' if v['seed20_gb200_lowest_midfill_ttft'] else 'DISAGREES'}; B300 catches up (≥ 0.95): {'agrees' if v['seed20_b300_catches_up_at_throughput_end'] else 'DISAGREES'}"
        )
        h = s["seed21_hbm"]
        click.echo(
            f"SEED-21 frontier points below 80 GB per GPU: {h['share_below_80gb']:.0%} (max {h['max_gb']:.0f} GB): {'agrees' if v['seed21_peak_hbm_mostly_below_80gb'] else 'DISAGREES'}"
        )
