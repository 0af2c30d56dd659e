"""Benchmark-shape traces: fixed ISL/OSL, closed-loop clients at a concurrency.

The public serving harnesses (InferenceX, vLLM ``benchmark_serving``) send ``num_prompts``
requests of random tokens from ``concurrency`` clients in a closed loop: each client sends its
next request the moment the previous one finished. Lengths are drawn uniformly in
[r·L, L] with r = ``RANDOM_RANGE_RATIO`` = 0.8 (InferenceX
``utils/bench_serving/benchmark_serving.py``), and prompts are random, so no prefix is reused.
``num_prompts`` is about 10 × concurrency (SOURCES.md).

In the trace each client is a session whose calls run back to back: ``think_time_s`` = 0,
``reused_prefix_tokens`` = 0, ``trigger`` = ``request``. Arrival times of a closed loop depend
on the server, so every call carries ``t_start_s`` = 0 (ready at once, ordered by
``call_index``); the file metadata says ``closed_loop`` with the concurrency, which a
time-stepped simulator uses to start each call when its predecessor ends.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.errors import UsageError
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata

RANDOM_RANGE_RATIO = 0.8
PROMPTS_PER_CLIENT = 10


def benchmark_lengths(rng: np.random.Generator, nominal: int, n: int, ratio: float) -> np.ndarray:
    """Whole lengths uniform in [ratio·L, L] (both ends included), as the harness draws them."""
    lo = max(1, int(round(ratio * nominal)))
    return rng.integers(lo, nominal + 1, size=n, dtype=np.int64)


def synthesize_benchmark(
    isl_tokens: int,
    osl_tokens: int,
    concurrency: int,
    *,
    requests: int | None = None,
    seed: int = 0,
    range_ratio: float = RANDOM_RANGE_RATIO,
    model: str | None = None,
) -> Trace:
    """``requests`` (default 10 × concurrency) calls from ``concurrency`` closed-loop clients."""
    for name, v in (("--isl", isl_tokens), ("--osl", osl_tokens), ("--concurrency", concurrency)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise UsageError(f"{name} must be a positive integer, got {v!r}")
    n = PROMPTS_PER_CLIENT * concurrency if requests is None else requests
    if n < 1:
        raise UsageError(f"--requests must be a positive integer, got {n}")
    if not 0.0 < range_ratio <= 1.0:
        raise UsageError(f"range ratio must be in (0, 1], got {range_ratio}")
    ss = np.random.SeedSequence(seed).spawn(2)
    isl = benchmark_lengths(np.random.default_rng(ss[0]), isl_tokens, n, range_ratio)
    osl = benchmark_lengths(np.random.default_rng(ss[1]), osl_tokens, n, range_ratio)
    # Request i goes to client i mod C: the harness hands the next prompt to whichever client
    # frees first, which in steady state cycles through them.
    client = np.arange(n) % concurrency
    width = max(4, len(str(concurrency - 1)))
    names = pl.Series(np.char.add("c", np.char.zfill(client.astype(str), width)))
    const = np.zeros(n, np.int64)
    calls = pl.DataFrame(
        {
            "session_id": names,
            "agent_id": pl.Series([None], dtype=pl.String).gather(const),
            "call_index": np.arange(n) // concurrency,
            "t_start_s": np.zeros(n),
            "input_tokens": isl,
            "reused_prefix_tokens": const,
            "new_tokens": isl,
            "output_tokens": osl,
            "is_compaction": np.zeros(n, np.bool_),
            "shared_prefix_tokens": const,
            "trigger": pl.Series(["request"]).gather(const),
            "think_time_s": np.zeros(n),
            "block_size_tokens": pl.Series([None], dtype=pl.Int64).gather(const),
            "block_hashes": pl.Series([None], dtype=pl.List(pl.UInt64)).gather(const),
            "model": pl.Series([model], dtype=pl.String).gather(const),
            "source": pl.Series(["synth"]).gather(const),
        }
    ).sort(["session_id", "call_index"])
    options = {
        "seed": int(seed),
        "shape": "benchmark",
        "closed_loop": True,
        "concurrency": int(concurrency),
        "isl_tokens": int(isl_tokens),
        "osl_tokens": int(osl_tokens),
        "range_ratio": float(range_ratio),
        "requests": int(n),
    }
    return Trace(
        S.conform(calls),
        trace_metadata("synth", block_size_tokens=None, hash_scope="none", options=options),
    )
