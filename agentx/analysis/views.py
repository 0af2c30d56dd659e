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

import os
from collections.abc import Sequence
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from agentx.analysis.views_db import (
    INT64_MAX,
    INT64_MIN,
    RUN_VIEWS,
    SANDBOX,
    TRACE_VIEWS,
    Database,
    QueryError,
    _register,
    seal,
)
from agentx.analysis.views_runs import (
    GPU_KEYS,
    MODEL_KEYS,
    RUNS_SCHEMA,
    SYSTEM_KEYS,
    _add_runs,
    _run_name,
)
from agentx.errors import InputError
from agentx.io import read_parquet_checked
from agentx.runs import Run, find_runs
from agentx.traces.io import read_trace
from agentx.traces.schema import META_SCHEMA_VERSION

# The connection, result rendering and sandbox live in views_db, the run views in views_runs;
# this module builds the views (open_db) and keeps every public name importable from here.
__all__ = [
    "GPU_KEYS",
    "INT64_MAX",
    "INT64_MIN",
    "MODEL_KEYS",
    "RUNS_SCHEMA",
    "RUN_VIEWS",
    "SANDBOX",
    "SESSIONS_SQL",
    "SYSTEM_KEYS",
    "TABLE_META",
    "TRACE_META",
    "TRACE_VIEWS",
    "Database",
    "QueryError",
    "open_db",
    "seal",
]

TRACE_META = META_SCHEMA_VERSION.encode()

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
