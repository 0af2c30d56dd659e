"""``agentx simulate``: time-driven replay of a trace through fill and decode pools."""

from __future__ import annotations

import math

import click
import polars as pl

from agentx.cli._common import (
    catalog_option,
    emit_json,
    hw_option,
    json_option,
    layout_options,
    model_option,
    pools_option,
    print_table,
    quiet_option,
    run_dir_option,
    trace_argument,
)
from agentx.dynamics.admission import POLICIES
from agentx.dynamics.agentic import OFFLOAD, PREEMPTION


@click.command(
    "simulate",
    epilog="Example: agentx simulate w.parquet --hw gb200 --policy pi -o runs/sim",
)
@trace_argument
@hw_option
@model_option()
@click.option(
    "--gpus",
    type=int,
    default=16,
    show_default=True,
    help="GPUs of the whole deployment (both pools).",
)
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default="greedy",
    show_default=True,
    help="Admission control (docs/dynamics.md).",
)
@pools_option
@click.option("--fill-gpus", type=int, help="Disaggregated: GPUs of the fill pool (default half).")
@click.option(
    "--resize-pools",
    is_flag=True,
    help="Disaggregated: once a minute move a node of GPUs to the busier pool (SEED-16).",
)
@click.option(
    "--max-batch", type=int, default=256, show_default=True, help="Most sequences per decode step."
)
@click.option(
    "--chunk-tokens",
    type=int,
    default=4096,
    show_default=True,
    help="Aggregated: fill tokens carried by each decode step.",
)
@click.option(
    "--tpot-target-s",
    type=float,
    default=0.0,
    show_default=True,
    help="Smoothed policies: per-minute decode batch cap so a step stays under this (0 = off).",
)
@click.option(
    "--max-wait-s",
    type=float,
    default=math.inf,
    help="Drop calls that wait longer than this for admission (default: never).",
)
@click.option(
    "--sample-s", type=float, default=1.0, show_default=True, help="Interval of sim_timeseries."
)
@click.option(
    "--horizon-s",
    type=float,
    default=math.inf,
    help="Stop the clock here; calls still inside are reported as unfinished.",
)
@click.option(
    "--users",
    help="Closed loop: N concurrent sessions (comma list sweeps, e.g. 1,2,4,...,256) on one "
    "instance of --gpus with a prefix cache (docs/dynamics.md); replaces the open-loop arrivals.",
)
@click.option(
    "--think-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="--users: multiply the trace's think times by this.",
)
@click.option(
    "--max-think-s",
    type=float,
    default=math.inf,
    help="--users: cap each think time (the Weka set has idle gaps of hours; default: none).",
)
@click.option(
    "--offload",
    type=click.Choice(OFFLOAD),
    default="none",
    show_default=True,
    help="--users: KV offload tiers below HBM; their hits cost a transfer, not a recompute.",
)
@click.option(
    "--preemption",
    type=click.Choice(PREEMPTION),
    default="recompute",
    show_default=True,
    help="--users: what a preempted sequence does (vLLM: recompute).",
)
@click.option(
    "--gpu-memory-utilization",
    type=float,
    default=0.9,
    show_default=True,
    help="--users: share of HBM the server may use; KV gets what weights, activations and "
    "workspace leave of it (vLLM's flag).",
)
@layout_options
@catalog_option
@run_dir_option(
    "sim_calls, sim_timeseries (--users: agentic_calls, agentic_timeseries, agentic_sweep)",
    required=True,
)
@json_option
@quiet_option
def command(
    trace,
    hw,
    model_name,
    gpus,
    policy,
    pools,
    fill_gpus,
    resize_pools,
    max_batch,
    chunk_tokens,
    tpot_target_s,
    max_wait_s,
    sample_s,
    horizon_s,
    users,
    think_scale,
    max_think_s,
    offload,
    preemption,
    gpu_memory_utilization,
    tp,
    ep,
    pp,
    dp_attention,
    weight_precision,
    expert_precision,
    kv_precision,
    catalog_files,
    run_dir,
    as_json,
    quiet,
) -> None:
    """Replay TRACE in time: arrivals, admission, fill, KV transfer, decode batch, think gaps.

    A session's next call starts only after its previous call finished plus its think time;
    decode stop times are discovered when reached. Writes sim_calls (one row per call) and
    sim_timeseries (one row per interval) and prints latency, throughput and the checks.
    """
    from agentx.catalog import load_catalog
    from agentx.dynamics.admission import AdmissionPolicy
    from agentx.dynamics.disagg import run_layout
    from agentx.dynamics.engine import SimConfig
    from agentx.errors import UsageError
    from agentx.progress import Phases
    from agentx.runs import write_run
    from agentx.traces.io import read_trace

    for name, v in (("--gpus", gpus), ("--max-batch", max_batch), ("--chunk-tokens", chunk_tokens)):
        if v < 1:
            raise UsageError(f"{name} must be a positive integer, got {v}")
    for name, v in (
        ("--sample-s", sample_s),
        ("--max-wait-s", max_wait_s),
        ("--horizon-s", horizon_s),
    ):
        if not v > 0:
            raise UsageError(f"{name} must be positive, got {v}")
    if users is not None:
        from agentx.cli.simulate_agentic import run_agentic

        open_loop = (("--policy", policy != "greedy"), ("--fill-gpus", fill_gpus is not None),
                     ("--resize-pools", resize_pools), ("--tpot-target-s", tpot_target_s != 0.0),
                     ("--max-wait-s", max_wait_s != math.inf))  # fmt: skip
        for name, given in open_loop:
            if given:
                raise UsageError(f"{name} applies to the open-loop mode, not to --users")

        run_agentic(
            trace, hw, model_name, gpus, users, catalog_files, run_dir, as_json, quiet,
            max_batch=max_batch, chunk_tokens=chunk_tokens, sample_s=sample_s,
            horizon_s=horizon_s, think_scale=think_scale, max_think_s=max_think_s,
            offload=offload, preemption=preemption, util=gpu_memory_utilization,
            layout={"tp": tp, "ep": ep, "pp": pp, "dp_attention": dp_attention,
                    "weight_precision": weight_precision, "expert_precision": expert_precision,
                    "kv_precision": kv_precision},
        )  # fmt: skip
        return
    phases = Phases("simulate", 3, enabled=False if quiet else None)
    phases.step("reading the trace")
    tr = read_trace(trace)
    cat = load_catalog(catalog_files)
    pol = AdmissionPolicy(policy, tpot_target_s=tpot_target_s)
    cfg = SimConfig(
        pools=pools,
        max_batch=max_batch,
        chunk_tokens=chunk_tokens,
        max_wait_s=max_wait_s,
        sample_s=sample_s,
        horizon_s=horizon_s,
        resize_pools=resize_pools,
    )
    phases.step(f"stepping time on {gpus} × {hw} ({pools}, {policy})")
    layout = {"tp": tp, "ep": ep, "pp": pp, "dp_attention": dp_attention,
              "weight_precision": weight_precision, "expert_precision": expert_precision,
              "kv_precision": kv_precision}  # fmt: skip
    res = run_layout(tr.calls, cat, hw, model_name, gpus, pools, pol, cfg, fill_gpus, **layout)
    s = res.summary
    s["output_tokens_per_s_per_gpu"] = s["output_tokens"] / max(s["span_s"], 1e-9) / gpus
    phases.step("writing the run")
    write_run(
        run_dir,
        "simulate",
        {"sim_calls": res.calls, "sim_timeseries": res.timeseries},
        summary=s,
        inputs={"trace": trace},
        config={
            "hw": hw,
            "model": model_name,
            "gpus": gpus,
            "fill_gpus": s["fill_gpus"],
            **s["config"],
            "policy": s["policy_params"],
        },
        catalog_version=cat.version,
    )
    phases.done()
    if as_json:
        emit_json(s)
    else:
        _print(s)
    if not quiet:
        click.echo(f"wrote {run_dir}", err=True)


