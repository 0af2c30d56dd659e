"""The parts ``agentx simulate`` is built from beside its flow (the command, ``cmd_simulate``):
its own options (admission, pools, decode batch, clock, load, and the closed-loop ``--users``
mode's sessions, offload and preemption), in --help order, and the printed open-loop summary.
"""

from __future__ import annotations

import math

import click
import polars as pl

from agentx.cli._common import (
    load_scale_option,
    over_context_option,
    pools_option,
    print_table,
)
from agentx.dynamics.names import OFFLOAD, POLICIES, PREEMPTION
from agentx.fmt import num
from agentx.units import GB


def simulate_options(f):
    """--policy through --gpu-memory-utilization, in this order: the open-loop mode's admission,
    pools, batch and clock, the shared load options, then the closed-loop (--users) options."""
    for opt in reversed(
        (
            click.option(
                "--policy",
                type=click.Choice(POLICIES),
                default="greedy",
                show_default=True,
                help="Admission control (docs/dynamics.md).",
            ),
            pools_option,
            click.option(
                "--fill-gpus", type=int, help="Disaggregated: GPUs of the fill pool (default half)."
            ),
            click.option(
                "--resize-pools",
                is_flag=True,
                help="Disaggregated: once a minute move a node of GPUs to the busier pool (SEED-16).",
            ),
            click.option(
                "--max-batch",
                type=int,
                default=256,
                show_default=True,
                help="Most sequences per decode step.",
            ),
            click.option(
                "--chunk-tokens",
                type=int,
                default=4096,
                show_default=True,
                help="Aggregated: fill tokens carried by each decode step.",
            ),
            click.option(
                "--tpot-target-s",
                type=float,
                default=0.0,
                show_default=True,
                help="Smoothed policies: per-minute decode batch cap so a step stays under this many s (0 = off).",
            ),
            click.option(
                "--max-wait-s",
                type=float,
                default=math.inf,
                help="Drop calls that wait longer than this many s for admission (default: never).",
            ),
            click.option(
                "--sample-s",
                type=float,
                default=1.0,
                show_default=True,
                help="Interval of sim_timeseries, s.",
            ),
            click.option(
                "--horizon-s",
                type=float,
                default=math.inf,
                help="Stop the clock at this trace time, s; calls still inside are reported as unfinished.",
            ),
            load_scale_option,
            over_context_option,
            click.option(
                "--users",
                help="Closed loop: N concurrent sessions (comma list sweeps, e.g. 1,2,4,...,256) on one "
                "instance of --gpus with a prefix cache (docs/dynamics.md); replaces the open-loop arrivals.",
            ),
            click.option(
                "--think-scale",
                type=float,
                default=1.0,
                show_default=True,
                help="--users: multiply the trace's think times by this.",
            ),
            click.option(
                "--max-think-s",
                type=float,
                default=math.inf,
                help="--users: cap each think time (the Weka set has idle gaps of hours; default: none).",
            ),
            click.option(
                "--offload",
                type=click.Choice(OFFLOAD),
                default="none",
                show_default=True,
                help="--users: KV offload tiers below HBM; their hits cost a transfer, not a recompute.",
            ),
            click.option(
                "--preemption",
                type=click.Choice(PREEMPTION),
                default="recompute",
                show_default=True,
                help="--users: what a preempted sequence does (vLLM: recompute).",
            ),
            click.option(
                "--gpu-memory-utilization",
                type=float,
                default=0.9,
                show_default=True,
                help="--users: fraction (0-1) of HBM bytes the server may use; KV gets what weights, activations and "
                "workspace leave of it (vLLM's flag).",
            ),
        )
    ):
        f = opt(f)
    return f


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
