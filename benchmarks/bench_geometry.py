"""KV geometry and the per-call KV frame alone: CPU seconds and the memory they add.

Run: ``python benchmarks/bench_geometry.py TRACE.parquet [--repeats 3]``. The trace is read as
``agentx replay`` reads it (the columns pricing and the KV model use); then the sorts of the
start times (numpy's two and polars', agentx/kv/order.py), ``geometry`` (time order, chains,
block size, shared prefix) and ``finish_frame`` (time and energy per call, the columns put
back in trace row order) run ``--repeats`` times each. Printed per step: CPU
seconds (user + sys, the figure on a shared machine) min / median, wall min / median, and the
peak resident memory above what was resident before the step (an RSS probe sampling every
2 ms, in one extra run). Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentx.catalog import load_catalog  # noqa: E402
from agentx.kv import order  # noqa: E402
from agentx.kv.blocks import geometry  # noqa: E402
from agentx.kv.tiers import finish_frame  # noqa: E402
from agentx.replay.config import make_config  # noqa: E402
from agentx.replay.replay import TRACE_COLUMNS  # noqa: E402
from agentx.traces.io import read_trace_columns  # noqa: E402

KV_COLUMNS = ("is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_BYTES


class Probe:
    """Peak RSS while the block runs, sampled by a thread (numpy and polars both counted)."""

    def __enter__(self):
        gc.collect()
        self.base = self.peak = rss_bytes()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self.stop.wait(0.002):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, rss_bytes())


def measure(label: str, fn, repeats: int):
    """CPU and wall time of ``repeats`` plain runs, then one more run under the RSS probe (its
    sampling thread would otherwise share the CPU being measured)."""
    cpu, wall = [], []
    for _ in range(repeats):
        gc.collect()
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        del out
    with Probe() as p:
        out = fn()
    print(
        f"{label:<14} CPU {min(cpu):6.2f} / {statistics.median(cpu):6.2f} s   "
        f"wall {min(wall):6.2f} / {statistics.median(wall):6.2f} s   "
        f"peak +{(p.peak - p.base) / 1e6:7.0f} MB",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.perf_counter()
    tr = read_trace_columns(args.trace, [*TRACE_COLUMNS, *KV_COLUMNS])
    print(
        f"read {tr.calls.height:,} calls in {time.perf_counter() - t0:.1f} s, RSS {rss_bytes() / 1e9:.2f} GB"
    )
    cfg = make_config(load_catalog(), "gb200", gpus=32)
    # the time order's sort (agentx/kv/order.py): numpy's two sorts against polars'
    t = tr.calls.get_column("t_start_s").to_numpy()
    print(f"  (order.argsort_times takes numpy's {order.TIME_SORT} sort here)")
    measure("np.argsort", lambda: np.argsort(t), args.repeats)
    measure("  stable", lambda: np.argsort(t, kind="stable"), args.repeats)
    measure("polars", lambda: order.argsort(t), args.repeats)
    half = t[: t.size // 2]
    measure("  half: np", lambda: np.argsort(half), args.repeats)
    measure("  stable", lambda: np.argsort(half, kind="stable"), args.repeats)
    measure("  polars", lambda: order.argsort(half), args.repeats)
    geometry(type(tr)(tr.calls.head(1000), tr.meta))  # compile / load the kernels
    g = measure("geometry", lambda: geometry(tr), args.repeats)
    print(
        f"  block size {g.bs} tokens, {int(g.ref_off[-1]):,} references, {int(g.chain.max()) + 1:,} chains"
    )
    rng = np.random.default_rng(0)
    n = len(g.row)
    acc = rng.integers(0, 1000, (n, 7))  # the chain kernel's accumulator shape (time order)

    # as agentx.kv._replay_chains passes them: views of the accumulator, bytes as tokens
    cols = {f"kv_{t}_hit_tokens": acc[:, i] for i, t in enumerate(("hbm", "dram", "ssd"))}
    cols["kv_recompute_tokens"] = acc[:, 3]
    cols["kv_ssd_to_dram_bytes"] = acc[:, 4]
    cols["kv_dram_to_hbm_bytes"] = acc[:, 5]
    cols["kv_hbm_to_dram_bytes"] = cols["kv_dram_to_ssd_bytes"] = acc[:, 6]

    def frame():
        return finish_frame(cols, g.row, tr.calls.height, cfg, cfg.kv_bytes_per_token)

    measure("finish_frame", frame, args.repeats)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
