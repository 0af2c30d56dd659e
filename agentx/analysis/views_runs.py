"""The run views: ``runs`` (one row per run directory: kind, system, model, GPUs, trace
fingerprint, configuration), ``summary`` (each run's ``summary.json`` flattened to numbers)
and the frames of every run table, gathered per view with a ``run`` column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from agentx.analysis.derived import with_run_columns
from agentx.analysis.views_db import RUN_VIEWS, TRACE_VIEWS, Database, _register
from agentx.io import read_parquet_checked
from agentx.runs import Run

# Config keys that name the hardware system, model and GPU count, newest spelling first:
# producers landed at different times and the views must read all of them.
SYSTEM_KEYS = ("system", "hw", "hardware")
MODEL_KEYS = ("model", "model_name")
GPU_KEYS = ("gpus", "num_gpus", "n_gpus")


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
            if view == "replay_calls":  # what a summary file left out for its summary.json
                df = with_run_columns(df, run.summary())
            tables.setdefault(view, []).append(df.with_columns(pl.lit(name).alias("run")))
