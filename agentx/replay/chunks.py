"""The streaming driver's partitions: session-aligned row ranges of a trace, priced in order.

``replay_chunks`` feeds ``replay_partition`` one partition at a time (the CLI writes each as a
row group of calls.parquet while the next is priced); ``session_cuts`` says where they fall.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import UsageError
from agentx.replay.replay import _kv_frame, priced_columns, replay_partition

# Rows per partition of the streaming driver: one Parquet row group of calls.parquet. The
# partition being priced and the one the writer thread encodes are both in memory (their
# priced columns, Arrow tables and encoder buffers): at 2^20 rows they set the peak of a
# 10 M-call replay at its end (1.86-2.11 M KiB over runs), at 2^19 the chain kernel does
# (1.859 M KiB, every run), at the same speed.
CHUNK_ROWS = 1 << 19


def session_cuts(calls: pl.DataFrame, rows: int = CHUNK_ROWS) -> list[tuple[int, int]]:
    """(offset, length) partitions of ``calls`` of about ``rows`` rows, cut only between
    sessions. A trace whose sessions are not contiguous (not session-ordered) is one partition."""
    n = calls.height
    if rows <= 0:
        raise UsageError(f"--chunk-rows must be positive, got {rows}")
    if n <= rows:
        return [(0, n)]
    sid = calls.get_column("session_id")
    starts = np.flatnonzero(np.concatenate(([True], (sid[1:] != sid[:-1]).to_numpy())))
    if starts.size != sid.n_unique():
        return [(0, n)]
    # first session start at or after each multiple of ``rows``
    cuts = np.unique(
        starts[np.minimum(np.searchsorted(starts, np.arange(rows, n, rows)), starts.size - 1)]
    )
    bounds = np.concatenate(([0], cuts[cuts > 0], [n]))
    bounds = np.unique(bounds)
    return [(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def replay_chunks(
    calls: pl.DataFrame,
    cfg: ServingConfig,
    kv_calls=None,
    rows: int = CHUNK_ROWS,
    columns=None,
    parallel: bool = True,
):
    """``replay_partition`` over the session-aligned partitions of ``calls``, in order;
    ``columns``: the priced columns to keep (``priced_columns``; default all); ``parallel``:
    False where a calls.parquet writer thread runs beside (``replay_partition``)."""
    kv_calls = _kv_frame(kv_calls, calls.height)
    columns = priced_columns(columns)
    for off, length in session_cuts(calls, rows):
        kv_part = None if kv_calls is None else kv_calls.slice(off, length)
        yield replay_partition(calls.slice(off, length), cfg, kv_part, columns, parallel)
