"""A trace file read as partitions of whole sessions, one at a time (bounded memory).

The cut points are those of ``agentx.replay.chunks.session_cuts`` on the whole file (the first
session start at or after each multiple of ``rows``; the last session start when no start
follows a multiple), so a streamed replay writes the same row groups as the in-memory one.
Each partition is validated as ``read_trace`` validates the whole file; a trace that cannot
be streamed this way (unreadable, not the current schema, a session split across the file, a
broken row) raises ``NotStreamable``, and callers read it whole, which words every error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import polars as pl

from agentx.errors import InputError
from agentx.traces import schema as S
from agentx.traces.batches import validate as validate_frame

# Traces with more rows than this replay out of core (agentx.replay.outofcore; here, where a
# replay reads it before it imports that). In memory a replay with KV tiers peaks
# at ~190 B a call (10 M synth calls: 1.90 GB, --calls full 1.92; --no-kv-tiers 1.59 GB); out
# of core the same 10 M calls peak at 1.17 GB (a peak that follows partitions and time ranges,
# not length), and in memory is ~2x faster.
OUT_OF_CORE_ROWS = int(os.environ.get("AGENTX_OUT_OF_CORE_ROWS", 10_000_000))


class NotStreamable(Exception):
    """The trace must be read whole (``read_trace``): its error, or its layout, says why."""


def trace_rows(path: os.PathLike | str) -> int | None:
    """Rows of a Parquet trace from its footer (None when it cannot be read that way)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # noqa: BLE001 (read_trace words every way a file can be unreadable)
        return None


def open_trace(path: os.PathLike | str):
    """(ParquetFile, metadata) of a current-schema trace with every column, or NotStreamable."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception:  # noqa: BLE001
        raise NotStreamable(path) from None
    raw = pf.schema_arrow.metadata or {}
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
    meta.pop("ARROW:schema", None)
    names = set(pf.schema_arrow.names)
    if meta.get(S.META_SCHEMA_VERSION) != S.SCHEMA_VERSION or not set(S.COLUMN_NAMES) <= names:
        raise NotStreamable(path)
    return pf, meta


def session_partitions(
    path: os.PathLike | str, columns: list[str], rows: int, *, validate: bool = True
) -> Iterator[tuple[int, pl.DataFrame]]:
    """(first row, frame of ``columns``) per partition, in file order."""
    pf, _ = open_trace(path)
    seen: list[pl.Series] = []
    read = list(S.COLUMN_NAMES) if validate else columns

    def emit(frame: pl.DataFrame) -> pl.DataFrame:
        if not validate:
            return frame.select(columns)
        try:
            validate_frame(frame, path)
            sessions = compact(frame["session_id"].unique())
            if seen and pl.concat(seen).is_in(sessions.implode()).any():
                raise NotStreamable(path)  # a session split across the file
        except (InputError, pl.exceptions.PolarsError):
            raise NotStreamable(path) from None
        seen[:] = [pl.concat([*seen, sessions])] if seen else [sessions]
        return S.conform(frame).select(columns)

    buf: list[pl.DataFrame] = []
    buf_off = pos = 0
    nxt = rows  # the smallest multiple of ``rows`` after the last session start seen
    last_start, last_sid = 0, None
    for rb in _batches(pf, rows, read):
        df = pl.from_arrow(rb)
        if df.height == 0:
            continue
        sid = df["session_id"]
        differs = (sid != sid.shift(1)).fill_null(True).to_numpy()
        if last_sid is not None and sid[0] == last_sid:
            differs[0] = False
        buf = [pl.concat([*buf, df])] if buf else [df]
        for s in np.flatnonzero(differs) + pos:
            if s >= nxt and s > buf_off:  # a partition ends before the session starting at s
                frame, rest = buf[0].slice(0, int(s - buf_off)), buf[0].slice(int(s - buf_off))
                yield buf_off, emit(frame)
                buf, buf_off = [rest], int(s)
            if s >= nxt:
                nxt = (int(s) // rows + 1) * rows
            last_start = int(s)
        pos += df.height
        last_sid = sid[-1]
    if not buf:
        return
    whole = pl.concat(buf)
    # a multiple of ``rows`` with no session start after it cuts at the last session start
    if nxt < pos and last_start > buf_off:
        yield buf_off, emit(whole.slice(0, last_start - buf_off))
        whole, buf_off = whole.slice(last_start - buf_off), last_start
    yield buf_off, emit(whole)


def _batches(pf, rows: int, columns: list[str]):
    """Record batches of at most ``rows``, one row group at a time: one ``iter_batches`` over
    a whole file keeps ~3 MB per batch alive in pyarrow's pool until it ends (2.9 GB at 100 M
    calls), a fresh one per row group frees each group's buffers."""
    for g in range(pf.metadata.num_row_groups):
        yield from pf.iter_batches(batch_size=rows, columns=columns, row_groups=[g])


def compact(strings: pl.Series) -> pl.Series:
    """``strings`` copied into their own buffer: a filtered string column is views into the
    whole partition's buffers, which keeping it would keep alive (~4 MB a partition)."""
    import pyarrow as pa

    return pl.Series(strings.name, strings.to_arrow().cast(pa.large_string()))
