"""calls.parquet: which columns it keeps (``--calls``) and a streaming writer for it.

``CallsWriter`` encodes and writes row groups in a background thread (pyarrow releases the
GIL while it encodes and compresses), so the next partition is priced while the last one is
written; at most ``depth`` partitions are handed over and not yet written. The file's bytes
go to the device around the page cache (``agentx.io.direct``): through it, the pages the OS
had to supply made the writer the busier thread (docs/metrics.md "Which columns
calls.parquet keeps", round 14). Integer columns byte-stream-split
(BYTE_STREAM_SPLIT, then lz4: faster and smaller than DELTA_BINARY_PACKED + lz4 on every
integer column of a 10 M-call table, docs/metrics.md); string columns dictionary-encoded,
zstd level 1, session ids handed over as an Arrow dictionary of the partition's sessions (no
string gathered or hashed per row); float columns with over half zeros in the first row group
plain and lz4-compressed (fill times of a mostly-midfill trace, reload traffic), others with
few distinct values there (decode-expert times) dictionary-encoded and lz4-compressed, the
rest plain and uncompressed (float mantissas hardly compress). Only session ids and start
times carry min/max statistics (``STATISTICS``): every row group of a session-ordered table
spans the whole range of a per-call count or cost, so a reader could skip none on them.
"""

from __future__ import annotations

import functools
import queue
import threading

import numpy as np
import polars as pl

from agentx.errors import UsageError

CALLS_MODES = ("summary", "full", "none")
DEFAULT_CALLS = "summary"
DICTIONARY_PAGE_BYTES = 1 << 16
DICTIONARY_PROBE_ROWS = 1 << 16  # head of the first frame that decides a float's dictionary
# The columns whose row-group min/max a reader can skip groups on: a row group holds whole
# sessions, so its session ids (a trace ordered by them gives each group its own range) and
# its start times (a session is a burst in time) narrow; a per-call count or cost (call_index
# from 0, tokens, KV outcome, priced floats) spans its whole range in every group. Statistics
# cost the writer thread (the pricing loop's slower side) 7-15 ms per 2^19-call group,
# session ids' the most (docs/metrics.md).
STATISTICS = ("session_id", "t_start_s")
# Rows the writer encodes per step (pyarrow's write_batch_size, 1,024 by default): each step
# has a fixed cost per column, and 512 of them per 2^19-call row group and column were a
# fifth of the writer thread's time (the first eight groups of a 10 M-call `summary` table into
# memory, five writes each, min/median ms a group: 145.2/150.7 and 141.0/153.7 at 1,024,
# 115.7/123.7 and 118.3/123.7 at 65,536; same bytes of data, pages of at most ~1.5 MB).
WRITE_BATCH_ROWS = 1 << 16
# what agentx sql derives from a replay's summary.json (analysis.derived): calls_columns
DERIVABLE = (
    "new_tokens",  # input - reused (a rule of the trace schema)
    "kv_hbm_hit_tokens",  # reused - DRAM and SSD hits - recomputes (every reused token is one)
    "kv_transfer_time_s",
    "kv_transfer_energy_j",
    "decode_experts_time_s",
    "decode_experts_energy_j",
)


def calls_columns(mode: str, available, derivable: bool = True) -> list[str] | None:
    """Columns of calls.parquet for ``--calls`` ``mode`` (None: all). ``summary`` (the
    default) keeps what the per-call queries and charts use (docs/metrics.md): trace keys,
    per-stage time and energy, latencies and the KV tier outcome (tokens, link bytes, reload
    time and energy); total energy (their sum) and the DRAM->SSD bytes (the HBM->DRAM bytes,
    under write-through) are derived by ``agentx sql`` bit for bit
    (agentx/analysis/derived.py); per-stage FLOPs, HBM and comm bytes stay in ``full`` and in
    the sums of stages.parquet and summary.json. ``derivable`` False: the ``DERIVABLE``
    columns go too (a replay's: ``agentx sql`` derives them from the stored counts, link
    bytes and output tokens and constants of its summary.json; a fleet's reload time has
    its shared store's added, so they stay)."""
    from agentx.replay.replay import TRACE_COLUMNS
    from agentx.replay.stages import STAGES

    if mode not in CALLS_MODES:
        raise UsageError(f"--calls must be one of {', '.join(CALLS_MODES)}, got '{mode}'")
    if mode != "summary":
        return None
    left_out = {"kv_dram_to_ssd_bytes"} | (set() if derivable else set(DERIVABLE))
    keep = (
        *(c for c in TRACE_COLUMNS if c not in left_out),
        *(c for st in STAGES for k in ("time_s", "energy_j") if (c := f"{st}_{k}") not in left_out),
        "ttft_s",
        "decode_latency_s",
        # under write-through (every replay's policy) a block written to DRAM goes on to SSD
        # in the same call: the DRAM->SSD bytes are the HBM->DRAM bytes, derived by the view
        *(c for c in available if c.startswith("kv_") and c not in left_out),
    )
    return [c for c in dict.fromkeys(keep) if c in available]


