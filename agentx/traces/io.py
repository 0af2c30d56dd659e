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
    path: os.PathLike | str, columns: list[str], *, batch_rows: int = 1 << 20
) -> Trace:
    """``read_trace`` keeping only ``columns``: every row is validated as ``read_trace`` does,
    in batches of whole sessions (rows are grouped by session), so the columns a command does
    not use are never in memory for the whole file. Any problem falls back to ``read_trace``
    itself, so errors read exactly as there."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        raw = pf.schema_arrow.metadata or {}
    except Exception:  # noqa: BLE001 (read_trace words every way a file can be unreadable)
        return _projected(read_trace(path), columns)
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
    meta.pop("ARROW:schema", None)
    if meta.get(S.META_SCHEMA_VERSION) != S.SCHEMA_VERSION or not set(S.COLUMN_NAMES) <= set(
        pf.schema_arrow.names
    ):
        return _projected(read_trace(path), columns)  # read_trace names what is missing
    kept, seen, carry = [], [], None
    try:
        for rb in pf.iter_batches(batch_size=batch_rows):
            df = pl.from_arrow(rb)
            df = df if carry is None else pl.concat([carry, df])
            sid = df["session_id"]
            differs = (sid != sid[-1]).to_numpy() if df.height else None
            cut = int(differs.nonzero()[0][-1]) + 1 if differs is not None and differs.any() else 0
            if cut:
                kept.append(_checked(df.slice(0, cut), path, seen, columns))
            carry = df.slice(cut)
        if carry is not None and carry.height:
            kept.append(_checked(carry, path, seen, columns))
    except (InputError, pl.exceptions.PolarsError):
        return _projected(read_trace(path), columns)  # the whole file names the row
    if not kept:
        return _projected(read_trace(path), columns)
    import pyarrow as pa

    pa.default_memory_pool().release_unused()  # the dropped columns' decode buffers
    return Trace(pl.concat(kept, how="vertical", rechunk=False), meta)  # no second copy


def _checked(df: pl.DataFrame, path, seen: list, columns: list[str]) -> pl.DataFrame:
    S.validate(df, path)
    sessions = df["session_id"].unique()
    if seen and pl.concat(seen).is_in(sessions.implode()).any():  # a session split across batches
        raise InputError(path, "expected each session's rows to be contiguous")
    seen.append(sessions)
    return df.select(columns)


def _projected(trace: Trace, columns: list[str]) -> Trace:
    return Trace(trace.calls.select(columns), trace.meta)
