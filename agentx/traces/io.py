"""Reading and writing canonical traces (Parquet + key-value metadata)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from agentx.errors import InputError
from agentx.io import read_parquet_checked, write_parquet_atomic
from agentx.traces import schema as S


@dataclass(frozen=True)
class Trace:
    """A validated trace: the calls frame and its file metadata."""

    calls: pl.DataFrame
    meta: dict[str, str] = field(default_factory=dict)
    # with session_id as integer codes (read_trace_columns(session_codes=True)): the ids
    session_names: pl.Series | None = field(default=None, compare=False, repr=False)

    @property
    def source(self) -> str:
        return self.meta.get(S.META_SOURCE, "unknown")

    @property
    def hash_scope(self) -> str:
        return self.meta.get(S.META_HASH_SCOPE, "none")


def trace_metadata(
    source: str, *, block_size_tokens: int | None, hash_scope: str, options: dict | None = None
) -> dict[str, str]:
    return {
        S.META_SCHEMA_VERSION: S.SCHEMA_VERSION,
        S.META_SOURCE: source,
        S.META_BLOCK_SIZE: "" if block_size_tokens is None else str(block_size_tokens),
        S.META_HASH_SCOPE: hash_scope,
        S.META_OPTIONS: json.dumps(options or {}, sort_keys=True),
    }


def write_trace(trace: Trace, path: os.PathLike | str, inputs: Iterable = ()) -> None:
    """Validate and write atomically; ``inputs`` may not be overwritten or enclose ``path``."""
    df = S.conform(trace.calls)
    S.validate(df, path)
    meta = {S.META_SCHEMA_VERSION: S.SCHEMA_VERSION, **trace.meta}
    write_parquet_atomic(df, path, meta, inputs=inputs)


def write_trace_chunks(
    chunks: Iterable[pl.DataFrame],
    meta: dict[str, str],
    path: os.PathLike | str,
    inputs: Iterable = (),
    on_chunk=None,
) -> None:
    """Write a trace arriving as frames of whole sessions, one at a time, atomically.

    Each frame is validated on its own (so the call limit applies per frame, not to the
    total, and memory follows the biggest frame); one frame gives :func:`write_trace`'s bytes.
    ``on_chunk(frame)`` sees every frame after it is written (e.g. for a summary).
    """
    from agentx.io import ParquetAppender, atomic_path

    meta = {S.META_SCHEMA_VERSION: S.SCHEMA_VERSION, **meta}
    with atomic_path(path, inputs=inputs) as tmp:
        out = ParquetAppender(tmp)
        for df in chunks:
            df = S.conform(df)
            S.validate(df, path)
            table = df.to_arrow()
            merged = dict(table.schema.metadata or {})
            merged.update({k.encode(): v.encode() for k, v in meta.items()})
            out.append(table.replace_schema_metadata(merged))
            if on_chunk is not None:
                on_chunk(df)
        out.close()


RAW_SUFFIXES = (".json", ".json.gz", ".jsonl", ".csv", ".gz")


def read_trace(path: os.PathLike | str, *, validate: bool = True) -> Trace:
    try:
        df, meta = read_parquet_checked(path)
    except InputError as err:
        if str(path).lower().endswith(RAW_SUFFIXES) and "not a readable Parquet" in str(err):
            # a raw public trace passed where a canonical one is expected: say how to convert it
            raise InputError(
                path,
                "a raw trace, not an agentx trace; convert it first with 'agentx import FORMAT SOURCE -o OUT.parquet'",
            ) from None
        raise
    version = meta.get(S.META_SCHEMA_VERSION)
    if version is None:
        raise InputError(
            path,
            f"not an agentx trace (no '{S.META_SCHEMA_VERSION}' metadata); convert it with 'agentx import'",
        )
    if version != S.SCHEMA_VERSION:
        raise InputError(
            path, f"trace schema version {version}, this agentx reads version {S.SCHEMA_VERSION}"
        )
    if validate:
        S.validate(df, path)
        df = S.conform(df)  # a column of null type (all values absent) gets its real type
    return Trace(df, meta)


def read_trace_columns(
    path: os.PathLike | str,
    columns: list[str],
    *,
    batch_rows: int = 1 << 20,
    session_codes: bool = False,
) -> Trace:
    """``read_trace`` keeping only ``columns``: every row is validated as ``read_trace`` does,
    in batches of whole sessions (``agentx.traces.batches``), so the columns a command does
    not use are never in memory for the whole file. Any problem falls back to ``read_trace``
    itself, so errors read exactly as there.

    ``session_codes``: ``session_id`` becomes UInt32 codes in the byte order of the ids (so
    sorting, ranking and grouping by it are unchanged) and ``Trace.session_names[code]`` is
    the id: 4 bytes per call instead of a 16-byte string view.
    """
    from agentx.traces.batches import NotValid, TraceBatches, lexical_codes

    try:
        batches = TraceBatches(path, columns, batch_rows=batch_rows, run_codes=session_codes)
        df = _gathered(batches, sum(length for _, length in batches.ranges))
    except (NotValid, pl.exceptions.PolarsError, OSError):
        df = None
    if df is None:  # broken or empty: read_trace words the error (or gives the empty frame)
        return _projected(read_trace(path), columns, session_codes)
    if not session_codes or "session_id" not in columns:
        return Trace(df, batches.meta)
    codes, names = lexical_codes(batches.run_names, df.get_column("session_id"))
    return Trace(df.with_columns(codes), batches.meta, session_names=names)


def _gathered(batches, rows: int) -> pl.DataFrame | None:
    """One frame of contiguous columns from the validated batches (None when there are none).

    A column that cannot be null (numbers, booleans: validated) is copied batch by batch into
    one array made up front, and the batch's decoded piece goes at once (the next batch's
    decode reuses its pages), so a column's whole array is made once and no batch is held:
    a concatenation at the end would hold every batch and make the whole trace a second time
    (0.4 s and 0.2 M page faults at 10 M calls). Other columns are concatenated (``_whole``).
    """
    import numpy as np

    arrays: dict[str, np.ndarray] = {}
    pieces: dict[str, list[pl.Series]] = {}
    names, off = [], 0
    for k in batches:
        names, height = k.columns, k.height
        for c in names:
            s = k.drop_in_place(c)
            if c not in arrays and c not in pieces:
                fixed = s.dtype.is_numeric() or s.dtype == pl.Boolean
                if not (fixed and c in _NEVER_NULL):
                    pieces[c] = []
            if c in pieces:
                pieces[c].append(s)
                continue
            # piece by piece: a batch with a carried session comes in two chunks, and
            # to_numpy of a chunked column first copies it whole (a view per chunk, but for
            # booleans, unpacked from bits)
            at = off
            for piece in s.get_chunks():
                values = piece.to_numpy()
                if c not in arrays:
                    arrays[c] = np.empty(rows, values.dtype)
                arrays[c][at : at + values.size] = values
                at += values.size
        off += height
    if off == 0:
        return None
    return pl.DataFrame(
        [pl.Series(c, arrays[c][:off]) if c in arrays else _whole(pieces[c]) for c in names]
    )


_NEVER_NULL = frozenset(c.name for c in S.COLUMNS if not c.nullable)


def _whole(pieces: list[pl.Series]) -> pl.Series:
    """One contiguous column of the batches' pieces; a column with no value anywhere is made
    as a null column (a concatenation would write out every null)."""
    n = sum(p.len() for p in pieces)
    if all(p.null_count() == p.len() for p in pieces):
        return pl.repeat(None, n, dtype=pieces[0].dtype, eager=True).alias(pieces[0].name)
    return pl.concat(pieces, rechunk=True)


def _projected(trace: Trace, columns: list[str], session_codes: bool = False) -> Trace:
    df = trace.calls.select(columns)
    if not session_codes or "session_id" not in columns:
        return Trace(df, trace.meta)
    from agentx.traces.batches import lexical_codes

    sid = df.get_column("session_id")
    first = sid.ne_missing(sid.shift(1))
    run_names = sid.filter(first)
    if run_names.n_unique() != run_names.len():  # validated: cannot happen; say so if it does
        raise InputError(trace.source, "expected each session's rows to be contiguous")
    run_index = first.cast(pl.UInt32).cum_sum() - 1
    codes, names = lexical_codes(run_names, run_index)
    return Trace(df.with_columns(codes), trace.meta, session_names=names)