def parquet_options(schema, sparse, few) -> dict:
    """ParquetWriter keyword arguments for a calls table of ``schema`` (module docstring);
    ``sparse``: the float columns that are mostly zeros, ``few``: those (not sparse) with few
    enough distinct values for a dictionary page; both from ``float_shapes``."""
    import pyarrow as pa

    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    ints = [f.name for f in schema if pa.types.is_integer(f.type)]
    others = [f.name for f in schema if f.name not in floats and f.name not in ints]
    return {
        "compression": {
            **{c: "zstd" for c in others},
            **{c: "lz4" for c in ints},
            **{c: "lz4" if c in sparse or c in few else "none" for c in floats},
        },
        "compression_level": {c: 1 for c in others},
        "use_dictionary": others + [c for c in floats if c in few],
        "column_encoding": dict.fromkeys(ints, "BYTE_STREAM_SPLIT"),
        "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES,
        "write_batch_size": WRITE_BATCH_ROWS,
        "write_statistics": [c for c in schema.names if c in STATISTICS],
        # the Arrow schema would name session_id a dictionary (readers would make it one);
        # the file's own metadata is added at close (CallsWriter)
        "store_schema": False,
    }


def required(schema):
    """``schema`` with every field the trace schema does not allow to be null declared
    required, and every priced column too (never null): a required column's pages carry no
    definition levels, 12 % of the writer's time (measured on 1 M priced calls)."""
    import pyarrow as pa

    from agentx.traces import schema as S

    nullable = {c.name for c in S.COLUMNS if c.nullable}
    return pa.schema([f.with_nullable(f.name in nullable) for f in schema])


def float_shapes(frame: pl.DataFrame) -> tuple[set[str], set[str]]:
    """Float columns of ``frame`` that are mostly (over half) zeros (fill times of a trace
    that is mostly midfills, reload traffic), and those not so whose head
    (``DICTIONARY_PROBE_ROWS``) has few enough distinct values to fit a dictionary page
    (decode-expert times, which take a value per output length)."""
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    if not floats or frame.height == 0:
        return set(), set()
    zeros = frame.select((pl.col(c) == 0).mean() for c in floats).row(0)
    sparse = {c for c, z in zip(floats, zeros, strict=True) if z > 0.5}
    dense = [c for c in floats if c not in sparse]
    head = frame.head(DICTIONARY_PROBE_ROWS)
    distinct = head.select(pl.col(c).n_unique() for c in dense).row(0) if dense else ()
    fits = DICTIONARY_PAGE_BYTES // 8
    return sparse, {c for c, n in zip(dense, distinct, strict=True) if n <= fits}


def session_ids(codes: np.ndarray, names: pl.Series):
    """The ids of integer session ``codes`` (``names[code]``) as an Arrow dictionary array
    with one entry per run of equal codes: a partition holds whole sessions, so its runs are
    its sessions and nothing is gathered or hashed per row. Codes that come back after
    another (not session-ordered) are gathered as strings instead."""
    import pyarrow as pa

    codes = np.asarray(codes)
    head = np.ones(codes.size, bool)
    np.not_equal(codes[1:], codes[:-1], out=head[1:])
    firsts = codes[head]
    if np.unique(firsts).size != firsts.size:
        return names.gather(codes).to_arrow()
    index = np.cumsum(head, dtype=np.int32) - 1
    return pa.DictionaryArray.from_arrays(index, names.gather(firsts).to_arrow())


