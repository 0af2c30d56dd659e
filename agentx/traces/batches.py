"""Reading a canonical trace in validated batches of whole sessions, keeping chosen columns.

``TraceBatches`` is the streaming read of large traces: polars decodes only the columns the
checks or the caller need (row-group aligned ranges of about ``batch_rows`` rows), the rules
of ``schema.validate`` are checked in one vectorized pass per batch, and the string columns
nobody reads (trigger, source, model) are checked from the Parquet statistics (null counts)
without being decoded. A session running past a batch is carried into the next one; a session
seen again after another fails at the end (its rows must be contiguous).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from agentx.traces import schema as S

# checked from Parquet statistics when every row group has a null count; decoded otherwise
STATS_ONLY = ("trigger", "source", "model")


class NotValid(Exception):
    """The file breaks a schema rule (or is not a plain canonical trace): ``read_trace``
    words the exact message."""


def row_ranges(row_groups: list[int], batch_rows: int) -> list[tuple[int, int]]:
    """(offset, length) ranges of about ``batch_rows`` rows on row-group boundaries; a row
    group over 4 × ``batch_rows`` is split, so memory follows ``batch_rows``."""
    out, start, off = [], 0, 0
    for n in row_groups:
        if n > 4 * batch_rows:
            if off > start:
                out.append((start, off - start))
            out += [(a, min(batch_rows, off + n - a)) for a in range(off, off + n, batch_rows)]
            start = off + n
        off += n
        if off - start >= batch_rows:
            out.append((start, off - start))
            start = off
    if off > start:
        out.append((start, off - start))
    return out


def _plan(path, columns) -> tuple[list[str], list[int], dict[str, str]]:
    """(columns to decode, rows per row group, file metadata); ``NotValid`` when
    ``read_trace`` must judge."""
    import pyarrow.parquet as pq

    try:
        md = pq.ParquetFile(path).metadata
        types = pl.scan_parquet(path, glob=False).collect_schema()  # a path may hold [ or *
    except Exception as err:  # noqa: BLE001 (read_trace words every way a file is unreadable)
        raise NotValid from err
    meta = md.metadata or {}
    if meta.get(S.META_SCHEMA_VERSION.encode()) != S.SCHEMA_VERSION.encode():
        raise NotValid
    if any(types.get(c.name) != c.dtype for c in S.COLUMNS):
        raise NotValid  # missing, mistyped or all-null (Null type) columns
    leaf = [md.schema.column(j).path for j in range(md.num_columns)]
    groups = [md.row_group(i) for i in range(md.num_row_groups)]
    skip = set()
    for col in (c for c in S.COLUMNS if c.name in STATS_ONLY and c.name not in columns):
        stats = [g.column(leaf.index(col.name)).statistics for g in groups]
        if all(s is not None and s.has_null_count for s in stats):
            if not col.nullable and any(s.null_count for s in stats):
                raise NotValid  # a null where a value is needed
            skip.add(col.name)
    kv = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in meta.items()}
    kv.pop("ARROW:schema", None)
    return [c for c in S.COLUMN_NAMES if c not in skip], [g.num_rows for g in groups], kv


class TraceBatches:
    """Iterate the validated frames of whole sessions of ``path``, holding ``columns`` only.

    Iteration raises ``NotValid`` at the first batch that breaks a rule of
    ``schema.validate`` (or at the end, for a session whose rows are not contiguous), and
    ``LimitError`` per batch as ``validate`` does. With ``run_codes`` the ``session_id``
    column is the session's ordinal in the file (UInt32, 0, 1, 2, … in order of first row)
    instead of the string; after iteration ``run_names`` holds one name per session, in file
    order (so ``run_names[code]`` is the session's id).
    """

    def __init__(self, path: os.PathLike | str, columns, *, batch_rows=1 << 20, run_codes=False):
        self.path, self.columns, self.run_codes = path, list(columns), run_codes
        self.decode, groups, self.meta = _plan(path, self.columns)
        self.ranges = row_ranges(groups, batch_rows)
        self._names: list[pl.Series] = []

    @property
    def run_names(self) -> pl.Series:
        return pl.concat(self._names) if self._names else pl.Series("session_id", [], pl.String)

    def __iter__(self):
        from concurrent.futures import ThreadPoolExecutor

        scan = pl.scan_parquet(self.path, glob=False).select(self.decode)
        carry = None
        # the next range decodes while this one is checked, cut and taken by the caller
        # (polars lets go of the GIL in both)
        with ThreadPoolExecutor(max_workers=1) as pool:
            ahead = pool.submit(scan.slice(*self.ranges[0]).collect) if self.ranges else None
            for i in range(len(self.ranges)):
                df = ahead.result()
                if i + 1 < len(self.ranges):
                    ahead = pool.submit(scan.slice(*self.ranges[i + 1]).collect)
                whole, carry = self._cut(df if carry is None else pl.concat([carry, df]))
                del df
                if whole is not None:
                    yield whole
        if carry is not None and carry.height:
            yield self._checked(carry, carry.get_column("session_id").rle_id())
        if self._names and self.run_names.len() != self.run_names.n_unique():
            raise NotValid  # a session's rows are not contiguous

    def _cut(self, df: pl.DataFrame) -> tuple[pl.DataFrame | None, pl.DataFrame]:
        """(the checked whole sessions of ``df`` or None, the rows of its last session)."""
        sid = df.get_column("session_id")
        if sid.null_count():
            raise NotValid  # no session to cut at
        if not df.height:
            return None, df
        # runs of equal neighbouring ids, numbered from 0 (rows of a session are contiguous,
        # else the check at the end fails): the last run starts where its number first shows
        run = sid.rle_id()
        cut = int(run.search_sorted(run[-1], side="left"))
        return (self._checked(df.slice(0, cut), run.slice(0, cut)) if cut else None), df.slice(cut)

    def _checked(self, df: pl.DataFrame, run: pl.Series) -> pl.DataFrame:
        S.check_size(df, self.path)
        first = first_rows(run)
        if _broken(df.with_columns(first)):
            raise NotValid
        before = sum(n.len() for n in self._names)
        self._names.append(df.get_column("session_id").filter(first))
        # a column with no value in the batch (a trace without block hashes: two 8 B-per-call
        # columns) is kept as a null column, which touches no pages, not as decoded nulls
        out = df.select(
            pl.repeat(None, df.height, dtype=df.schema[c]).alias(c)
            if df.get_column(c).null_count() == df.height and df.height
            else pl.col(c)
            for c in self.columns
        )
        if self.run_codes and "session_id" in self.columns:
            # the session's ordinal in the file: its run number in the batch, after the
            # sessions of the batches before
            out = out.with_columns((run + before).alias("session_id"))
        return out


def first_rows(run: pl.Series) -> pl.Series:
    """``_first``: where each run of ``run`` (``rle_id`` of the session ids) begins."""
    r = run.to_numpy()
    first = np.empty(r.size, np.bool_)
    first[:1] = True
    np.not_equal(r[1:], r[:-1], out=first[1:])
    return pl.Series("_first", first)


def refuses(df: pl.DataFrame) -> bool:
    """Whether ``schema.validate`` refuses ``df`` (all schema columns; limits aside), as a
    yes or no at a fraction of its cost: each run of equal session ids must be a session
    of its own (no window over sessions), and no rule needs a column with no value (a
    524,288-call frame: 0.015-0.03 s against 0.05-0.1 s)."""
    for col in S.COLUMNS:
        got = df.schema.get(col.name)
        if got is None or (got != col.dtype and not isinstance(got, pl.Null)):
            return True
    if df.height == 0:
        return False
    df = S.null_typed(df)
    sid = df.get_column("session_id")
    if sid.null_count():
        return True
    run = sid.rle_id()
    if int(run[-1]) + 1 != sid.n_unique():  # a session's rows are apart
        return True
    return _broken(df.with_columns(first_rows(run)))


def validate(df: pl.DataFrame, path) -> None:
    """``schema.validate`` of a frame of whole sessions (all schema columns), at a fraction
    of its cost where it accepts: ``refuses`` first, ``schema.validate`` only to word what
    that refuses, and the limits (``schema.check_size``) otherwise. (``schema.validate``
    itself stays the independent reference the readers' tests compare with.)"""
    if refuses(df):
        S.validate(df, path)
    else:
        S.check_size(df, path)


def _broken(df: pl.DataFrame) -> bool:
    """Whether any row breaks a rule of ``schema.validate`` (sessions contiguous within
    ``df``, ``_first`` marking each session's first row, so the per-session rules need no
    group-by: call_index restarts at 0 and steps by 1, times never go back). A rule that
    needs a value of a column with none in ``df`` (a trace without block hashes or think
    times) cannot hit and is not evaluated: 40 % of the checks' time on such a trace."""
    if any(df.get_column(k.name).null_count() for k in S.COLUMNS if not k.nullable and k.name in df.columns):  # fmt: skip
        return True
    c, first = pl.col, pl.col("_first")
    size = c("block_size_tokens")

    def some(name: str) -> bool:
        return df.get_column(name).null_count() < df.height

    rules = [
        *(c(x) < 0 for x in S.COUNT_COLUMNS),
        ~c("t_start_s").is_finite(),
        c("reused_prefix_tokens") > c("input_tokens"),
        c("new_tokens") != c("input_tokens") - c("reused_prefix_tokens"),
        pl.when(first)
        .then(c("call_index") != 0)
        .otherwise(c("call_index") != c("call_index").shift(1) + 1),
        ~first & (c("t_start_s") < c("t_start_s").shift(1)),
    ]
    if some("think_time_s"):
        rules.append((c("think_time_s") < 0) | ~c("think_time_s").is_finite())
    if some("block_size_tokens"):
        rules.append(size <= 0)
    if some("block_hashes"):
        hashes = c("block_hashes").is_not_null()
        rules += [hashes & size.is_null(), hashes & (c("block_hashes").list.len() != (c("input_tokens") + size - 1) // size)]  # fmt: skip
    hit = df.select(pl.any_horizontal([r.fill_null(False) for r in rules]).any())
    return bool(hit.item())


def lexical_codes(run_names: pl.Series, run_index: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(codes, names): each row's session as its rank in byte order of the ids (UInt32), so
    sorting, ranking and grouping by the codes equal doing so by the strings; ``names[code]``
    is the id. ``run_names`` holds distinct ids (one per session, ``TraceBatches.run_names``)."""
    order = run_names.arg_sort()
    rank = np.empty(order.len(), dtype=np.uint32)
    rank[order.to_numpy()] = np.arange(order.len(), dtype=np.uint32)
    codes = pl.Series("session_id", rank[run_index.to_numpy()])
    return codes, run_names.gather(order)
