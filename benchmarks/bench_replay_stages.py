"""The stages of ``agentx replay --no-kv-tiers`` on one trace: CPU seconds, wall and peak RSS each.

Plain script (no assertions): ``.venv/bin/python benchmarks/bench_replay_stages.py TRACE.parquet
[--repeats 3] [--calls summary|full]``. Each repeat runs in a fresh process; per stage it
prints min and median CPU seconds (user + sys of all threads, the measure that load from other
processes disturbs least), min wall and the stage's own peak RSS (the process's high-water
mark is reset before each stage). Stages: read + validate (session codes), pricing alone,
pricing + writing calls.parquet (the writer thread overlapping the pricing), the latency
quantiles and the resident-KV peak of the merge, and the whole merge as ``agentx replay``
runs it. Issue 11 goals at 10 M calls: read ≤ 1.5 s, writing ≤ 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentx.units import rss_gb


def _hwm_gb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return rss_gb(int(line.split()[1]))
    return float("nan")


def _stage(out: dict, name: str, fn):
    try:  # reset the high-water mark to the current RSS (Linux), so the peak is the stage's
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    c, w = time.process_time(), time.perf_counter()
    res = fn()
    out[name] = (time.process_time() - c, time.perf_counter() - w, _hwm_gb())
    return res


def one_run(trace: str, calls_mode: str) -> dict:
    import numpy as np

    from agentx.catalog import load_catalog
    from agentx.cli.cmd_replay import _priced_columns
    from agentx.replay import make_config
    from agentx.replay.chunks import replay_chunks
    from agentx.replay.replay import (
        TRACE_COLUMNS,
        calls_columns,
        merge_partials,
        write_calls,
    )
    from agentx.replay.timeline import peak_resident, quantiles
    from agentx.traces.io import read_trace_columns

    cfg = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
    out: dict = {}
    tr = _stage(
        out,
        "read + validate",
        lambda: read_trace_columns(trace, list(TRACE_COLUMNS), session_codes=True),
    )
    names = tr.session_names
    small = tr.calls.head(1000)  # load the compiled kernels before any stage is timed
    merge_partials([p.slim() for p in replay_chunks(small, cfg)], cfg)
    slim = _stage(
        out, "pricing (no write)", lambda: [p.slim() for p in replay_chunks(tr.calls, cfg)]
    )
    cols = calls_columns(calls_mode, tr.calls.columns + list(_priced_columns(None)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calls.parquet"
        parts = lambda: list(write_calls(replay_chunks(tr.calls, cfg), path, {}, cols, names))  # noqa: E731
        _stage(out, f"pricing + writing calls ({calls_mode})", parts)
        out["calls.parquet MB"] = path.stat().st_size / 1e6
        out[f"writing calls alone ({calls_mode}, sync)"] = (
            _write_alone(tr, cfg, cols, path),
            0.0,
            0.0,
        )
    import polars as pl

    calls = pl.concat([p.calls for p in slim])
    ttft = calls["ttft_s"].to_numpy().astype(np.float64)
    busy = ttft + calls["decode_latency_s"].to_numpy()
    _stage(out, "quantiles (6)", lambda: (quantiles(ttft), quantiles(busy)))
    t0 = calls["t_start_s"].to_numpy().astype(np.float64)
    ctx = (calls["input_tokens"] + calls["output_tokens"]).to_numpy().astype(np.float64)
    _stage(out, "resident-KV peak", lambda: peak_resident(t0, ctx, busy, cfg.decode_batch))
    _stage(out, "merge (slim partials)", lambda: merge_partials(slim, cfg))
    return out


def _write_alone(tr, cfg, cols, path) -> float:
    """CPU seconds of writing calls.parquet alone: each partition priced untimed, then its
    ids decoded, converted to Arrow and encoded in this thread (as the writer thread does)."""
    from agentx.replay.callsfile import arrow_table, float_shapes, open_writer, write_group
    from agentx.replay.chunks import replay_chunks

    spent, writer, sink = 0.0, None, None
    for p in replay_chunks(tr.calls, cfg):
        frame = p.calls.select(cols) if cols else p.calls
        c = time.thread_time()
        table = arrow_table(frame, tr.session_names)
        if writer is None:
            writer, sink = open_writer(path, table, float_shapes(frame))
        write_group(writer, table)
        spent += time.thread_time() - c
    c = time.thread_time()
    writer.close()
    sink.close()
    return spent + time.thread_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", default="summary", choices=("summary", "full"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_run(a.trace, a.calls)))
        return
    print(f"{a.trace}; load average before: {os.getloadavg()}")
    cmd = [sys.executable, __file__, a.trace, "--calls", a.calls, "--child"]
    runs = [
        json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        for _ in range(a.repeats)
    ]
    for name in runs[0]:
        if name.endswith("MB"):
            print(f"{name:<40} {runs[0][name]:8.1f}")
            continue
        cpu = sorted(r[name][0] for r in runs)
        if name.endswith("sync)"):
            print(f"{name:<40} CPU min {cpu[0]:6.2f} s  median {cpu[len(cpu) // 2]:6.2f} s")
            continue
        wall = min(r[name][1] for r in runs)
        rss = max(r[name][2] for r in runs)
        print(
            f"{name:<40} CPU min {cpu[0]:6.2f} s  median {cpu[len(cpu) // 2]:6.2f} s  wall min {wall:6.2f} s  peak RSS {rss:5.2f} GB"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