@functools.cache
def _string_views() -> bool:
    """Whether pyarrow writes Arrow string views to Parquet (21 and later: apache/arrow
    GH-43244, GH-43041)."""
    import pyarrow as pa

    return int(pa.__version__.split(".")[0]) >= 21


def arrow_table(frame: pl.DataFrame, session_names=None):
    """``frame`` as the Arrow table ``CallsWriter`` writes: ``session_id`` codes (with
    ``session_names``) become ``session_ids``. Strings leave as polars holds them (string
    views) where pyarrow writes those: a copy into Arrow's offsets-and-bytes layout was
    8-12 ms of the pricing thread per 2^19-call partition for a mostly-null ``agent_id``
    (0.2 ms as views; the file's bytes are the same either way)."""
    table = frame.to_arrow(compat_level=pl.CompatLevel.newest() if _string_views() else None)
    if session_names is None or "session_id" not in frame.columns:
        return table
    ids = session_ids(frame.get_column("session_id").to_numpy(), session_names)
    return table.set_column(frame.columns.index("session_id"), "session_id", ids)


def open_writer(path, table, shapes):
    """A ParquetWriter for tables like ``table`` (the first; ``shapes``: ``float_shapes`` of
    its frame, so the codecs are deterministic for equal input), and the file it writes to
    ``path`` around the page cache (``agentx.io.direct``): close the writer, then the file."""
    import pyarrow.parquet as pq

    from agentx.io.direct import DirectFile

    schema = required(table.schema)
    sink = DirectFile(path)
    try:
        writer = pq.ParquetWriter(sink, schema, **parquet_options(schema, *shapes))
    except BaseException:
        sink.close()
        raise
    return writer, sink


def write_group(writer, table) -> None:
    """``table`` as one row group of ``writer``'s file (cast to its schema where it differs:
    required columns, or ids gathered as strings after a dictionary)."""
    if not table.schema.equals(writer.schema, check_metadata=False):
        table = table.cast(writer.schema)
    writer.write_table(table, row_group_size=max(table.num_rows, 1))


class CallsWriter:
    """Append frames to a Parquet file as row groups, in a background thread, in order.

    ``write(frame)`` hands a frame over and blocks while ``depth`` earlier frames are not yet
    written (so with depth 1 one partition is written while the next is priced, and no more
    are held); ``close()`` waits for the writes and closes the file; an error in the thread
    is raised by the next ``write`` or by ``close``. The schema is the first frame's; later
    frames are cast to it; ``metadata`` is the file's key-value metadata. Use as a context
    manager: leaving on an error abandons the rest. ``session_names``: a ``session_id``
    column of integer codes is written as ``session_names[code]`` (``Trace.session_names``
    of ``read_trace_columns``; ``session_ids``).
    Reused by every driver that streams a calls table (docs/metrics.md).
    """

    def __init__(
        self, path, metadata: dict[str, str] | None = None, depth: int = 1, session_names=None
    ):
        self._path, self._meta, self._names = path, metadata or {}, session_names
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.Semaphore(depth)  # frames handed over and not yet written
        self._error: BaseException | None = None
        self._writer = self._sink = None
        self._shapes = None  # float_shapes of the first frame
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
                if self._meta:  # not in the schema: its Arrow form is not stored (parquet_options)
                    self._writer.add_key_value_metadata(self._meta)
                self._writer.close()
        except BaseException as err:  # noqa: BLE001
            self._error = self._error or err
        finally:
            try:  # pyarrow closes only a file it opened itself
                if self._sink is not None:
                    self._sink.close()
            except BaseException as err:  # noqa: BLE001
                self._error = self._error or err

    def _arrow(self, frame: pl.DataFrame):
        """The frame as the Arrow table to write, and the first frame's codec choice: made in
        the caller's thread (made in the writer's instead, five alternating 10 M-call replays
        took median 7.85 s against 7.45 s)."""
        first = self._shapes is None
        if first:  # codecs from the first frame (deterministic for equal input)
            self._shapes = float_shapes(frame)
        return arrow_table(frame, self._names), first

    def _append(self, item) -> None:
        table, first = item
        if first:
            self._writer, self._sink = open_writer(self._path, table, self._shapes)
        write_group(self._writer, table)

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
