"""Out-of-core ``agentx replay`` (issue 11: 100 M calls in <= 4 GB, time linear in calls).

Plain script (no assertions)::

    .venv/bin/python benchmarks/bench_outofcore.py TRACE.parquet [TRACE2 ...] [--repeats 3]
        [--in-memory] [--calls full|summary|none]

Runs the default replay (KV tiers on) of each trace out of core (``AGENTX_OUT_OF_CORE_ROWS=0``,
or in memory with ``--in-memory``) and prints wall and CPU seconds (user + sys: the measure
that load from other processes disturbs least), min and median of ``--repeats``, peak RSS,
the load average, and the least-squares slope of CPU seconds against calls (us per call).
Make the traces with ``AGENTX_MAX_CALLS_STREAMED=200000000 agentx synth -o s100m.parquet
--calls 100000000`` (and 10 M, 30 M). One untimed run of the smallest trace comes first, so
the compiling of a fresh numba cache is not timed.
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


def run_once(trace: Path, in_memory: bool, calls: str) -> tuple[float, float, float]:
    """(wall s, user+sys CPU s, peak RSS GB) of one ``agentx replay`` from its own rusage."""
    env = dict(os.environ, AGENTX_OUT_OF_CORE_ROWS="1000000000000" if in_memory else "0")
    with tempfile.TemporaryDirectory(dir=os.environ.get("AGENTX_SPILL_DIR")) as d:
        cmd = [sys.executable, "-m", "agentx", "replay", str(trace), "--hw", "h100", "--model",
               "llama3.1-70b", "--gpus", "8", "--quiet", "--calls", calls, "-o", f"{d}/run"]  # fmt: skip
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime, rss_gb(usage.ru_maxrss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--in-memory", action="store_true")
    ap.add_argument("--calls", default="full")
    a = ap.parse_args()
    import pyarrow.parquet as pq

    xs, ys = [], []
    # untimed: on an empty numba cache the first run compiles the kernels (25 s); the bundled
    # sample is too small to reach them all (the parallel ones)
    run_once(min(a.traces, key=lambda t: t.stat().st_size), a.in_memory, a.calls)
    print(f"load average before: {os.getloadavg()}")
    print("| calls | wall min | wall median | CPU min | CPU median | peak RSS GB | CPU us/call |")
    print("|---|---|---|---|---|---|---|")
    for trace in a.traces:
        n = pq.ParquetFile(trace).metadata.num_rows
        runs = np.array([run_once(trace, a.in_memory, a.calls) for _ in range(a.repeats)])
        wall, cpu, rss = runs[:, 0], runs[:, 1], runs[:, 2]
        xs.append(n)
        ys.append(np.min(cpu))
        print(f"| {n:,} | {wall.min():.1f} | {np.median(wall):.1f} | {cpu.min():.1f} | "
              f"{np.median(cpu):.1f} | {rss.max():.2f} | {cpu.min() / n * 1e6:.2f} |", flush=True)  # fmt: skip
    if len(xs) > 1:
        slope, icpt = np.polyfit(np.array(xs, float), np.array(ys), 1)
        print(f"CPU s = {icpt:.1f} + {slope * 1e6:.3f} us x calls (least squares over min CPU)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
