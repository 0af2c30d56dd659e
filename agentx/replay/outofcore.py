"""A single-instance replay of a trace file in bounded memory (traces past
``agentx.traces.partitions.OUT_OF_CORE_ROWS``).

The in-memory replay holds per-call arrays of the whole trace (the read, the KV geometry and
outcomes, the latencies for quantiles and the HBM peak): about 430 bytes a call. Here memory
follows one partition of whole sessions and one time range instead:

1. with KV tiers, a first read validates every partition and spills each call's chain inputs
   by time range (agentx.kv.stream); the chain kernel then walks the ranges in time order;
2. a second read prices each partition (``replay_partition``) with its KV outcomes, writes
   its rows to calls.parquet and spills the two latencies (for exact quantiles,
   agentx.replay.bounded) and each call's arrival and finish (for the exact HBM peak sweep).

Results equal the in-memory replay: integers exactly, float sums to rounding, the same
calls.parquet row groups (tests/test_outofcore.py). Spill files live in a temporary folder
(``AGENTX_SPILL_DIR`` or the system's) that is always removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from agentx.errors import UsageError
from agentx.replay.bounded import (
    Spill,
    bucket_of,
    peak_state,
    quantiles,
    sweep_bucket,
    time_buckets,
)
from agentx.replay.chunks import CHUNK_ROWS
from agentx.replay.replay import (
    TRACE_COLUMNS,
    Totals,
    priced_columns,
    replay_partition,
    replay_result,
    write_calls,
)
from agentx.replay.stages import KEYS, STAGES
from agentx.traces.partitions import NotStreamable, open_trace

BUCKET_ROWS = 1 << 20  # calls per time range: one range is sorted in memory at a time
SAMPLE = 1 << 20  # t_start_s values sampled to place the time ranges
LAT = np.dtype([("ttft", "<f8"), ("decode", "<f8")])
EVENT = np.dtype([("t", "<f8"), ("ctx", "<f8")])


def replay_file(path, cfg, *, kv_tiers=True, capacities=None, calls_path=None, meta=None,
                columns=None, rows: int = CHUNK_ROWS, bucket_rows: int = BUCKET_ROWS,
                max_refs: int | None = None):  # fmt: skip
    """``ReplayResult`` (no calls frame) of the trace at ``path``; raises ``NotStreamable``
    when the trace must be read whole (a hashed trace with KV tiers, a broken or unusual file).
    ``capacities``: the KV tiers' (default ``capacities_for(cfg)``), as ``replay_tiers``;
    ``max_refs``: its block-reference budget (default ``MAX_REFS``)."""
    from agentx.replay.footprint import check_fits

    check_fits(cfg)
    if rows <= 0:
        raise UsageError(f"--chunk-rows must be positive, got {rows}")
    pf, _ = open_trace(path)
    if kv_tiers and _any_hashes(pf):
        raise NotStreamable(path)  # hashed traces keep the block stream (in memory)
    n = pf.metadata.num_rows
    bounds = time_buckets(_sample_times(pf, n), -(-n // max(bucket_rows, 1)))
    folder = tempfile.mkdtemp(prefix="agentx-spill-", dir=os.environ.get("AGENTX_SPILL_DIR"))
    try:
        kv = None
        if kv_tiers:
            from agentx.kv import capacities_for
            from agentx.kv.stream import KEEP, KvScan
            from agentx.traces.partitions import session_partitions

            budget = _max_refs() if max_refs is None else max_refs
            kv = KvScan(folder, bounds, 64, budget, True)
            for off, df in session_partitions(path, list(KEEP), rows):
                kv.add(off, df)
            kv.run(capacities or capacities_for(cfg), cfg.kv_bytes_per_token)
        return _price(path, cfg, kv, folder, bounds, calls_path, meta, columns, rows)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _max_refs() -> int:
    from agentx.kv.blocks import MAX_REFS

    return MAX_REFS


def _any_hashes(pf) -> bool:
    """Whether any row has block hashes (an all-null list column reads in no time)."""
    for i in range(pf.metadata.num_row_groups):
        col = pf.read_row_group(i, columns=["block_hashes"]).column(0)
        if col.null_count != len(col):
            return True
    return False


def _sample_times(pf, n: int) -> np.ndarray:
    step = max(1, n // SAMPLE)
    got, skip = [], 0
    for i in range(pf.metadata.num_row_groups):
        t = pf.read_row_group(i, columns=["t_start_s"]).column(0).to_numpy()
        got.append(t[(-skip) % step :: step])
        skip = (skip + t.size) % step
    return np.concatenate(got) if got else np.zeros(0)


def _price(path, cfg, kv, folder, bounds, calls_path, meta, columns, rows):
    from agentx.traces.partitions import session_partitions

    nb = bounds.size + 1
    lat = Spill(folder, "latency", 1, LAT)
    arrive, finish = Spill(folder, "arrive", nb, EVENT), Spill(folder, "finish", nb, EVENT)
    kv_sums = {}
    priced = priced_columns(() if calls_path is None else columns)

    def parts():
        for i, (off, df) in enumerate(
            session_partitions(path, list(TRACE_COLUMNS), rows, validate=kv is None)
        ):
            per_call = None if kv is None else kv.per_call(i, off, df.height, cfg)
            if per_call is not None:
                for c in per_call.columns:
                    kv_sums[c] = kv_sums.get(c, 0.0) + float(per_call[c].sum())
            # a writer thread encodes calls.parquet beside: it keeps the second core
            yield replay_partition(df, cfg, per_call, priced, calls_path is None)

    totals = Totals(0, np.zeros((len(STAGES), len(KEYS))), {c: 0 for c in TRACE_COLUMNS[4:]}, 0, 0)
    for p in write_calls(parts(), calls_path, meta, columns):
        c = p.calls
        totals.calls += c.height
        totals.sums += p.sums
        totals.sessions += p.sessions
        totals.over_context += p.over_context
        for k, v in p.tokens.items():
            totals.tokens[k] += v
        ttft, dec = c["ttft_s"].to_numpy(), c["decode_latency_s"].to_numpy()
        rec = np.empty(c.height, LAT)
        rec["ttft"], rec["decode"] = ttft, dec
        lat.append(0, rec)
        t0 = c["t_start_s"].to_numpy().astype(np.float64)
        ctx = (c["input_tokens"] + c["output_tokens"]).to_numpy().astype(np.float64)
        t1 = t0 + (ttft + dec)
        for spill, t in ((arrive, t0), (finish, t1)):
            ev = np.empty(c.height, EVENT)
            ev["t"], ev["ctx"] = t, ctx
            spill.add(bucket_of(t, bounds), ev)
    latency = {}
    for name, field in (("ttft_s", "ttft"), ("decode_latency_s", "decode")):
        qs = quantiles(
            lambda f=field: _chunks(lat.paths[0], LAT, f), totals.calls, (0.5, 0.9, 0.99)
        )
        latency[name] = dict(zip(("p50", "p90", "p99"), qs, strict=True))
    state = peak_state()
    for b in range(nb):
        a, f = arrive.take(b), finish.take(b)
        sweep_bucket(a["t"], a["ctx"], f["t"], f["ctx"], cfg.decode_batch, state)
    resident = (float(state[2]), float(state[3])) if totals.calls else (0.0, 0.0)
    kv_summary = None if kv is None else kv.summary(cfg, kv_sums)
    return replay_result(None, cfg, totals, latency, resident, kv_summary)


def _chunks(path, dtype, field, rows: int = 1 << 22):
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        while True:
            a = np.fromfile(f, dtype, count=rows)
            if a.size == 0:
                return
            yield a[field]


__all__ = ["NotStreamable", "replay_file"]
