"""The results store: one run directory per replay, sweep, kv-curve or simulation.

A run directory holds one Parquet file per table, ``summary.json`` (headline figures) and
``run.json`` (what produced it: kind, inputs with their SHA-256, configuration, catalog and
agentx versions). No timestamps go into any file, so the same inputs give byte-identical runs.
Many run directories side by side under one folder can be compared with ``agentx sql --runs``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from agentx import __version__
from agentx.errors import InputError
from agentx.io import ensure_distinct, file_fingerprint, write_json_atomic, write_parquet_atomic

RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"


def write_run(
    run_dir: os.PathLike | str,
    kind: str,
    tables: dict[str, pl.DataFrame],
    *,
    summary: dict | None = None,
    inputs: dict[str, os.PathLike | str] | None = None,
    config: dict | None = None,
    catalog_version: str | None = None,
    written: tuple[str, ...] = (),
) -> Path:
    """Write ``tables`` (name → frame), ``summary.json`` and ``run.json`` into ``run_dir``;
    ``written`` names tables the caller already streamed into ``run_dir`` (atomically)."""
    run_dir = Path(run_dir)
    inputs = {k: Path(v) for k, v in (inputs or {}).items()}
    ensure_distinct(run_dir, inputs.values())
    for p in inputs.values():
        ensure_distinct(run_dir / "x", [p])
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        write_parquet_atomic(
            df, run_dir / f"{name}.parquet", {"agentx.run_kind": kind, "agentx.table": name}
        )
    if summary is not None:
        write_json_atomic(run_dir / SUMMARY_FILE, summary)
    ins = {
        k: {"path": str(p), "sha256": file_fingerprint(p) if p.is_file() else None}
        for k, p in sorted(inputs.items())
    }
    manifest = {
        "kind": kind,
        "agentx_version": __version__,
        "catalog_version": catalog_version,
        "inputs": ins,
        "config": config or {},
        "tables": sorted([*tables, *written]),
    }
    manifest["run_id"] = hashlib.sha256(
        json.dumps(manifest, sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    write_json_atomic(run_dir / RUN_FILE, manifest)
    return run_dir


@dataclass(frozen=True)
class Run:
    path: Path
    manifest: dict

    @property
    def kind(self) -> str:
        return self.manifest.get("kind", "unknown")

    @property
    def name(self) -> str:
        return self.path.name

    def table_path(self, name: str) -> Path:
        return self.path / f"{name}.parquet"

    def table(self, name: str) -> pl.DataFrame:
        p = self.table_path(name)
        if not p.exists():
            raise InputError(
                self.path,
                f"run has no table '{name}' (has: {', '.join(self.manifest.get('tables', []))})",
            )
        return pl.read_parquet(p)

    def summary(self) -> dict:
        p = self.path / SUMMARY_FILE
        return json.loads(p.read_text()) if p.exists() else {}


def read_run(run_dir: os.PathLike | str) -> Run:
    p = Path(run_dir)
    f = p / RUN_FILE
    if not f.exists():
        raise InputError(p, f"not an agentx run directory (no {RUN_FILE})")
    try:
        manifest = json.loads(f.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(
            f, f"expected JSON, got a parse error at line {exc.lineno} column {exc.colno}"
        ) from None
    return Run(p, manifest)


def find_runs(root: os.PathLike | str) -> list[Run]:
    """Every run directory at or below ``root``, sorted by path."""
    root = Path(root)
    if (root / RUN_FILE).exists():
        return [read_run(root)]
    return [read_run(f.parent) for f in sorted(root.rglob(RUN_FILE))]
