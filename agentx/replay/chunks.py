"""The streaming driver's partitions: session-aligned row ranges of a trace, priced in order.

``replay_chunks`` feeds ``replay_partition`` one partition at a time (the CLI writes each as a
row group of calls.parquet while the next is priced); ``session_cuts`` says where they fall.
"""

from __future__ import annotations

import sys

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
    cuts=None,
):
    """``replay_partition`` over the session-aligned partitions of ``calls``, in order;
    ``columns``: the priced columns to keep (``priced_columns``; default all); ``parallel``:
    False where a calls.parquet writer thread runs beside (``replay_partition``); ``cuts``:
    ``session_cuts(calls, rows)`` where made already (the CLI: beside the KV kernel)."""
    kv_calls = _kv_frame(kv_calls, calls.height)
    columns = priced_columns(columns)
    cuts = session_cuts(calls, rows) if cuts is None else cuts
    memory = PricedMemory(len(columns) * max(n for _, n in cuts)) if len(cuts) > 1 else None
    for off, length in cuts:
        kv_part = None if kv_calls is None else kv_calls.slice(off, length)
        into = memory.take((len(columns), length)) if memory is not None else None
        yield replay_partition(calls.slice(off, length), cfg, kv_part, columns, parallel, into)


class PricedMemory:
    """Memory for the partitions' priced columns, used again once nothing refers to it.

    A partition's priced columns are columns × rows floats (42 MB at 2^19 rows with
    ``--calls summary``): a new array that large is new pages from the OS every time
    (numpy's allocator maps it afresh), 10 k page faults a partition. The partition's rows
    refer to the array (zero-copy polars columns, then the calls.parquet writer's Arrow
    table: every view of it holds a reference), so an array is taken again only when its
    reference count says nothing else does; else a new one is made. Nothing still read is
    ever written over; at most ``RING`` arrays are kept."""

    RING = 3  # one being priced, one being written, one whose last reference goes late

    def __init__(self, size: int) -> None:
        self._ring: list[np.ndarray] = []
        self._size = size

    def take(self, shape: tuple[int, int]) -> np.ndarray:
        need = shape[0] * shape[1]
        for i in range(len(self._ring)):
            # 2: the ring's own reference and the call's argument (no view of it is alive)
            if sys.getrefcount(self._ring[i]) == 2 and self._ring[i].size >= need:
                return self._ring[i][:need].reshape(shape)
        flat = np.empty(max(need, self._size))
        if len(self._ring) < self.RING:
            self._ring.append(flat)
        return flat[:need].reshape(shape)
