"""``agentx synth``: write a seeded synthetic agentic trace, optionally fitted to a real one."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import click
import numpy as np
import polars as pl

from agentx.cli._common import emit_json, json_option, output_file_option, print_table
from agentx.errors import UsageError
from agentx.fmt import num

DEFAULT_SESSIONS = 100


@click.command(
    "synth",
    epilog="Example: agentx synth -o s.parquet --sessions 600 --seed 1 --context-limit-tokens 200000",
)
@output_file_option("Trace to write (atomically).")
@click.option(
    "--sessions",
    type=int,
    help=f"Number of sessions [default {DEFAULT_SESSIONS}, or as many as the --like trace has].",
)
@click.option(
    "--calls", type=int, help="Exactly this many calls instead (the last session is cut short)."
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Random seed: same seed and options, same bytes.",
)
@click.option(
    "--rate-per-s",
    type=float,
    help="Session arrival rate (Poisson), sessions per second [default 1/6, or fitted].",
)
@click.option(
    "--context-limit-tokens",
    type=int,
    help="Compact when the context would pass this many tokens [default 1,000,000, SEED-6].",
)
@click.option(
    "--like",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Fit the distributions to this canonical trace and report how close the fit is.",
)
@click.option(
    "--isl",
    "isl_tokens",
    type=int,
    help="Benchmark shape: nominal input length in tokens; each request draws uniformly in [0.8·ISL, ISL].",
)
@click.option(
    "--osl",
    "osl_tokens",
    type=int,
    help="Benchmark shape: nominal output length in tokens, drawn uniformly in [0.8·OSL, OSL].",
)
@click.option(
    "--concurrency",
    type=int,
    help="Benchmark shape: closed-loop clients (each sends its next request when one ends).",
)
@click.option(
    "--requests",
    type=int,
    help="Benchmark shape: requests in all [default 10 × concurrency, as InferenceX].",
)
@json_option
def command(
    output,
    sessions,
    calls,
    seed,
    rate_per_s,
    context_limit_tokens,
    like,
    isl_tokens,
    osl_tokens,
    concurrency,
    requests,
    as_json,
) -> None:
    """Generate agentic sessions: context growth, outputs, think times, sub-agents, compaction.

    Distributions default to the Weka Claude Code statistics (shared/traces/SOURCES.md §2); with
    --like they are fitted to a real trace and a real-vs-synthetic table (p50/p90/p99 and
    the Kolmogorov–Smirnov distance) is printed. With --isl/--osl/--concurrency it writes the
    benchmark shape the public harnesses measure instead: random prompts (no prefix reuse),
    closed-loop clients (docs/validation.md).
    """
    from agentx.io import check_output
    from agentx.traces.fit import fit_params, fit_report, share_report
    from agentx.traces.io import read_trace, write_trace, write_trace_chunks
    from agentx.traces.synth import SynthParams, synth_chunks, synthesize

    bench = {"--isl": isl_tokens, "--osl": osl_tokens, "--concurrency": concurrency}
    if any(v is not None for v in (*bench.values(), requests)):
        missing = [k for k, v in bench.items() if v is None]
        if missing:
            raise UsageError(f"the benchmark shape needs {', '.join(missing)} as well")
        clash = [
            k
            for k, v in (
                ("--sessions", sessions),
                ("--calls", calls),
                ("--rate-per-s", rate_per_s),
                ("--context-limit-tokens", context_limit_tokens),
                ("--like", like),
            )
            if v is not None
        ]
        if clash:
            raise UsageError(f"{clash[0]} does not apply to the benchmark shape (--isl/--osl)")
        from agentx.traces.synth_bench import synthesize_benchmark

        started = time.perf_counter()
        trace = synthesize_benchmark(
            isl_tokens, osl_tokens, concurrency, requests=requests, seed=seed
        )
        write_trace(trace, output)
        summary = _summary(trace.calls, output, time.perf_counter() - started)
        if as_json:
            emit_json({"summary": summary})
        else:
            print_table(
                pl.DataFrame(
                    {"quantity": list(summary), "value": [num(v) for v in summary.values()]}
                )
            )
        return

    if sessions is not None and calls is not None:
        raise UsageError("use --sessions or --calls, not both")
    for name, value in (("--sessions", sessions), ("--calls", calls)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be a positive integer, got {value}")
    if seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed}")
    if rate_per_s is not None and not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise UsageError(
            f"--rate-per-s must be a positive number of sessions per second, got {rate_per_s}"
        )
    check_output(output, [like])
    from agentx.limits import check

    # streamed, the trace is checked chunk by chunk; with --like the fit report compares
    # whole traces in memory
    cap = "calls" if like is not None else "calls_streamed"
    check(cap, calls or 0, "--calls")
    check(cap, (sessions or 0) * 100, "--sessions (counted as 100 calls each)")
    started = time.perf_counter()
    params = SynthParams()
    real = None
    if like is not None:
        real = read_trace(like)
        params = fit_params(real)
        if sessions is None and calls is None:
            sessions = real.calls["session_id"].n_unique()
    if context_limit_tokens is not None:
        need = 2 * max(params.shared_prefix_tokens, params.subagent_shared_prefix_tokens) + 2
        if context_limit_tokens < need:
            raise UsageError(
                f"--context-limit-tokens must be at least twice the shared prefix + 2 ({need:,} tokens), got {context_limit_tokens:,}"
            )
        params = dataclasses.replace(params, context_limit_tokens=context_limit_tokens)
    if rate_per_s is not None:
        params = dataclasses.replace(params, session_rate_per_s=rate_per_s)
    if sessions is None and calls is None:
        sessions = DEFAULT_SESSIONS
    fit = shares = None
    if real is not None:
        trace = synthesize(sessions, n_calls=calls, seed=seed, params=params)
        write_trace(trace, output, inputs=[like])
        summary = _summary(trace.calls, output, time.perf_counter() - started)
        fit, shares = fit_report(real, trace), share_report(real, trace)
    else:  # streamed: chunks of whole sessions, memory independent of --calls/--sessions
        chunks, meta = synth_chunks(sessions, n_calls=calls, seed=seed, params=params)
        acc = _Summary()
        write_trace_chunks(chunks, meta, output, on_chunk=acc.add)
        summary = acc.result(output, time.perf_counter() - started)
    if as_json:
        obj: dict[str, object] = {"summary": summary}
        if fit is not None:
            obj["fit"] = fit.to_dicts()
            obj["shares"] = shares.to_dicts()
        emit_json(obj)
        return
    print_table(
        pl.DataFrame({"quantity": list(summary), "value": [num(v) for v in summary.values()]})
    )
    if fit is not None:
        click.echo(f"\nFit to {like} (real vs synthetic):")
        print_table(fit)
        click.echo("")
        print_table(shares)


def _summary(df: pl.DataFrame, output: Path, seconds: float) -> dict[str, object]:
    sub = int(df["agent_id"].is_not_null().sum())
    return {
        "output": str(output),
        "sessions": df["session_id"].n_unique(),
        "calls": df.height,
        "subagent_calls": sub,
        "compactions": int(df["is_compaction"].sum()),
        "input_tokens_p50": float(df["input_tokens"].median() or 0),
        "max_input_tokens": int(df["input_tokens"].max() or 0),
        "output_tokens_p50": float(df["output_tokens"].median() or 0),
        "duration_s": round(float(df["t_start_s"].max() or 0.0), 3),
        "elapsed_s": round(seconds, 3),
    }


class _Summary:
    """``_summary`` of a trace seen chunk by chunk (chunks hold whole sessions): counts add
    up, medians come exact from value counts (few distinct token counts, not one per call)."""

    def __init__(self) -> None:
        self.n = {"sessions": 0, "calls": 0, "subagent_calls": 0, "compactions": 0}
        self.max_input, self.t_max = 0, 0.0
        self.counts: dict[str, pl.DataFrame] = {}

    def add(self, df: pl.DataFrame) -> None:
        self.n["sessions"] += df["session_id"].n_unique()
        self.n["calls"] += df.height
        self.n["subagent_calls"] += int(df["agent_id"].is_not_null().sum())
        self.n["compactions"] += int(df["is_compaction"].sum())
        self.max_input = max(self.max_input, int(df["input_tokens"].max() or 0))
        self.t_max = max(self.t_max, float(df["t_start_s"].max() or 0.0))
        for c in ("input_tokens", "output_tokens"):
            vc = df[c].value_counts(name="n")
            old = self.counts.get(c)
            self.counts[c] = (
                vc if old is None else pl.concat([old, vc]).group_by(c).agg(pl.sum("n"))
            )

    def median(self, c: str) -> float:
        vc = self.counts[c].sort(c)
        v, cum = vc[c].to_numpy(), vc["n"].cum_sum().to_numpy()
        n = int(cum[-1])
        lo, hi = (int(np.searchsorted(cum, k, side="right")) for k in ((n - 1) // 2, n // 2))
        return float((v[lo] + v[hi]) / 2)

    def result(self, output: Path, seconds: float) -> dict[str, object]:
        n = self.n
        return {
            "output": str(output),
            **n,
            "input_tokens_p50": self.median("input_tokens") if n["calls"] else 0.0,
            "max_input_tokens": self.max_input,
            "output_tokens_p50": self.median("output_tokens") if n["calls"] else 0.0,
            "duration_s": round(self.t_max, 3),
            "elapsed_s": round(seconds, 3),
        }
