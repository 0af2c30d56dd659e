"""The results store: one run directory per replay, sweep, kv-curve or simulation.

A run directory holds one Parquet file per table, ``summary.json`` (headline figures) and
``run.json`` (what produced it: kind, inputs with their SHA-256, configuration, catalog and
agentx versions). No timestamps go into any file, so the same inputs give byte-identical runs.
The whole folder is written beside its destination and renamed into place in one step
(agentx.io.atomic_dir): a killed or failed command leaves the earlier run, or nothing.
Many run directories side by side under one folder can be compared with ``agentx sql --runs``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from agentx import __version__
from agentx.errors import InputError, one_line
from agentx.io import (
    atomic_dir,
    dumps_json,
    file_fingerprint,
    read_parquet_checked,
    regular_file,
    write_parquet_file,
)

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
    guard: Iterable[os.PathLike | str | None] = (),
    written: tuple[str, ...] = (),
) -> Path:
    """Write ``tables`` (name → frame), ``summary.json`` and ``run.json`` as one run directory.

    The run appears at ``run_dir`` whole or not at all; an earlier run there is replaced only
    once this one is complete. ``inputs`` are recorded with their SHA-256 and, with ``guard``
    (other files the command read, e.g. catalogs), may not be overwritten or enclosed by it.
    """
    run_dir = Path(run_dir)
    inputs = {k: Path(v) for k, v in (inputs or {}).items()}
    with atomic_dir(run_dir, [*inputs.values(), *guard]) as tmp:
        write_run_files(tmp, kind, tables, summary=summary, inputs=inputs, config=config,
                        catalog_version=catalog_version, written=written)  # fmt: skip
    return run_dir


def write_run_files(
    folder: Path,
    kind: str,
    tables: dict[str, pl.DataFrame],
    *,
    summary: dict | None = None,
    inputs: dict[str, Path] | None = None,
    config: dict | None = None,
    catalog_version: str | None = None,
    written: tuple[str, ...] = (),
) -> None:
    """The files of one run into ``folder`` (a temporary folder from ``atomic_dir``);
    ``written`` names tables the caller already streamed into ``folder``."""
    for name, df in tables.items():
        table = df.to_arrow()
        meta = dict(table.schema.metadata or {})
        meta.update({b"agentx.run_kind": kind.encode(), b"agentx.table": name.encode()})
        write_parquet_file(table.replace_schema_metadata(meta), folder / f"{name}.parquet")
    if summary is not None:
        (folder / SUMMARY_FILE).write_text(dumps_json(summary) + "\n", encoding="utf-8")
    ins = {
        k: {"path": str(p), "sha256": file_fingerprint(p) if p.is_file() else None}
        for k, p in sorted((inputs or {}).items())
    }
    manifest = {
        "kind": kind,
        "agentx_version": __version__,
        "catalog_version": catalog_version,
        "inputs": ins,
        "config": config or {},
        "tables": sorted([*tables, *written]),
    }
    manifest["run_id"] = hashlib.sha256(dumps_json(manifest, indent=None).encode()).hexdigest()[:16]
    (folder / RUN_FILE).write_text(dumps_json(manifest) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Run:
    path: Path
    manifest: dict
    summary_data: dict = field(default_factory=dict, repr=False)

    @property
    def kind(self) -> str:
        kind = self.manifest.get("kind", "unknown")
        return kind if isinstance(kind, str) else "unknown"

    @property
    def name(self) -> str:
        return self.path.name

    def table_path(self, name: str) -> Path:
        return self.path / f"{name}.parquet"

    def table(self, name: str) -> pl.DataFrame:
        p = self.table_path(name)
        if not p.exists():
            tables = self.manifest.get("tables")
            known = ", ".join(map(str, tables)) if isinstance(tables, list) else ""
            raise InputError(self.path, f"run has no table '{name}' (has: {known})")
        return read_parquet_checked(p)[0]

    def summary(self) -> dict:
        return self.summary_data


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def read_json_object(path: Path, what: str) -> dict:
    """A JSON file holding one object, strictly (no NaN/Infinity), or one clear line."""
    regular_file(path, f"{what} (JSON)")
    try:
        text = path.read_bytes().decode("utf-8")
        obj = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise InputError(path, "not UTF-8 text; expected JSON") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            path, f"expected JSON, got a parse error at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # NaN / Infinity
        raise InputError(path, f"expected strict JSON: {one_line(exc)}") from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise InputError(path, f"expected a JSON object, got a {type(obj).__name__}")
    return obj


def read_run(run_dir: os.PathLike | str) -> Run:
    """A run directory, its ``run.json`` and ``summary.json`` checked (objects, strict JSON)."""
    p = Path(run_dir)
    f = p / RUN_FILE
    if not os.path.lexists(f):
        raise InputError(p, f"not an agentx run directory (no {RUN_FILE})")
    manifest = read_json_object(f, "run manifest")
    for key, typ in (("kind", str), ("inputs", dict), ("config", dict), ("tables", list)):
        if key in manifest and not isinstance(manifest[key], typ):
            raise InputError(
                f, f"expected {typ.__name__}, got {type(manifest[key]).__name__}", field=key
            )
    s = p / SUMMARY_FILE
    summary = read_json_object(s, "run summary") if os.path.lexists(s) else {}
    return Run(p, manifest, summary)


def find_runs(root: os.PathLike | str) -> list[Run]:
    """Every run directory at or below ``root``, sorted by path (symlinks not followed)."""
    root = Path(root)
    if (root / RUN_FILE).exists():
        return [read_run(root)]
    found = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise_walk):
        dirnames.sort()
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # our temporaries too
        if RUN_FILE in filenames:
            found.append(Path(dirpath))
    return [read_run(d) for d in sorted(found)]


def _raise_walk(exc: OSError) -> None:
    raise InputError(exc.filename or "?", f"cannot read ({exc.strerror or exc})")
