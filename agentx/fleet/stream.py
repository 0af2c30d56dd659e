"""Streamed partitioning: route a trace bigger than memory with the ``session`` router.

Two passes over the Parquet file in session-aligned batches (``pyarrow`` ``iter_batches``,
the rows of a session never split across batches), so memory follows the batch and the
number of sessions, never the number of calls:

1. validate each batch (the call limit applies per batch), and keep per session only its
   first arrival time; bounded-load consistent hashing then places the sessions in arrival
   order (agentx.fleet.router.bounded_load_assign, the same placement the in-memory router
   makes: a session's first call is its call 0, so ordering sessions by (first time, id)
   is the in-memory router's order of first appearance);
2. re-read each batch, look its sessions' replicas up, and append each replica's rows to its
   own Parquet file in the dataset's temporary folder (agentx.io.atomic_dir: the dataset
   appears whole or not at all).

The result equals :func:`agentx.fleet.plan_fleet` + ``write_dataset`` row for row
(tests/test_fleet.py). Routers that need state across sessions stay in memory: round-robin
per call needs every call's global arrival rank, kv-aware and least-loaded the calls in flight
on every replica, and the fleet-wide store each prefix's first arrival over the whole trace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from agentx.errors import InputError
from agentx.fleet.partition import MANIFEST, _with_metadata
from agentx.fleet.router import bounded_load_assign, check_routing, stable_hash
from agentx.io import ParquetAppender, atomic_dir, decode_metadata, dumps_json, regular_file
from agentx.traces import schema as S
from agentx.traces.batches import validate as validate_frame

STREAMED_ROUTERS = ("session",)
BATCH_ROWS = 1 << 20  # rows read at a time (a batch grows to hold a session that spans more)


def session_batches(
    path: os.PathLike | str, rows: int = BATCH_ROWS, validate: bool = True
) -> Iterator[tuple[int, pl.DataFrame]]:
    """(first trace row, frame) for consecutive batches of whole sessions of a trace file."""
    pf, _ = _open(path)
    carry, offset = None, 0
    try:
        for rb in pf.iter_batches(batch_size=rows):
            df = pl.from_arrow(pa.Table.from_batches([rb]).replace_schema_metadata(None))
            df = df if carry is None else pl.concat([carry, df])
            last = df.get_column("session_id").eq_missing(df["session_id"][-1])
            if last.all():  # one session so far: keep reading
                carry = df
                continue
            tail = df.height - int(last.reverse().arg_min())  # the last session's first row
            head, carry = df.head(tail), df.slice(tail)
            yield offset, _checked(head, path, offset, validate)
            offset += head.height
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(path, f"not a readable Parquet file ({exc})") from None
    if carry is not None and carry.height:
        yield offset, _checked(carry, path, offset, validate)


def _open(path) -> tuple[pq.ParquetFile, dict[str, str]]:
    p = regular_file(path, "Parquet file")
    try:
        # pre-buffered reads keep every row group's bytes cached until the file closes
        # (100 M calls: 3.0 GB vs 0.7 GB just to iterate); streaming wants them dropped
        pf = pq.ParquetFile(p, pre_buffer=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(p, f"not a readable Parquet file ({exc})") from None
    meta = decode_metadata(pf.schema_arrow.metadata)
    version = meta.get(S.META_SCHEMA_VERSION)
    if version != S.SCHEMA_VERSION:
        raise InputError(
            p, f"not an agentx trace of schema version {S.SCHEMA_VERSION} (got {version})"
        )
    return pf, meta


def _checked(df: pl.DataFrame, path, offset: int, validate: bool) -> pl.DataFrame:
    if validate:
        try:
            validate_frame(df, path)
        except InputError as err:  # name the row in the whole file, not in the batch
            if err.row is not None and offset:
                text = str(err).replace(f": row {err.row}: ", f": row {err.row + offset}: ", 1)
                err.args, err.row = (text,), err.row + offset
            raise
    return S.conform(df)


def first_arrivals(path, rows: int = BATCH_ROWS) -> tuple[pl.DataFrame, dict]:
    """Pass 1: every session's first arrival (sorted as the router places them) and the
    figures of the manifest; validates the whole trace batch by batch."""
    firsts, n, t_lo, t_hi = [], 0, np.inf, -np.inf
    seen: pl.DataFrame | None = None
    for offset, df in session_batches(path, rows):
        f = df.filter(pl.col("call_index") == 0)
        # fresh buffers: a filtered string column can still view the whole batch's strings,
        # and keeping those per batch grows with the trace (3.5 GB at 100 M calls)
        f = pl.DataFrame(
            {"session_id": f["session_id"].to_list(), "t_start_s": f["t_start_s"].to_numpy()},
            schema={"session_id": pl.String, "t_start_s": pl.Float64},
        )
        if seen is not None:
            again = f.join(seen, on="session_id", how="semi")
            if again.height:
                sid = again["session_id"][0]
                r = offset + int(df["session_id"].eq(sid).arg_max())
                raise InputError(path, "expected each session's rows to be contiguous",
                                 row=r, field="session_id", where=f"session '{sid}'")  # fmt: skip
        seen = f.select("session_id") if seen is None else pl.concat([seen, f.select("session_id")])
        firsts.append(f)
        n += df.height
        t = df.get_column("t_start_s")
        t_lo, t_hi = min(t_lo, float(t.min())), max(t_hi, float(t.max()))
    if n == 0:
        raise InputError(path, "expected at least one call to route, got none")
    first = pl.concat(firsts).sort(["t_start_s", "session_id"], maintain_order=True)
    figures = {"calls": n, "sessions": first.height, "t_start_min_s": t_lo, "t_start_max_s": t_hi}
    return first, figures


def partition_stream(
    path: os.PathLike | str,
    out_dir: os.PathLike | str,
    replicas: int,
    extra: dict,
    *,
    eps: float = 0.25,
    overlap_weight: float = 1.0,
    inputs=(),
    rows: int = BATCH_ROWS,
) -> dict:
    """Route ``path`` with the session router and write its dataset, streaming; returns the
    manifest written (as ``plan_fleet`` + ``write_dataset`` would write it)."""
    check_routing(replicas, "session", eps)
    first, fig = first_arrivals(path, rows)
    loads = np.zeros(replicas, np.int64)
    owner = bounded_load_assign(stable_hash(first["session_id"].to_list()), replicas, eps, loads)
    lookup = first.select("session_id").with_columns(pl.Series("_replica", owner, dtype=pl.Int32))
    _, meta = _open(path)
    meta = {S.META_SCHEMA_VERSION: S.SCHEMA_VERSION, **meta}
    block = int(meta.get(S.META_BLOCK_SIZE) or 64)
    counts = np.zeros(replicas, np.int64)
    out = Path(out_dir)
    with atomic_dir(out, inputs) as tmp:
        files = []
        for r in range(replicas):
            (tmp / f"replica={r}").mkdir()
            files.append(ParquetAppender(tmp / f"replica={r}" / "part-0.parquet"))
        schema = None
        for offset, df in session_batches(path, rows, validate=False):
            df = df.with_columns(
                pl.int_range(offset, offset + df.height, dtype=pl.Int64).alias("trace_row"),
                pl.lit(0, pl.Int64).alias("fleet_store_tokens"),
            ).join(lookup, on="session_id", how="left", maintain_order="left")
            for (r,), g in df.group_by("_replica", maintain_order=True):
                table = _with_metadata(g.drop("_replica"), meta)
                files[r].append(table)
                schema = table.schema
                counts[r] += g.height
        for f in files:
            f.schema = f.schema or schema
            f.close()
        manifest = {
            "sessions": fig["sessions"],
            "t_start_min_s": fig["t_start_min_s"],
            "t_start_max_s": fig["t_start_max_s"],
            "replicas": replicas,
            "router": "session",
            "balance_eps": eps,
            "overlap_weight": overlap_weight,
            "router_block_size_tokens": block,
            "store": None,
            **extra,
            "calls_per_replica": {str(r): int(c) for r, c in enumerate(counts)},
        }
        (tmp / MANIFEST).write_text(dumps_json(manifest) + "\n", encoding="utf-8")
    return manifest
