"""The DuckDB connection of ``agentx sql`` and the report: the ``Database`` handle, how a
query's result comes back (types rendered as text where the output format cannot hold them,
wide integers kept exact), one-line query errors, the sandbox that locks the connection, and
registering a frame as a view. Which views are built is ``agentx.analysis.views``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from agentx.errors import AgentxError, one_line

TRACE_VIEWS = ("calls", "sessions")
RUN_VIEWS = ("runs", "summary")


class QueryError(AgentxError):
    """A SQL query DuckDB refused (syntax, unknown name, forbidden file access)."""


@dataclass
class Database:
    """The open connection and what it holds (view name → source description)."""

    con: duckdb.DuckDBPyConnection
    views: dict[str, str] = field(default_factory=dict)
    _frames: list[object] = field(default_factory=list, repr=False)

    def query(self, sql: str, fmt: str = "parquet") -> pl.DataFrame:
        """Run ``sql`` and return the last statement's result as a polars frame.

        Values of types the output ``fmt`` cannot hold (INTERVAL, UNION, BIT, VARINT, dates past
        year 9999 …) are rendered as DuckDB's own text for them; integers wider than 64 bits
        stay integers when every value fits, and become text otherwise.
        """
        try:
            rel = self.con.sql(sql)
            if rel is None:  # the last statement returned no rows (CREATE, SET, …)
                return pl.DataFrame()
            as_text = [_needs_text(str(t), fmt) for t in rel.types]
            if any(as_text):
                rel = rel.project(
                    ", ".join(
                        f"CAST({_ident(c)} AS VARCHAR) AS {_ident(c)}" if txt else _ident(c)
                        for c, txt in zip(rel.columns, as_text, strict=True)
                    )
                )
            table = rel.to_arrow_table()
        except duckdb.Error as exc:
            raise QueryError(_explain(exc, self.views)) from None
        table = _plain_numbers(table)
        try:
            out = pl.from_arrow(table)
        except Exception as exc:  # an Arrow type polars cannot hold: refuse, naming the column
            raise QueryError(f"cannot render the result: {one_line(exc)}") from None
        return out if isinstance(out, pl.DataFrame) else out.to_frame()

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# DuckDB types no output format holds as a value: rendered as DuckDB's text for them.
_TEXT_ALWAYS = re.compile(r"\b(INTERVAL|UNION|BIT|VARINT|BIGNUM|TIME WITH TIME ZONE|TIMETZ)\b")
# Wide integers nested in a list or struct cannot be checked value by value: text as well.
_WIDE = re.compile(r"\b(U?HUGEINT|DECIMAL)\b")
# Types CSV, JSON and the table print from DuckDB's text: dates and times (year 10000 and
# 'infinity' have no Python value), blobs (bytes are not text) and, for CSV and the table,
# nested values (a list or struct is not one cell).
_TEXT_FOR_TEXT = re.compile(r"\b(DATE|TIME|TIMESTAMP\w*|BLOB|UUID|JSON)\b")
_NESTED = re.compile(r"[\[(]|^(STRUCT|MAP|UNION)")


def _needs_text(dtype: str, fmt: str) -> bool:
    if _TEXT_ALWAYS.search(dtype):
        return True
    nested = bool(_NESTED.search(dtype)) and not dtype.startswith("DECIMAL")
    if nested and _WIDE.search(dtype):
        return True
    if fmt == "parquet":
        return False
    if _TEXT_FOR_TEXT.search(dtype):
        return True
    return nested and fmt != "json"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _plain_numbers(table: pa.Table) -> pa.Table:
    # DuckDB widens integer sums to HUGEINT (a decimal in Arrow); token counts fit in Int64
    # and users expect integers in CSV/JSON, not decimal strings. A value past int64 keeps
    # its exact digits as text rather than wrapping around.
    for i, f in enumerate(table.schema):
        if not pa.types.is_decimal(f.type):
            continue
        col = table.column(i)
        if f.type.scale != 0:
            new = pc.cast(col, pa.float64())
        else:
            lo, hi = pc.min_max(col).values()
            fits = lo.as_py() is None or (lo.as_py() >= INT64_MIN and hi.as_py() <= INT64_MAX)
            new = pc.cast(col, pa.int64() if fits else pa.string())
        table = table.set_column(i, f.name, new)
    return table


def _explain(exc: duckdb.Error, views: dict[str, str]) -> str:
    msg = " ".join(str(exc).split("\n")[0].split())
    if isinstance(exc, duckdb.PermissionException):
        return f"query refused: {msg} (agentx sql reads only the loaded traces and runs; write results with -o)"
    if isinstance(exc, duckdb.CatalogException) and views:
        return f"query failed: {msg}; views: {', '.join(sorted(views))}"
    return f"query failed: {msg}"


# The sandbox, in order: once locked, nothing can turn file access back on. DuckDB always lets
# a query read and write its temp directory (by default '.tmp' in the working directory), so
# spilling is switched off: a query too large for memory fails instead of touching a file.
SANDBOX = (
    "SET python_enable_replacements = false",
    "SET TimeZone = 'UTC'",
    "SET temp_directory = ''",
    "SET allowed_directories = []",
    "SET allowed_paths = []",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


def seal(con: duckdb.DuckDBPyConnection) -> None:
    """Close every door from a query to the file system, then lock the configuration."""
    for stmt in SANDBOX:
        con.execute(stmt)


def _register(db: Database, name: str, df: pl.DataFrame, source: str) -> None:
    table = df.to_arrow()
    db._frames.append(table)  # keep the Arrow buffers alive as long as the connection
    db.con.register(f"_src_{name}", table)
    from agentx.analysis.derived import derived_columns  # sums kept out of calls.parquet

    select = derived_columns(name, df.columns)
    db.con.execute(f'CREATE VIEW "{name}" AS SELECT {select} FROM "_src_{name}"')
    db.views[name] = source
