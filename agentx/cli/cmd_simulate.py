"""``agentx simulate``: time-driven replay of a trace through fill and decode pools.

This module owns the command and its flow (argument checks, the open-loop run, the run
written); its own options and the printed summary are ``agentx.cli._simulate``'s.
"""

from __future__ import annotations

import math

import click

from agentx.cli._common import (
    apply_over_context,
    catalog_option,
    emit_json,
    gpus_option,
    hw_option,
    json_option,
    layout_options,
    model_option,
    quiet_option,
    resolve_gpus,
    run_dir_option,
    serving_engine_config,
    serving_engine_option,
    trace_argument,
)
from agentx.cli._simulate import _print, simulate_options

MAX_BATCH = 1 << 20


@click.command(
    "simulate",
    epilog="Example: agentx simulate w.parquet --hw gb200 --policy pi -o runs/sim",
)
@trace_argument
@hw_option
@model_option()
@gpus_option("GPUs of the whole deployment (both pools)")
@simulate_options
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
    from agentx import warm
    from agentx.traces.partitions import trace_rows

    # a first open-loop run of a small trace on a cold cache runs the simulator as Python
    # (before it is imported) while a process of its own compiles it for the next run
    # (agentx/warm.py); --users runs N sessions of it, whose time the trace does not tell
    rows = trace_rows(trace) or 0 if users is None else 0
    interpreted = warm.interpret(rows, warm.SIMULATOR)
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
    if interpreted:
        warm.compile_later(__name__, click.get_current_context().params)
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
