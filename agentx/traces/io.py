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
