"""``agentx simulate --users N[,N…]``: closed-loop sessions on one instance with a prefix cache."""

from __future__ import annotations

import click
import polars as pl

from agentx.cli._common import emit_json, print_table, serving_engine_config

TABLE = (
    "users",
    "kv_usage_p50",
    "gpu_prefix_hit_ratio",
    "offload_hit_ratio",
    "preemptions",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "output_tok_s",
    "total_tok_s_per_gpu",
)


def parse_users(text: str) -> list[int]:
    from agentx.errors import UsageError

    out = []
    for part in str(text).split(","):
        try:
            n = int(part.strip())
        except ValueError:
            n = 0
        if n <= 0:
            raise UsageError(f"--users must be positive integers, got '{part.strip()}'")
        out.append(n)
    return sorted(set(out))


def run_agentic(
    trace, hw, model, gpus, users, catalog_files, run_dir, as_json, quiet, *, util, layout, **kw
) -> None:
    from agentx.catalog import load_catalog
    from agentx.dynamics.agentic import AgenticConfig, instance_for, prepare, sweep
    from agentx.progress import Phases
    from agentx.replay.config import make_config
    from agentx.runs import write_run
    from agentx.traces.io import read_trace

    ns = parse_users(users)
    cfg = AgenticConfig(
        max_running=kw["max_batch"],
        token_budget=kw["chunk_tokens"],
        preemption=kw["preemption"],
        offload=kw["offload"],
        think_scale=kw["think_scale"],
        max_think_s=kw["max_think_s"],
        sample_s=kw["sample_s"],
        horizon_s=kw["horizon_s"],
    )
    phases = Phases("simulate", 3 + len(ns), enabled=False if quiet else None)
    phases.step("reading the trace")
    cat = load_catalog(catalog_files)
    scfg = make_config(cat, hw=hw, model=model, gpus=gpus, pools="aggregated", **layout)
    inst = instance_for(scfg, util, cfg.max_running)
    tr = read_trace(trace)
    phases.step("block references of every call")
    prep = prepare(tr)
    del tr
    if not quiet:
        click.echo(f"note: {prep.note}", err=True)
    phases.step(f"{len(ns)} closed-loop run(s) on {inst.name}")
    calls, ts, table, summaries = sweep(prep, inst, ns, cfg)
    write_run(
        run_dir,
        "simulate",
        {"agentic_calls": calls, "agentic_timeseries": ts, "agentic_sweep": table},
        summary={"runs": summaries},
        inputs={"trace": trace},
        config={"hw": hw, "model": model, "gpus": gpus, "users": ns,
                "gpu_memory_utilization": util, **{k: v for k, v in layout.items() if k != "engine"},
                **serving_engine_config(layout.get("engine")), **summaries[0]["config"]},
        catalog_version=cat.version,
    )  # fmt: skip
    phases.done()
    if as_json:
        emit_json([{k: s[k] for k in table.columns} for s in summaries])
    else:
        click.echo(
            f"{inst.name}: KV pool {summaries[0]['kv_pool_tokens']:,.0f} tokens; {prep.note}"
        )
        print_table(table.select(TABLE).with_columns(pl.col(pl.Float64).round(4)))
    if not quiet:
        click.echo(f"wrote {run_dir}", err=True)
