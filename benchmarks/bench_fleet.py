"""A synthetic trace partitioned into shards and replayed as Ray tasks on a local Ray instance.

Plain script (no assertions)::

    .venv/bin/python benchmarks/bench_fleet.py --calls 10000000 --shards 64 --cpus 2

Steps, each timed: ``agentx synth`` (N calls, streamed), ``agentx partition`` (streamed for
the session router: agentx.fleet.stream), then one Ray task per shard
(``agentx.fleet.engines.run_ray``) reading only its shard, and the merge. Each task reports
its wall time and its worker's peak RSS (``ru_maxrss``: the worker's peak over every task it
ran, so the figure is per worker). Prints calls/s per worker, per-partition cost, and bytes
moved (shard files read by tasks, partial results returned to the driver).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed_replica(part, cfg, opts, replica):
    import pickle

    from agentx.fleet.replica import replay_replica

    t0 = time.perf_counter()
    p = replay_replica(part, cfg, opts, replica)
    dt = time.perf_counter() - t0
    p.summary["_bench"] = {
        "pid": os.getpid(),
        "wall_s": dt,
        "calls": p.summary.get("calls", 0),
        "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "result_bytes": len(pickle.dumps(p, protocol=5)),
    }
    print("bench-task", json.dumps(p.summary["_bench"]), flush=True)  # kept if the run is cut
    return p


def sample_shards(a, work: Path) -> None:
    """Per-partition cost and worker memory at the partition size of a --calls trace."""
    import polars as pl
    import ray

    from agentx.catalog import load_catalog
    from agentx.fleet.engines import run_ray
    from agentx.fleet.partition import Partition
    from agentx.fleet.replica import ReplicaOptions
    from agentx.replay.config import make_config
    from agentx.traces.io import read_trace

    per = a.calls // a.shards
    parts = []
    for k in range(a.sample_shards):
        f = work / f"shard-{per}-{k}.parquet"
        if not f.exists():
            subprocess.run(
                [sys.executable, "-m", "agentx", "synth", "--calls", str(per), "--seed", str(k),
                 "-o", str(f)], check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        tr = read_trace(f)
        calls = tr.calls.with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("trace_row"),
            pl.lit(0, pl.Int64).alias("fleet_store_tokens"),
        )
        parts.append(Partition(k, calls, tr.meta))
    cfg = make_config(load_catalog(()), "gb200", "kimi-k2")
    ray.init(num_cpus=a.cpus, include_dashboard=False, logging_level="ERROR",
             object_store_memory=2_000_000_000)  # fmt: skip
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    t = time.perf_counter()
    partials = run_ray(
        parts, cfg, ReplicaOptions(calls=a.calls_mode, max_block_refs=a.max_block_refs),
        fn=timed_replica,
    )  # fmt: skip
    wall = time.perf_counter() - t
    ray.shutdown()
    b = [p.summary["_bench"] for p in partials]
    out = {
        "trace_calls": a.calls, "shards": a.shards, "calls_per_partition": per,
        "partitions_run": a.sample_shards, "cpus": a.cpus, "max_block_refs": a.max_block_refs,
        "ray_wall_s": wall, "task_s": [x["wall_s"] for x in b],
        "calls_per_s_per_task": [x["calls"] / x["wall_s"] for x in b],
        "peak_rss_gb_per_worker": sorted({x["pid"]: x["maxrss_bytes"] / 1e9 for x in b}.values()),
        "result_bytes_per_partition": [x["result_bytes"] for x in b],
        "kv_block_size_tokens": [p.summary["kv_tiers"]["block_size_tokens"] for p in partials],
        "load": os.getloadavg(),
    }  # fmt: skip
    print(json.dumps(out, indent=2))


def _child(cmd: list[str]) -> tuple[float, int]:
    """Wall time and peak RSS of a CLI step run as its own process."""
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return time.perf_counter() - t, (peak if peak > before else before) * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10_000_000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--router", default="session")
    ap.add_argument("--calls-mode", default="summary", choices=("full", "summary", "none"))
    ap.add_argument("--max-block-refs", type=int, default=None, help="per task (agentx.kv)")
    ap.add_argument(
        "--sample-shards",
        type=int,
        default=0,
        help="instead: replay only this many shards of a --calls trace cut into --shards, each "
        "synthesized on its own (session routing keeps sessions whole, so a shard is a trace "
        "of whole sessions); for traces too large to route on this machine",
    )
    ap.add_argument("--dataset", type=Path, default=None, help="an existing partitioned dataset")
    ap.add_argument("--only-shards", type=int, default=0, help="replay only the first K partitions")
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep (default: temp)")
    a = ap.parse_args()

    import ray

    from agentx.catalog import load_catalog
    from agentx.fleet.engines import run_ray
    from agentx.fleet.merge import merge
    from agentx.fleet.partition import read_dataset
    from agentx.fleet.replica import ReplicaOptions
    from agentx.replay.config import make_config

    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.sample_shards:
        return sample_shards(a, work)
    trace = work / f"synth-{a.calls}.parquet"
    fig: dict = {"calls": a.calls, "shards": a.shards, "cpus": a.cpus, "router": a.router,
                 "max_block_refs": a.max_block_refs, "calls_mode": a.calls_mode}  # fmt: skip
    agentx = [sys.executable, "-m", "agentx"]
    os.environ.setdefault("AGENTX_MAX_CALLS_STREAMED", str(a.calls))  # synth's total cap
    if not trace.exists():  # streamed: memory follows the chunk, not --calls
        fig["synth_s"], fig["synth_maxrss_bytes"] = _child(
            [*agentx, "synth", "--calls", str(a.calls), "-o", str(trace)]
        )
    fig["trace_bytes"] = trace.stat().st_size
    cfg = make_config(load_catalog(()), "gb200", "kimi-k2")
    ds = a.dataset or work / f"ds-{a.shards}"
    if not (ds / "fleet.json").exists():  # streamed for the session router (agentx.fleet.stream)
        fig["partition_s"], fig["partition_maxrss_bytes"] = _child(
            [*agentx, "partition", str(trace), "--hw", "gb200", "--replicas", str(a.shards),
             "--router", a.router, "-o", str(ds), "-q"]
        )  # fmt: skip
    fig["dataset_bytes"] = sum(f.stat().st_size for f in ds.rglob("*.parquet"))
    manifest, parts = read_dataset(ds)
    if a.only_shards:  # a time-boxed run: the first K partitions (no merge)
        parts = parts[: a.only_shards]

    ray.init(num_cpus=a.cpus, include_dashboard=False, logging_level="ERROR",
             object_store_memory=2_000_000_000)  # fmt: skip
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    t = time.perf_counter()
    done = []

    def report(k, n):
        done.append((k, time.perf_counter() - t))
        sys.stderr.write(f"\rtasks {k}/{n}")

    partials = run_ray(
        parts,
        cfg,
        ReplicaOptions(calls=a.calls_mode, max_block_refs=a.max_block_refs),
        fn=timed_replica,
        report=report,
    )
    fig["ray_wall_s"] = time.perf_counter() - t
    ray.shutdown()
    merged = None
    if len(partials) == manifest["replicas"]:
        t = time.perf_counter()
        merged = merge(
            partials, manifest["replicas"], {"router": a.router, "sessions": manifest["sessions"]}
        )
        fig["merge_s"] = time.perf_counter() - t
    fig["driver_maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    b = [p.summary["_bench"] for p in partials if "_bench" in p.summary]
    walls = sorted(x["wall_s"] for x in b)
    per_worker: dict = {}
    for x in b:
        w = per_worker.setdefault(x["pid"], {"calls": 0, "busy_s": 0.0, "maxrss_bytes": 0})
        w["calls"] += x["calls"]
        w["busy_s"] += x["wall_s"]
        w["maxrss_bytes"] = max(w["maxrss_bytes"], x["maxrss_bytes"])
    fig.update(
        workers=len(per_worker),
        partitions_run=len(b),
        calls_run=sum(x["calls"] for x in b),
        calls_per_s_total=sum(x["calls"] for x in b) / fig["ray_wall_s"],
        calls_per_s_per_worker=[w["calls"] / w["busy_s"] for w in per_worker.values()],
        peak_rss_gb_per_worker=[w["maxrss_bytes"] / 1e9 for w in per_worker.values()],
        task_s={
            "min": walls[0],
            "p50": walls[len(walls) // 2],
            "max": walls[-1],
            "mean": sum(walls) / len(walls),
        },  # fmt: skip
        calls_per_partition_mean=a.calls / a.shards,
        result_bytes_total=sum(x["result_bytes"] for x in b),
        hit_ratio=merged and merged["summary"]["fleet"]["hit_ratio"],
        imbalance=merged and merged["summary"]["fleet"]["imbalance"],
        kv_block_size_tokens=sorted({p.summary["kv_tiers"]["block_size_tokens"] for p in partials}),
        load=os.getloadavg(),
    )
    print(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
