"""Parquet in and out: the one layout agentx writes (whole, atomic, or appended row group by
row group) and the guarded read that turns a damaged file into one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from agentx.errors import InputError, UsageError, one_line
from agentx.io.atomic import atomic_path
from agentx.io.inputs import regular_file
from agentx.io.paths import PathLike


def write_parquet_atomic(
    df: pl.DataFrame,
    path: PathLike,
    metadata: dict[str, str] | None = None,
    *,
    compression: str = "zstd",
    inputs: Iterable[PathLike | None] = (),
) -> None:
    """Write ``df`` with key-value ``metadata`` atomically; byte-identical for equal input."""
    table = df.to_arrow()
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path, inputs=inputs) as tmp:
        write_parquet_file(table, tmp)


ROW_GROUP_ROWS = 1 << 20


def write_parquet_file(table: pa.Table, path: Path) -> None:
    """The one Parquet layout agentx writes (inside an atomic file or run folder)."""
    try:
        pq.write_table(
            table, path, compression="zstd", row_group_size=ROW_GROUP_ROWS, write_statistics=True
        )
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise UsageError(f"cannot write Parquet: {one_line(exc)}") from None


class ParquetAppender:
    """:func:`write_parquet_file`'s layout written piece by piece: tables with one schema
    appended as row groups, so a file bigger than memory streams out. One table appended
    gives the same bytes as ``write_parquet_file``; the file is opened on the first append
    (or, for none, at close with ``schema``)."""

    def __init__(self, path: Path, schema: pa.Schema | None = None) -> None:
        self.path, self.schema, self._w = path, schema, None

    def append(self, table: pa.Table) -> None:
        if self._w is None:
            self.schema = table.schema
            self._w = pq.ParquetWriter(
                self.path, table.schema, compression="zstd", write_statistics=True
            )
        elif table.schema != self.schema:
            table = table.cast(self.schema)  # metadata and nullability as the first piece
        self._w.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def close(self) -> None:
        if self._w is None:
            if self.schema is None:
                raise UsageError("cannot write Parquet: no table and no schema")
            self.append(self.schema.empty_table())
        self._w.close()


def decode_metadata(raw: dict[bytes, bytes] | None) -> dict[str, str]:
    """Parquet key-value metadata as text; undecodable bytes become U+FFFD, never a crash."""
    meta = {
        k.decode("utf-8", errors="replace"): v.decode("utf-8", errors="replace")
        for k, v in (raw or {}).items()
    }
    meta.pop("ARROW:schema", None)
    return meta


def read_parquet_checked(path: PathLike) -> tuple[pl.DataFrame, dict[str, str]]:
    """Read a Parquet file and its key-value metadata, turning damage into one clear line."""
    p = regular_file(path, "Parquet file")
    try:
        table = pq.ParquetFile(p).read()
    except pa.ArrowMemoryError:
        raise InputError(
            p, "not enough memory to read it; free memory or use a smaller trace"
        ) from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(p, f"not a readable Parquet file ({one_line(exc)})") from None
    meta = decode_metadata(table.schema.metadata)
    # polars reads Arrow metadata as UTF-8 (and panics on anything else): it gets none
    table = table.replace_schema_metadata(None)
    try:
        df = pl.from_arrow(table)
    except Exception as exc:  # an Arrow type polars cannot hold: name it, no panic
        raise InputError(p, f"holds a column type agentx cannot read ({one_line(exc)})") from None
    return df, meta