def _print(s: dict) -> None:
    rows = [
        (
            "calls done / dropped / not arrived",
            f"{s['done']:,} / {s['dropped']:,} / {s['not_arrived']:,}",
        ),
        ("drop reasons", ", ".join(f"{k} {v}" for k, v in s["drop_reasons"].items()) or "none"),
        (
            "pools (fill + decode GPUs)",
            f"{s['pools']} ({s['fill_gpus']} + {s['decode_gpus']}), KV link {s['kv_link']}",
        ),
        ("TTFT p50 / p99 s", f"{s['ttft_s_p50']:.3g} / {s['ttft_s_p99']:.3g}"),
        (
            "TPOT p50 / p99 s",
            f"{s['tpot_s_p50']:.3g} / {s['tpot_s_p99']:.3g}"
            if s["tpot_s_p50"] is not None
            else "-",
        ),
        ("output tokens/s per GPU", f"{s['output_tokens_per_s_per_gpu']:.4g}"),
        ("energy per output token J", f"{s['energy_per_output_token_j']:.4g}"),
        ("mean utilisation / power W", f"{s['mean_utilisation']:.3f} / {s['mean_power_w']:,.0f}"),
        (
            "KV moved GB / link busy s",
            f"{s['kv_moved_bytes'] / 1e9:,.1f} / {s['kv_transfer_s']:.4g}",
        ),
        ("preemptions", f"{s['preemptions']:,}"),
        ("pool resizes (fill GPUs at the end)", f"{s['pool_resizes']} ({s['final_fill_gpus']})"),
        (
            "Little's law L sampled / λW",
            f"{s['littles_law']['mean_in_system_sampled']:.4g} / {s['littles_law']['lambda_w']:.4g}",
        ),
        ("backlog oscillation amplitude (calls)", f"{s['oscillation_backlog']['amplitude']:.3g}"),
    ]
    print_table(pl.DataFrame(rows, schema=["metric", "value"], orient="row"))
