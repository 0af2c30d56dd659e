"""calls.parquet: which columns it keeps (``--calls``) and a streaming writer for it.

``CallsWriter`` encodes and writes row groups in a background thread (pyarrow releases the
GIL while it encodes and compresses), so the next partition is priced while the last one is
written; at most ``depth`` partitions are handed over and not yet written. Codec choice (measured,
docs/metrics.md "Which columns calls.parquet keeps"): integer columns delta-encoded
(DELTA_BINARY_PACKED, then lz4: a third of zstd's time on token counts, at about the same
size); string columns zstd level 1; float columns uncompressed (float mantissas hardly
compress and compressing them costs the most time) except those mostly zeros in the first
row group (lz4); dictionary pages capped at 64 KiB so a high-cardinality float column gives
up its dictionary after a few thousand values instead of a megabyte of hashing.
"""

from __future__ import annotations

import queue
import threading

import polars as pl

from agentx.errors import UsageError

CALLS_MODES = ("summary", "full", "none")
DEFAULT_CALLS = "summary"
DICTIONARY_PAGE_BYTES = 1 << 16


def calls_columns(mode: str, available) -> list[str] | None:
    """Columns of calls.parquet for ``--calls`` ``mode`` (None: all). ``summary`` (the
    default) keeps what the per-call queries and charts use (docs/metrics.md): trace keys,
    per-stage time and energy, latencies, total energy and the KV tier outcome (tokens, link
    bytes, reload time and energy); per-stage FLOPs, HBM and comm bytes stay in ``full`` and
    in the sums of stages.parquet and summary.json."""
    from agentx.replay.replay import TRACE_COLUMNS
    from agentx.replay.stages import STAGES

    if mode not in CALLS_MODES:
        raise UsageError(f"--calls must be one of {', '.join(CALLS_MODES)}, got '{mode}'")
    if mode != "summary":
        return None
    keep = (
        *TRACE_COLUMNS,
        *(f"{st}_{k}" for st in STAGES for k in ("time_s", "energy_j")),
        "ttft_s",
        "decode_latency_s",
        "total_energy_j",
        *(c for c in available if c.startswith("kv_")),
    )
    return [c for c in dict.fromkeys(keep) if c in available]


def parquet_options(schema, sparse=()) -> dict:
    """ParquetWriter keyword arguments for a calls table of ``schema`` (module docstring);
    ``sparse``: the float columns worth compressing (mostly zeros, ``sparse_floats``)."""
    import pyarrow as pa

    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    ints = [f.name for f in schema if pa.types.is_integer(f.type)]
    others = [f.name for f in schema if f.name not in floats and f.name not in ints]
    return {
        "compression": {
            **{c: "zstd" for c in others},
            **{c: "lz4" for c in ints},
            **{c: "lz4" if c in sparse else "none" for c in floats},
        },
        "compression_level": {c: 1 for c in others},
        "use_dictionary": others + floats,
        "column_encoding": dict.fromkeys(ints, "DELTA_BINARY_PACKED"),
        "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES,
    }


def required(schema):
    """``schema`` with every field the trace schema does not allow to be null declared
    required, and every priced column too (never null): a required column's pages carry no
    definition levels, 12 % of the writer's time (measured on 1 M priced calls)."""
    import pyarrow as pa

    from agentx.traces import schema as S

    nullable = {c.name for c in S.COLUMNS if c.nullable}
    return pa.schema([f.with_nullable(f.name in nullable) for f in schema])


def sparse_floats(frame: pl.DataFrame) -> set[str]:
    """Float columns of ``frame`` that are mostly (over half) zeros: fill times of a trace
    that is mostly midfills, reload traffic. Dense float columns hardly compress."""
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    if not floats or frame.height == 0:
        return set()
    zeros = frame.select((pl.col(c) == 0).mean() for c in floats).row(0)
    return {c for c, z in zip(floats, zeros, strict=True) if z > 0.5}


