"""Cost-model throughput on 10 million calls and end-to-end ``agentx replay`` with Parquet I/O.

Plain script (no assertions): ``.venv/bin/python benchmarks/bench_replay.py [--calls N]
[--e2e-calls N]``. Goal (issue 3): ≥ 5 million calls/s through the cost model on 2 cores, and
an end-to-end replay in a few seconds.

``--scale TRACE.parquet`` (issue 11) instead times whole commands on one trace, each as a
ratio to a polars scan of the same file in the same round of runs, with each command's peak
RSS: ``agentx replay`` (KV tiers on, --no-kv-tiers, --calls full), ``agentx kv-curve``; min
and median wall and CPU (user + sys) of ``--repeats`` rounds, the CPU and the load average.
Stage by stage: benchmarks/bench_replay_stages.py. Make the trace with ``agentx synth -o
/tmp/s.parquet --calls 10000000``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from agentx.units import rss_gb

PARALLEL_CALLS = 200_000


def weka_like_arrays(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token columns with the Weka medians (SOURCES.md §2): append 733, output 217, input 105k."""
    rng = np.random.default_rng(seed)
    new = np.rint(np.exp(rng.normal(np.log(733), 1.5, n)))
    prefix = np.rint(np.exp(rng.normal(np.log(100_000), 0.8, n)))
    prefix[rng.random(n) < 0.02] = 0  # first calls and compactions: prefills
    out = np.rint(np.exp(rng.normal(np.log(217), 1.1, n)))
    return {"new_tokens": new, "reused_prefix_tokens": prefix, "output_tokens": out}


def bench_cost_model(n: int) -> None:
    from agentx.catalog import load_catalog
    from agentx.replay import make_config
    from agentx.replay.replay import call_frame, price_calls

    cfg = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
    calls = weka_like_arrays(n)
    price_calls(cfg, weka_like_arrays(PARALLEL_CALLS))  # compile / load both kernels
    for label, fn in (("kernel columns", price_calls), ("call_costs frame", call_frame)):
        best = min(_timed(fn, cfg, calls) for _ in range(3))
        print(f"{label:<18} {n:>11,} calls  {best:6.2f} s  {n / best / 1e6:6.2f} M calls/s")


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def bench_end_to_end(n_calls: int) -> None:
    from agentx.catalog import load_catalog
    from agentx.replay import make_config, replay_trace
    from agentx.traces.io import write_trace
    from agentx.traces.synth import synthesize

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "synth.parquet"
        t = time.perf_counter()
        tr = synthesize(n_calls=n_calls, seed=1)
        write_trace(tr, trace)
        print(f"synthesize + write {tr.calls.height:,} calls: {time.perf_counter() - t:.2f} s")
        cfg = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
        replay_trace(tr.calls.head(PARALLEL_CALLS), cfg)  # compile / load the kernels
        t = time.perf_counter()
        replay_trace(tr, cfg)
        wall = time.perf_counter() - t
        print(
            f"replay_trace in memory (price, stage sums, footprint, no Parquet I/O): {wall:.2f} s = {tr.calls.height / wall / 1e6:.2f} M calls/s"
        )
        cmd = [
            sys.executable,
            "-m",
            "agentx",
            "replay",
            str(trace),
            "--hw",
            "gb200",
            "--gpus",
            "32",
            "--no-kv-tiers",
            "-q",
            "-o",
            str(Path(tmp) / "run"),
        ]
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        print(
            f"agentx replay end to end (process start, read, price, write run): {wall:.2f} s = {tr.calls.height / wall / 1e6:.2f} M calls/s"
        )


def _child(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS GB, CPU seconds user + sys) of one command, from its rusage."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return wall, rss_gb(usage.ru_maxrss), usage.ru_utime + usage.ru_stime


def bench_scale(trace: Path, repeats: int, curve: bool = True) -> None:
    """Each command ``repeats`` times, in rounds: a round runs every command once (the order
    turned by one each round), and a command's ratio is to the scan of its own round. This
    project's VMs drift: the same replay took 8 s and 12 s ten minutes apart (the host's
    load), so commands timed in blocks, one after the other, compare different machines.
    Each replay writes a new run folder, removed after it (outside its time): overwriting a
    run would time the removal of the last one's 1 GB calls.parquet too."""
    import shutil
    import statistics

    import polars as pl

    scan = [
        sys.executable,
        "-c",
        f"import polars as pl; pl.scan_parquet({str(trace)!r}).collect()",
    ]
    agentx = [sys.executable, "-m", "agentx"]
    hw = ["--hw", "gb200", "--gpus", "32"]
    cases = {
        "polars scan (whole file)": scan,
        "replay, KV tiers": [*agentx, "replay", str(trace), *hw, "-q", "-o"],
        "replay, KV tiers, --calls full": [
            *agentx, "replay", str(trace), *hw, "-q", "--calls", "full", "-o",
        ],
        "replay --no-kv-tiers": [*agentx, "replay", str(trace), *hw, "--no-kv-tiers", "-q", "-o"],
        "kv-curve (48 points)": [*agentx, "kv-curve", str(trace), *hw, "--json"],
    }  # fmt: skip
    if not curve:  # kv-curve still materializes the block stream (~18 GB at 10 M calls)
        del cases["kv-curve (48 points)"]
    n = pl.scan_parquet(trace).select(pl.len()).collect().item()
    print(f"{trace}: {n:,} calls; {cpu_name()}; load average before: {os.getloadavg()}")
    labels = list(cases)
    runs: dict[str, list] = {k: [] for k in labels}
    ratios: dict[str, list] = {k: [] for k in labels}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            turn = labels[r % len(labels) :] + labels[: r % len(labels)]
            walls = {}
            for label in turn:
                cmd = cases[label]
                out = Path(tmp) / "run"
                got = _child([*cmd, str(out)] if cmd[-1] == "-o" else cmd)
                shutil.rmtree(out, ignore_errors=True)
                runs[label].append(got)
                walls[label] = got[0]
            for label in labels:
                ratios[label].append(walls[label] / walls[labels[0]])
    floor = min(w for w, _, _ in runs[labels[0]])
    for label in labels:
        walls = sorted(w for w, _, _ in runs[label])
        cpus = sorted(c for _, _, c in runs[label])
        best, med = walls[0], statistics.median(walls)
        rss = max(r for _, r, _ in runs[label])
        print(
            f"{label:<32} min {best:6.2f} s  median {med:6.2f} s  x scan: min/min {best / floor:4.1f}, "
            f"median of rounds {statistics.median(ratios[label]):4.1f}  {n / best / 1e6:5.2f} M calls/s  "
            f"peak RSS {rss:4.2f} GB  CPU min {cpus[0]:6.2f} s median {statistics.median(cpus):6.2f} s",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()}")


def cpu_name() -> str:
    """The CPU model, as /proc/cpuinfo names it (the ratios depend on it: the chain kernel
    waits on memory, the scan on decoding)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU unknown"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000_000)
    ap.add_argument("--e2e-calls", type=int, default=10_000_000)
    ap.add_argument("--scale", type=Path, help="time whole commands on this trace instead")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-curve", action="store_true", help="skip kv-curve (large traces)")
    a = ap.parse_args()
    if a.scale is not None:
        bench_scale(a.scale, a.repeats, curve=not a.no_curve)
        raise SystemExit(0)
    bench_cost_model(a.calls)
    if a.e2e_calls:
        bench_end_to_end(a.e2e_calls)
