"""Synthetic generator speed: 1M and 10M calls, generation and Parquet write.

Run: .venv/bin/python benchmarks/bench_synth.py [--sizes 1000000 10000000] [--out DIR]
Prints one line per size: calls/s of generation, seconds to generate, to validate, to
write the trace (write_trace: validation + zstd Parquet), generate + write, and the file size. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from agentx.traces.io import write_trace
from agentx.traces.schema import validate
from agentx.traces.synth import synthesize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the Parquet files (default: a temp folder)",
    )
    args = ap.parse_args()
    synthesize(10, seed=0)  # compile (or load) the numba kernel outside the timings
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        print(
            f"{'calls':>12} {'gen_s':>8} {'calls_per_s':>13} {'validate_s':>10} {'write_s':>8} {'total_s':>8} {'file_mb':>8} {'sessions':>9} {'compactions':>11}"
        )
        for n in args.sizes:
            t0 = time.perf_counter()
            trace = synthesize(n_calls=n, seed=args.seed)
            t1 = time.perf_counter()
            gen = t1 - t0
            validate(trace.calls)
            t_val = time.perf_counter() - t1
            path = out / f"synth-{n}.parquet"
            t1 = time.perf_counter()
            write_trace(trace, path)  # validates again, then writes
            t2 = time.perf_counter()
            df = trace.calls
            print(
                f"{n:>12,} {gen:>8.2f} {n / gen:>13,.0f} {t_val:>10.2f} {t2 - t1:>8.2f} {gen + t2 - t1:>8.2f} "
                f"{os.path.getsize(path) / 1e6:>8.1f} {df['session_id'].n_unique():>9,} {int(df['is_compaction'].sum()):>11,}"
            )
            del trace, df
            path.unlink()


if __name__ == "__main__":
    main()