class CallsWriter:
    """Append frames to a Parquet file as row groups, in a background thread, in order.

    ``write(frame)`` hands a frame over and blocks while ``depth`` earlier frames are not yet
    written (so with depth 1 one partition is written while the next is priced, and no more
    are held); ``close()`` waits for the writes and closes the file; an error in the thread
    is raised by the next ``write`` or by ``close``. The schema is the first frame's (with
    ``metadata``); later frames are cast to it. Use as a context manager: leaving on an error
    abandons the rest. ``session_names``: a ``session_id`` column of integer codes is written
    as ``session_names[code]`` (``Trace.session_names`` of ``read_trace_columns``).
    Reused by every driver that streams a calls table (docs/metrics.md).
    """

    def __init__(
        self, path, metadata: dict[str, str] | None = None, depth: int = 1, session_names=None
    ):
        self._path, self._meta, self._names = path, metadata or {}, session_names
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.Semaphore(depth)  # frames handed over and not yet written
        self._error: BaseException | None = None
        self._writer = None
        self._sparse: set[str] | None = None  # float columns to compress (the first frame's)
        self._thread = threading.Thread(target=self._run, name="calls-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                if self._error is None:  # after an error, frames are only let go
                    self._append(item)
            except BaseException as err:  # noqa: BLE001 (handed to the producer thread)
                self._error = err
            finally:
                del item
                self._slots.release()
        try:
            if self._writer is not None:
                self._writer.close()
        except BaseException as err:  # noqa: BLE001
            self._error = self._error or err

    def _arrow(self, frame: pl.DataFrame):
        """The frame as the Arrow table to write, and the first frame's codec choice: made in
        the caller's thread, which would otherwise wait for the writer (the writer thread is
        the slower one: it only encodes)."""
        if self._names is not None and "session_id" in frame.columns:
            # integer session codes (read_trace_columns) are written as the ids
            ids = self._names.gather(frame.get_column("session_id"))
            frame = frame.with_columns(ids.alias("session_id"))
        first = self._sparse is None
        if first:  # codecs from the first frame (deterministic for equal input)
            self._sparse = sparse_floats(frame)
        return frame.to_arrow(), first

    def _append(self, item) -> None:
        import pyarrow.parquet as pq

        table, first = item
        if first:
            meta = {k.encode(): v.encode() for k, v in self._meta.items()}
            schema = required(table.schema).with_metadata(meta)
            opts = parquet_options(schema, self._sparse)
            self._writer = pq.ParquetWriter(self._path, schema, **opts)
        if not table.schema.equals(self._writer.schema, check_metadata=False):
            table = table.cast(self._writer.schema)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def write(self, frame: pl.DataFrame) -> None:
        self._raise()
        item = self._arrow(frame)
        self._slots.acquire()
        self._queue.put(item)

    def close(self) -> None:
        self._stop()
        self._raise()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> CallsWriter:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:  # the file is abandoned (atomic_path removes it): stop without raising again
            self._error = self._error or exc[1]
            self._stop()


def write_calls(
    parts, path, metadata: dict[str, str] | None = None, columns=None, session_names=None,
    finish=None,
):  # fmt: skip
    """Write the partials' calls rows to ``path`` (one Parquet row group each, atomic: temp
    file renamed at the end) in a background thread as they come; yields each partial,
    slimmed, for the merge. ``columns``: the columns to keep (default all); ``path`` None
    writes nothing; ``session_names`` as in ``CallsWriter``. ``finish``: an ExitStack that
    closes the file (waits for the last row groups, renames it) when the caller leaves it, so
    the merge's whole-trace figures are computed while the writer finishes; without it the
    file is complete when the last partial has been taken."""
    from contextlib import ExitStack

    from agentx.io import atomic_path

    if path is None:
        for p in parts:
            yield p.slim()
        return
    with ExitStack() as own:
        stack = own if finish is None else finish
        tmp = stack.enter_context(atomic_path(path, suffix=".parquet.tmp"))
        out = stack.enter_context(CallsWriter(tmp, metadata, session_names=session_names))
        for p in parts:
            out.write(p.calls if columns is None else p.calls.select(columns))
            yield p.slim()
