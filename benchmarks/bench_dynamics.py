"""Speed of the dynamics layer: sweep operating points per second, and the time-driven replay
of the shared Weka set (603 sessions, 42,535 calls) and of a synthetic hour of 3,000 sessions.

Run: .venv/bin/python benchmarks/bench_dynamics.py [--weka ../shared/traces/weka-claude-code]
Prints figures only; nothing here is asserted (timings never go in tests).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from agentx.catalog import load_catalog
from agentx.dynamics.admission import AdmissionPolicy, bursty_calls
from agentx.dynamics.disagg import run_layout
from agentx.dynamics.engine import simulate
from agentx.dynamics.service import AnalyticService
from agentx.dynamics.sweep import load_scenario, sweep

REPO = Path(__file__).resolve().parent.parent


def timed(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_sweep(cat) -> None:
    sc, _ = load_scenario("seed-study")
    t, (df, _) = timed(lambda: sweep(cat, sc["systems"], sc["gpus"], sc["model"]))
    print(
        f"sweep seed-study: {df.height:,} operating points in {t:.3f} s = {df.height / t:,.0f} points/s"
    )
    big = ["h100", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi355x"]
    t, (df, skipped) = timed(lambda: sweep(cat, big, [8, 16, 32, 64], sc["model"]), repeat=1)
    print(
        f"sweep 9 systems x 4 sizes: {df.height:,} points in {t:.3f} s = {df.height / t:,.0f} points/s ({len(skipped)} configs skipped: weights do not fit)"
    )


def bench_sim(label: str, calls, cat, hw: str, gpus: int, pools: str, policy: str) -> None:
    t, res = timed(
        lambda: run_layout(calls, cat, hw, "kimi-k2", gpus, pools, AdmissionPolicy(policy)),
        repeat=1,
    )
    s = res.summary
    print(
        f"simulate {label} on {gpus}x{hw} {pools} {policy}: {calls.height:,} calls, {s['decode_steps']:,} decode steps, "
        f"{s['span_s'] / 3600:,.1f} h simulated in {t:.2f} s ({calls.height / t:,.0f} calls/s, {s['decode_steps'] / t / 1e6:.2f} M steps/s); "
        f"TTFT p50 {s['ttft_s_p50']:.3f} s, TPOT p50 {s['tpot_s_p50'] * 1e3:.1f} ms, utilisation {s['mean_utilisation']:.3f}, "
        f"Little's law error {s['littles_law']['rel_error']:.4f}; TPOT p99 {s['tpot_s_p99'] * 1e3:.0f} ms, "
        f"backlog oscillation amplitude {s['oscillation_backlog']['amplitude']:.1f} calls"
    )


def replicate_sessions(calls, copies: int, window_s: float, seed: int = 0):
    """``copies`` copies of every session, each starting at a random time in ``window_s``:
    thousands of concurrent agents with the real session shapes."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    starts = calls.group_by("session_id", maintain_order=True).agg(
        pl.col("t_start_s").min().alias("s0")
    )
    parts = []
    for c in range(copies):
        shift = starts.with_columns(new0=pl.Series(rng.uniform(0, window_s, starts.height)))
        moved = calls.join(shift, on="session_id", maintain_order="left").with_columns(
            t_start_s=pl.col("t_start_s") - pl.col("s0") + pl.col("new0"),
            session_id=pl.lit(f"copy{c}-") + pl.col("session_id"),
        )
        parts.append(moved.drop("s0", "new0"))
    return pl.concat(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weka", default=str(REPO.parent / "shared" / "traces" / "weka-claude-code"))
    args = ap.parse_args()
    cat = load_catalog()
    t = time.perf_counter()
    small = bursty_calls(waves=1, per_wave=4, calls=2)
    simulate(small, AnalyticService(), AnalyticService())
    print(
        f"numba kernel ready in {time.perf_counter() - t:.1f} s (compile on first use, cached afterwards)"
    )
    bench_sweep(cat)
    from agentx.traces.synth import synthesize

    hour = synthesize(3000, seed=0, session_rate_per_s=3000 / 3600).calls
    for policy in ("greedy", "pi"):
        bench_sim(
            "synthetic hour (3,000 sessions)", hour, cat, "gb200", 64, "disaggregated", policy
        )
    if Path(args.weka).exists():
        from agentx.traces.importers import import_trace
        from agentx.traces.io import read_trace

        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "weka.parquet"
            import_trace("weka", args.weka, out)
            weka = read_trace(out).calls
            for pools, policy in (
                ("disaggregated", "greedy"),
                ("disaggregated", "pi"),
                ("aggregated", "greedy"),
            ):
                bench_sim(
                    "Weka set (603 sessions, 1 per 6 s)", weka, cat, "gb200", 16, pools, policy
                )
            import_trace("weka", args.weka, out, session_rate_per_s=1.0)
            dense = read_trace(out).calls
            bench_sim(
                "Weka set (603 sessions, 1 per s)",
                dense,
                cat,
                "b200",
                16,
                "disaggregated",
                "greedy",
            )
            crowd = replicate_sessions(weka, copies=10, window_s=3600.0)
            for policy in ("greedy", "pi"):
                bench_sim(
                    "Weka x10 (6,030 sessions in 1 h)",
                    crowd,
                    cat,
                    "gb200",
                    32,
                    "disaggregated",
                    policy,
                )
    else:
        print(f"Weka set not found at {args.weka}; skipped")


if __name__ == "__main__":
    main()
