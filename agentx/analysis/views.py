"""One DuckDB connection with ready-made views over traces and run directories.

Traces become ``calls`` (one row per call, plus a ``trace`` column naming the file) and
``sessions`` (one row per session). Every run table becomes a view of the same name holding
the rows of all runs side by side, with a ``run`` column naming each run, so runs compare in
one query; a run table whose name is taken by a trace view is prefixed with its run kind
(a replay run's ``calls`` is ``replay_calls``). ``runs`` lists the runs (kind, system, model,
GPUs, trace fingerprint) and ``summary`` flattens each run's ``summary.json`` to numbers.

Data is read with polars and registered as Arrow (no copy); then file access is switched off
and the configuration locked, so a query can read only what was loaded and write nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentx.errors import AgentxError, InputError, one_line
from agentx.io import read_parquet_checked
from agentx.runs import Run, find_runs
from agentx.traces.io import read_trace
from agentx.traces.schema import META_SCHEMA_VERSION

TRACE_META = META_SCHEMA_VERSION.encode()

TRACE_VIEWS = ("calls", "sessions")
RUN_VIEWS = ("runs", "summary")

# Config keys that name the hardware system, model and GPU count, newest spelling first:
# producers landed at different times and the views must read all of them.
SYSTEM_KEYS = ("system", "hw", "hardware")
MODEL_KEYS = ("model", "model_name")
GPU_KEYS = ("gpus", "num_gpus", "n_gpus")

SESSIONS_SQL = """
SELECT trace, session_id,
       count(*) AS calls,
       count(agent_id) AS subagent_calls,
       arg_min(input_tokens, call_index) AS first_input_tokens,
       arg_max(input_tokens, call_index) AS last_input_tokens,
       max(input_tokens) AS max_input_tokens,
       sum(input_tokens) AS input_tokens,
       sum(reused_prefix_tokens) AS reused_prefix_tokens,
       sum(new_tokens) AS new_tokens,
       sum(output_tokens) AS output_tokens,
       count(*) FILTER (WHERE is_compaction) AS compactions,
       min(t_start_s) AS t_first_s,
       max(t_start_s) AS t_last_s,
       max(t_start_s) - min(t_start_s) AS duration_s,
       sum(reused_prefix_tokens) / nullif(sum(input_tokens), 0) AS reuse_ratio
FROM calls GROUP BY trace, session_id
ORDER BY trace, session_id
"""


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


def open_db(
    traces: Sequence[os.PathLike | str] = (),
    runs: Sequence[os.PathLike | str] = (),
    *,
    lock: bool = True,
) -> Database:
    """A DuckDB connection with views over ``traces`` (Parquet files) and every run under ``runs``.

    A Parquet file among ``traces`` that is an agentx table rather than a trace (``agentx
    kv-curve -o curve.parquet``) joins the view of that table, its ``run`` being the file's stem.
    """
    con = duckdb.connect(":memory:")
    db = Database(con)
    trace_paths, loose = _classify([Path(t) for t in traces])
    if trace_paths:
        _add_traces(db, trace_paths)
    tables: dict[str, list[pl.DataFrame]] = {}
    for path, view in loose:
        df, _ = read_parquet_checked(path)
        tables.setdefault(view, []).append(df.with_columns(pl.lit(path.stem).alias("run")))
    found: list[tuple[str, Run]] = []
    for root in runs:
        root = Path(root)
        if not root.exists():
            raise InputError(root, "no such run folder")
        for run in find_runs(root):
            found.append((_run_name(root, run), run))
    names = [n for n, _ in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(
            dup[0], "two runs share this name; pass folders whose runs have distinct paths"
        )
    if found:
        _add_runs(db, found, tables)
    for view, frames in sorted(tables.items()):
        df = pl.concat(frames, how="diagonal_relaxed")
        df = df.select(["run", *[c for c in df.columns if c != "run"]])
        _register(db, view, df, f"{view} of {len(frames)} run(s)")
    if lock:
        seal(con)
    return db


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


# Parquet key-value metadata that marks a file as one agentx table, and the view it joins.
TABLE_META = {b"agentx.table": None, b"agentx.kv_curve": "kv_curve"}


def _classify(paths: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Split Parquet paths into traces and (path, view) of standalone agentx tables."""
    traces, loose = [], []
    for p in paths:
        try:
            meta = pq.read_schema(p).metadata or {}
        except (OSError, pa.ArrowException):
            meta = {}  # read_trace will name the problem precisely
        view = next(
            (v or meta[k].decode(errors="replace") for k, v in TABLE_META.items() if k in meta),
            None,
        )
        if view in TRACE_VIEWS or view in RUN_VIEWS:  # a replay run's calls.parquet, given alone
            kind = meta.get(b"agentx.run_kind", b"run").decode(errors="replace")
            view = f"{kind.replace('-', '_')}_{view}"
        if view and TRACE_META not in meta:
            loose.append((p, view))
        else:
            traces.append(p)
    return traces, loose


