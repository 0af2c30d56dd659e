"""KV tier speed: the stack kernel's block references per second, and the whole Weka set.

Run: ``python benchmarks/bench_kv.py [WEKA_DIR_OR_TRACE.parquet]`` (default: the shared Weka
set, imported first), then 1 M synthetic calls re-blocked to the reference budget.
``python benchmarks/bench_kv.py --chains TRACE.parquet``: the chain kernel alone and kv-curve
on a trace without hashes (min/median of 3, CPU and wall). Figures
only, no assertions. Each timed step runs once after a warm-up of the compiled kernels. For comparison, issue 4 cites kvcache-simulator 0.1.3 (C++ core) at
~11 s for a 10,000-request agentic trace at five cache budgets.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentx.catalog import load_catalog  # noqa: E402
from agentx.kv import kv_curve, replay_tiers  # noqa: E402
from agentx.kv.blocks import BlockStream, build_blocks  # noqa: E402
from agentx.kv.stack import lru_stack  # noqa: E402
from agentx.replay.config import make_config  # noqa: E402
from agentx.traces.io import read_trace  # noqa: E402
from agentx.units import rss_gb  # noqa: E402


def timed(label: str, fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    dt = time.perf_counter() - t0
    print(f"{label:<58} {dt:8.2f} s")
    return out, dt


def random_stream(n_refs: int, n_blocks: int, seed: int = 0) -> BlockStream:
    """Worst case for the kernel: random ids, so no run of references shares a distance."""
    rng = np.random.default_rng(seed)
    n_calls = n_refs // 100
    z = np.zeros(n_calls, np.int64)
    per = np.full(n_calls, 100, np.int64)
    return BlockStream(
        block_size_tokens=64, row=np.arange(n_calls), ref_off=np.arange(n_calls + 1) * 100,
        n_read=per, write_pos=per, input_tokens=per * 64, reused_tokens=per * 64,
        ref_block=rng.integers(0, n_blocks, n_refs), n_blocks=n_blocks,
        shared=np.zeros(n_blocks, bool), chain=z, agent=z, compaction=z.astype(bool),
    )  # fmt: skip


def main() -> None:
    lru_stack(random_stream(10_000, 1000))  # compile / load the cache
    s = random_stream(5_000_000, 500_000)
    cpu, wall = [], []
    for _ in range(3):  # CPU time (user + sys) is the figure on a shared machine
        c0, w0 = time.process_time(), time.perf_counter()
        lru_stack(s)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    for label, ts in (("CPU", cpu), ("wall", wall)):
        rates = sorted(s.n_refs / t / 1e6 for t in ts)
        print(
            f"stack kernel, 5 M random references, {label:<4} M refs/s: "
            f"min {rates[0]:.2f}, median {rates[1]:.2f}, max {rates[2]:.2f}"
        )
    print(f"  (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")

    src = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else REPO.parent / "shared" / "traces" / "weka-claude-code"
    )
    with tempfile.TemporaryDirectory() as d:
        if src.is_dir():
            from agentx.traces.importers import import_trace

            path = Path(d) / "weka.parquet"
            timed("import the Weka set (for reference)", import_trace, "weka", src, path)
        else:
            path = src
        tr, _ = timed("read + validate the trace", read_trace, path)
    cfg = make_config(load_catalog(), "gb200", "deepseek-v3")
    small = tr.calls.head(2000)
    replay_tiers(type(tr)(small, tr.meta), cfg)  # warm every kernel
    stream, t_build = timed("block model (64-token blocks)", build_blocks, tr)
    res, t_stack = timed("stack kernel (exact LRU distances)", lru_stack, stream)
    print(
        f"  calls {stream.n_calls:,}, block references {stream.n_refs:,}, segments {len(res.n):,}"
    )
    print(
        f"{'  -> block references per second (kernel)':<58} {stream.n_refs / t_stack / 1e6:8.2f} M/s"
    )
    print(
        f"{'  -> block references per second (blocks + kernel)':<58} {stream.n_refs / (t_build + t_stack) / 1e6:8.2f} M/s"
    )
    timed("replay_tiers, lru, write-through (read → per-call frame)", replay_tiers, tr, cfg)
    timed("replay_tiers, lru, write-back", replay_tiers, tr, cfg, write_policy="write-back")
    timed("replay_tiers, seed7 (two stack passes)", replay_tiers, tr, cfg, policy="seed7")
    grid = np.array([1e10, 3e10, 1e11, 3e11, 1e12])
    timed("kv_curve at five budgets (x 3 tiers)", kv_curve, tr, cfg, grid)
    timed("replay_tiers at 256-token serving blocks", replay_tiers, tr, cfg, block_size_tokens=256)
    timed("replay_tiers, belady (3 MIN runs), 256-token blocks", replay_tiers, tr, cfg, policy="belady", block_size_tokens=256)  # fmt: skip
    peak_gb = rss_gb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print(f"{'peak resident memory (Weka steps)':<58} {peak_gb:8.2f} GB")
    big_synthetic(cfg)


def big_synthetic(cfg) -> None:
    """1 M synthetic calls without hashes: billions of 64-token references, re-blocked to fit
    MAX_REFS (issue 4/6 follow-up: this used to die allocating ~25 GiB)."""
    from agentx.traces.synth import synthesize

    tr, _ = timed("synthesize 1 M calls (no block hashes)", synthesize, n_calls=1_000_000)
    res, dt = timed("replay_tiers, lru, 1 M synthetic calls (auto re-block)", replay_tiers, tr, cfg)
    s = res.summary
    print(f"  block size {s['block_size_tokens']} tokens, references {s['block_references']:,}")
    print(f"  {s['block_size_note']}")
    print(f"{'  -> block references per second (whole replay_tiers)':<58} {s['block_references'] / dt / 1e6:8.2f} M/s")  # fmt: skip
    peak_gb = rss_gb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print(f"{'peak resident memory (all steps)':<58} {peak_gb:8.2f} GB")


def chains_at_scale(path: Path, repeats: int = 3) -> None:
    """The chain kernel alone (geometry built once) and kv-curve on a synthetic trace without
    hashes (``--chains TRACE``, e.g. /work/big/s1m.parquet): CPU and wall min/median."""
    from agentx.kv.blocks import geometry
    from agentx.kv.chains import chain_outcomes
    from agentx.kv.curve import curve
    from agentx.kv.tiers import capacities_for

    os.environ.setdefault("AGENTX_MAX_CALLS", str(10**9))
    cfg = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
    tr = read_trace(path)
    g = geometry(tr)
    caps = capacities_for(cfg).tokens(cfg.kv_bytes_per_token)
    chain_outcomes(geometry(type(tr)(tr.calls.head(2000), tr.meta)), caps)  # compile / load
    for label, fn in (
        (
            f"chain kernel, {tr.calls.height:,} calls, {int(g.ref_off[-1]):,} refs",
            lambda: chain_outcomes(g, caps),
        ),  # fmt: skip
        (f"kv-curve (48 points), {tr.calls.height:,} calls", lambda: curve(tr, cfg)),
    ):
        cpu, wall = [], []
        for _ in range(repeats):
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        cpu.sort(), wall.sort()
        print(f"{label}: CPU s min {cpu[0]:.2f} median {cpu[len(cpu) // 2]:.2f}, wall s min {wall[0]:.2f} median {wall[len(wall) // 2]:.2f}")  # fmt: skip
    print(f"  (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--chains":
        chains_at_scale(Path(sys.argv[2]))
    else:
        main()
