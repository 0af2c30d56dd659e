"""``agentx simulate``: time-driven replay of a trace through fill and decode pools."""

from __future__ import annotations

import math

import click
import polars as pl

from agentx.cli._common import (
    apply_over_context,
    catalog_option,
    emit_json,
    gpus_option,
    hw_option,
    json_option,
    layout_options,
    load_scale_option,
    model_option,
    over_context_option,
    pools_option,
    print_table,
    quiet_option,
    resolve_gpus,
    run_dir_option,
    serving_engine_config,
    serving_engine_option,
    trace_argument,
)
from agentx.dynamics.admission import POLICIES
from agentx.dynamics.agentic import OFFLOAD, PREEMPTION
from agentx.fmt import num
from agentx.units import GB

MAX_BATCH = 1 << 20


@click.command(
    "simulate",
    epilog="Example: agentx simulate w.parquet --hw gb200 --policy pi -o runs/sim",
)
@trace_argument
@hw_option
@model_option()
@gpus_option("GPUs of the whole deployment (both pools)")
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
    help="Smoothed policies: per-minute decode batch cap so a step stays under this many s (0 = off).",
)
@click.option(
    "--max-wait-s",
    type=float,
    default=math.inf,
    help="Drop calls that wait longer than this many s for admission (default: never).",
)
@click.option(
    "--sample-s", type=float, default=1.0, show_default=True, help="Interval of sim_timeseries, s."
)
@click.option(
    "--horizon-s",
    type=float,
    default=math.inf,
    help="Stop the clock at this trace time, s; calls still inside are reported as unfinished.",
)
@load_scale_option
@over_context_option
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
    help="--users: fraction (0-1) of HBM bytes the server may use; KV gets what weights, activations and "
    "workspace leave of it (vLLM's flag).",
)
@layout_options
@serving_engine_option
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
    load_scale,
    over_context,
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
    serving_engine,
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
    from agentx.traces.transform import scale_load

    for name, v in (("--gpus", gpus), ("--max-batch", max_batch), ("--chunk-tokens", chunk_tokens)):
        if v is not None and v < 1:
            raise UsageError(f"{name} must be a positive integer, got {v}")
    if max_batch > MAX_BATCH:  # the batch's per-slot arrays are allocated up front
        raise UsageError(f"--max-batch must be at most {MAX_BATCH:,} sequences, got {max_batch:,}")
    if tpot_target_s < 0:
        raise UsageError(f"--tpot-target-s must be ≥ 0 seconds (0 = off), got {tpot_target_s}")
    for name, v in (
        ("--sample-s", sample_s),
        ("--max-wait-s", max_wait_s),
        ("--horizon-s", horizon_s),
    ):
        if not v > 0:
            raise UsageError(f"{name} must be positive, got {v}")
    from agentx.io import check_output

    check_output(run_dir, [trace, *catalog_files])
    if users is not None:
        from agentx.cli.simulate_agentic import run_agentic

        open_loop = (("--policy", policy != "greedy"), ("--fill-gpus", fill_gpus is not None),
                     ("--resize-pools", resize_pools), ("--tpot-target-s", tpot_target_s != 0.0),
                     ("--max-wait-s", max_wait_s != math.inf))  # fmt: skip
        open_loop += (("--load-scale", load_scale != 1.0),  # with --users the load is N sessions
                      ("--over-context", over_context != "warn"))  # fmt: skip
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
                    "kv_precision": kv_precision, "engine": serving_engine},
        )  # fmt: skip
        return
    phases = Phases("simulate", 3, enabled=False if quiet else None)
    phases.step("reading the trace")
    tr = read_trace(trace)
    if tr.calls.height == 0:
        from agentx.errors import InputError

        raise InputError(trace, "the trace holds no calls; nothing to simulate")
    from agentx.limits import check

    span_s = min(horizon_s, float(tr.calls["t_start_s"].max()) + sample_s)
    check("intervals", span_s / sample_s, f"--sample-s {sample_s:g} over {span_s:,.0f} s")
    cat = load_catalog(catalog_files)
    gpus = resolve_gpus(cat, hw, gpus)
    tr, _ = apply_over_context(
        tr, cat.model(model_name).max_context_tokens, over_context, quiet=quiet
    )
    tr = scale_load(tr, load_scale)
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
              "kv_precision": kv_precision, "engine": serving_engine}  # fmt: skip
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
            "load_scale": load_scale,
            "over_context": over_context,
            "fill_gpus": s["fill_gpus"],
            **s["config"],
            "policy": s["policy_params"],
            **serving_engine_config(serving_engine),
        },
        catalog_version=cat.version,
        guard=catalog_files,
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
            f"{num(s['done'])} / {num(s['dropped'])} / {num(s['not_arrived'])}",
        ),
        ("drop reasons", ", ".join(f"{k} {v}" for k, v in s["drop_reasons"].items()) or "none"),
        (
            "pools (fill + decode GPUs)",
            f"{s['pools']} ({s['fill_gpus']} + {s['decode_gpus']}), KV link {s['kv_link']}",
        ),
        ("TTFT p50 / p99 s", f"{num(s['ttft_s_p50'])} / {num(s['ttft_s_p99'])}"),
        (
            "TPOT p50 / p99 s",
            f"{num(s['tpot_s_p50'])} / {num(s['tpot_s_p99'])}"
            if s["tpot_s_p50"] is not None
            else "-",
        ),
        ("output tokens/s per GPU", f"{num(s['output_tokens_per_s_per_gpu'])}"),
        ("energy per output token J", f"{num(s['energy_per_output_token_j'])}"),
        ("mean utilisation / power W", f"{num(s['mean_utilisation'])} / {num(s['mean_power_w'])}"),
        (
            "KV moved GB / link busy s",
            f"{num(s['kv_moved_bytes'] / GB)} / {num(s['kv_transfer_s'])}",
        ),
        ("preemptions", f"{num(s['preemptions'])}"),
        ("pool resizes (fill GPUs at the end)", f"{s['pool_resizes']} ({s['final_fill_gpus']})"),
        (
            "Little's law L sampled / λW",
            f"{num(s['littles_law']['mean_in_system_sampled'])} / {num(s['littles_law']['lambda_w'])}",
        ),
        ("backlog oscillation amplitude (calls)", f"{num(s['oscillation_backlog']['amplitude'])}"),
    ]
    print_table(pl.DataFrame(rows, schema=["metric", "value"], orient="row"))
    if s["mean_utilisation"] < 0.25:
        click.echo(
            f"note: the GPUs are busy {num(s['mean_utilisation'])} of the time: this trace's own "
            "load is light for them, and their idle draw is in the J per output token. Scale the "
            "load (--load-scale K) or ask agentx compare for the GPUs the load needs."
        )
