"""Speed of ``agentx simulate --users``: one 256-user point over the full shared Weka set
(603 sessions, 42,535 calls, 83 M block references) on 8 × B200 serving DeepSeek-V3 FP8.

Run: .venv/bin/python benchmarks/bench_agentic.py [--weka ../shared/traces/weka-claude-code]
Prints wall and CPU seconds (the machine is shared: CPU seconds are the fairer figure) for
the once-per-trace preparation and for each point; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from agentx.catalog import load_catalog
from agentx.dynamics import agentic as A
from agentx.replay.config import make_config
from agentx.traces.io import read_trace

REPO = Path(__file__).resolve().parent.parent


def clocks(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weka", default=str(REPO.parent / "shared/traces/weka-claude-code"))
    ap.add_argument("--trace", help="an imported Weka parquet (skips the import)")
    ap.add_argument("--users", type=int, default=256)
    args = ap.parse_args()
    path = args.trace
    if path is None:
        from agentx.traces.importers import import_trace

        path = os.path.join(tempfile.mkdtemp(), "weka.parquet")
        import_trace("weka", args.weka, path)
    print(f"load average before: {os.getloadavg()}")
    cfg = make_config(
        load_catalog([]), hw="b200", model="deepseek-v3", gpus=8, tp=8, pools="aggregated"
    )
    inst = A.instance_for(cfg)
    w, c, tr = clocks(lambda: read_trace(path))
    print(f"read {tr.calls.height:,} calls: {w:.2f} s wall, {c:.2f} s CPU")
    w, c, prep = clocks(lambda: A.prepare(tr))
    print(f"prepare (block references, once per sweep): {w:.2f} s wall, {c:.2f} s CPU")
    A.simulate_users(prep, inst, 2, A.AgenticConfig(horizon_s=1.0))  # compile / load the kernel
    for offload in ("none", "dram"):
        cfg_a = A.AgenticConfig(offload=offload, max_think_s=60.0)
        w, c, r = clocks(lambda cfg_a=cfg_a: A.simulate_users(prep, inst, args.users, cfg_a))
        s = r.summary
        print(
            f"{args.users} users, offload {offload}: {w:.2f} s wall, {c:.2f} s CPU "
            f"({s['iterations']:,} iterations, {s['done']:,} calls, makespan {s['makespan_s']:,.0f} s)"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