def _register(db: Database, name: str, df: pl.DataFrame, source: str) -> None:
    table = df.to_arrow()
    db._frames.append(table)  # keep the Arrow buffers alive as long as the connection
    db.con.register(f"_src_{name}", table)
    from agentx.analysis.derived import derived_columns  # sums kept out of calls.parquet

    extra = derived_columns(name, df.columns)
    db.con.execute(f'CREATE VIEW "{name}" AS SELECT *{extra} FROM "_src_{name}"')
    db.views[name] = source


def _add_traces(db: Database, paths: list[Path]) -> None:
    stems = [p.stem for p in paths]
    frames = []
    for p, stem in zip(paths, stems, strict=True):
        label = stem if stems.count(stem) == 1 else str(p)
        frames.append(read_trace(p).calls.with_columns(pl.lit(label).alias("trace")))
    # traces from different importers carry different column types (an empty agent_id column
    # is Null in one, String in another): diagonal_relaxed finds the common supertype
    calls = pl.concat(frames, how="diagonal_relaxed")
    calls = calls.select(["trace", *[c for c in calls.columns if c != "trace"]])
    _register(db, "calls", calls, "trace calls: " + ", ".join(str(p) for p in paths))
    db.con.execute(f"CREATE VIEW sessions AS {SESSIONS_SQL}")
    db.views["sessions"] = "one row per session of the traces"


def _run_name(root: Path, run: Run) -> str:
    rel = run.path.relative_to(root) if run.path != root else Path(run.path.name)
    return rel.as_posix() if str(rel) != "." else run.path.resolve().name


def _first(dicts: Iterable[dict], keys: Iterable[str]) -> object:
    for d in dicts:
        for k in keys:
            if isinstance(d.get(k), (str, int, float)):
                return d[k]
    return None


def _run_row(name: str, run: Run) -> dict:
    m = run.manifest
    cfg = m.get("config") or {}
    trace = (m.get("inputs") or {}).get("trace") or {}
    # The configuration names the system; a replay's summary.json repeats it (with the catalog's
    # canonical spelling), which serves runs whose config used other keys.
    where = (cfg, run.summary())
    system, model, gpus = (
        _first(where, SYSTEM_KEYS),
        _first(where, MODEL_KEYS),
        _first(where, GPU_KEYS),
    )
    return {
        "run": name,
        "kind": run.kind,
        "run_id": m.get("run_id"),
        "path": str(run.path),
        "system": None if system is None else str(system),
        "model": None if model is None else str(model),
        "gpus": int(gpus) if isinstance(gpus, (int, float)) else None,
        "trace_path": trace.get("path"),
        "trace_sha256": trace.get("sha256"),
        "agentx_version": m.get("agentx_version"),
        "catalog_version": m.get("catalog_version"),
        "config": json.dumps(cfg, sort_keys=True, default=str),
    }


def _flatten(prefix: str, obj: object, out: list[tuple[str, float]]) -> None:
    if isinstance(obj, dict):
        for k in sorted(obj):
            _flatten(f"{prefix}.{k}" if prefix else str(k), obj[k], out)
    elif isinstance(obj, (bool, int, float)):
        out.append((prefix, float(obj)))


RUNS_SCHEMA = {
    "run": pl.String,
    "kind": pl.String,
    "run_id": pl.String,
    "path": pl.String,
    "system": pl.String,
    "model": pl.String,
    "gpus": pl.Int64,
    "trace_path": pl.String,
    "trace_sha256": pl.String,
    "agentx_version": pl.String,
    "catalog_version": pl.String,
    "config": pl.String,
}


def _add_runs(
    db: Database, found: list[tuple[str, Run]], tables: dict[str, list[pl.DataFrame]]
) -> None:
    runs = pl.DataFrame([_run_row(n, r) for n, r in found], schema=RUNS_SCHEMA)
    _register(db, "runs", runs, "one row per run directory")
    rows: list[tuple[str, str, float]] = []
    for name, run in found:
        flat: list[tuple[str, float]] = []
        _flatten("", run.summary(), flat)
        rows += [(name, k, v) for k, v in flat]
    summary = pl.DataFrame(
        rows, schema={"run": pl.String, "key": pl.String, "value": pl.Float64}, orient="row"
    )
    _register(db, "summary", summary, "numbers of each run's summary.json, one per row")
    for name, run in found:
        for table_file in sorted(run.path.glob("*.parquet")):
            view = table_file.stem
            if view in TRACE_VIEWS or view in RUN_VIEWS:
                view = f"{run.kind.replace('-', '_')}_{view}"
            df, _ = read_parquet_checked(table_file)
            tables.setdefault(view, []).append(df.with_columns(pl.lit(name).alias("run")))
