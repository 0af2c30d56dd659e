"""Partitioned traces: one hive-style folder per replica, so each replica's task reads only its own.

Layout of a dataset written by ``agentx partition``::

    DIR/fleet.json                   replicas, router, its parameters, calls per replica
    DIR/replica=0/part-0.parquet     that replica's calls (trace schema + trace_row,
    DIR/replica=1/part-0.parquet     fleet_store_tokens), the source trace's metadata
    ...

``trace_row`` is the call's row in the source trace, so merged results come back in trace
order; ``fleet_store_tokens`` is what the fleet-wide store could serve the call (computed
fleet-wide in the routing pass, see agentx.fleet.store). Folders of replicas that got no call
still exist (with an empty part), so a dataset always lists every replica.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from agentx.errors import InputError
from agentx.io import atomic_dir, dumps_json, write_parquet_file
from agentx.traces.io import Trace, read_trace
from agentx.traces.schema import META_SCHEMA_VERSION, SCHEMA_VERSION, conform

MANIFEST = "fleet.json"
EXTRA = ("trace_row", "fleet_store_tokens")


@dataclass(frozen=True)
class Partition:
    """One replica's share of a trace: in memory (``calls``) or a file (``path``)."""

    replica: int
    calls: pl.DataFrame | None = None
    meta: dict | None = None
    path: str | None = None

    def load(self) -> Trace:
        if self.path is not None:
            # a replica's share breaks call_index contiguity by design; the whole trace was
            # validated when it was partitioned
            return read_trace(self.path, validate=False)
        return Trace(self.calls, dict(self.meta or {}))


def split(trace: Trace, assignment, store_tokens, replicas: int) -> list[Partition]:
    """The partitions of ``trace`` under ``assignment`` (replica per row), in replica order."""
    df = trace.calls.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("trace_row"),
        pl.Series("fleet_store_tokens", store_tokens, dtype=pl.Int64),
        pl.Series("_replica", assignment, dtype=pl.Int32),
    )
    parts = {k[0]: g.drop("_replica") for k, g in df.group_by("_replica", maintain_order=True)}
    empty = df.clear().drop("_replica")
    return [Partition(r, parts.get(r, empty), trace.meta) for r in range(replicas)]


def write_dataset(
    parts: list[Partition], out_dir: os.PathLike | str, manifest: dict, inputs=()
) -> Path:
    """Write ``parts`` as a hive-style dataset: the whole folder appears at once or not at all."""
    out = Path(out_dir)
    with atomic_dir(out, inputs) as tmp:
        for p in parts:
            d = tmp / f"replica={p.replica}"
            d.mkdir()
            meta = {META_SCHEMA_VERSION: SCHEMA_VERSION, **(p.meta or {})}
            write_parquet_file(_with_metadata(conform(p.calls), meta), d / "part-0.parquet")
        calls = {str(p.replica): p.calls.height for p in parts}
        (tmp / MANIFEST).write_text(
            dumps_json({**manifest, "calls_per_replica": calls}) + "\n", encoding="utf-8"
        )
    return out


def _with_metadata(df: pl.DataFrame, meta: dict[str, str]):
    table = df.to_arrow()
    merged = dict(table.schema.metadata or {})
    merged.update({k.encode(): v.encode() for k, v in meta.items()})
    return table.replace_schema_metadata(merged)


def read_dataset(path: os.PathLike | str) -> tuple[dict, list[Partition]]:
    """The manifest and file-backed partitions of a dataset folder."""
    root = Path(path)
    f = root / MANIFEST
    if not f.exists():
        raise InputError(
            root, f"not a partitioned agentx dataset (no {MANIFEST}); see agentx partition"
        )
    try:
        manifest = json.loads(f.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f, f"expected JSON, got a parse error at line {exc.lineno}") from None
    parts = []
    for r in range(int(manifest.get("replicas", 0))):
        p = root / f"replica={r}" / "part-0.parquet"
        if not p.exists():
            raise InputError(p, f"partition of replica {r} is missing")
        parts.append(Partition(r, path=str(p)))
    return manifest, parts


def is_dataset(path: os.PathLike | str) -> bool:
    return (Path(path) / MANIFEST).is_file()
