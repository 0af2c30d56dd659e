"""Pieces every importer shares: guarded reading, scalar checks, prefix reuse, compaction.

The prefix-reuse walk is the one computation that touches every block id (83 M of them for
the Weka set), so it is vectorized: ``leading_seen_blocks`` answers "how many leading blocks
of each call were already seen in an earlier call of the same group" without a Python loop.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path

import numpy as np
import polars as pl

from agentx.errors import InputError, one_line
from agentx.io import regular_file
from agentx.limits import check
from agentx.traces import schema as S
from agentx.traces.io import Trace

# Compaction rule of SOURCES.md §6 (SEED-6): the prompt falls below 0.6x the previous call of
# the same agent, and that previous prompt held more than 20,000 tokens.
COMPACTION_MIN_PREV_TOKENS = 20_000
COMPACTION_DROP_RATIO = 0.6


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by magic number, not by name)."""
    regular_file(path, "trace file")  # a FIFO would block forever
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror or exc})") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise InputError(path, f"truncated or corrupt gzip ({_first_line(exc)})") from None


def parse_json(path: Path, text: bytes | str, where: str | None = None) -> object:
    try:
        return json.loads(text)
    except UnicodeDecodeError:
        raise InputError(path, "not UTF-8 text", where=where) from None
    except RecursionError:
        raise InputError(path, "not readable JSON: nested too deeply", where=where) from None
    except json.JSONDecodeError as exc:
        # inside one JSON Lines record the record's own line number is already in ``where``
        at = f"column {exc.colno}" if where else f"line {exc.lineno}, column {exc.colno}"
        raise InputError(path, f"not valid JSON: {exc.msg} ({at})", where=where) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def located(path: Path, where: str | None, field: str) -> str:
    """``file: line N: field 'x'``, as ``InputError`` names a place (for other error kinds)."""
    named = [one_line(path), *([one_line(where)] if where else []), f"field '{one_line(field)}'"]
    return ": ".join(named)


def count(value: object, path: Path, where: str | None, field: str) -> int:
    """A non-negative integer token count (JSON ``true`` and ``3.0`` are refused). A count past
    the per-call token limit stops here, naming its line and field, not later as a trace row."""
    if type(value) is int and 0 <= value < 1 << 63:
        named = [
            one_line(path),
            *([one_line(where)] if where else []),
            f"field '{one_line(field)}'",
        ]
        check("call_tokens", value, ": ".join(named))
        return value
    if value is None:
        raise InputError(
            path, "expected a non-negative integer, got nothing", where=where, field=field
        )
    raise InputError(
        path, f"expected a non-negative integer, got {value!r}", where=where, field=field
    )


def seconds(
    value: object, path: Path, where: str | None, field: str, *, optional: bool = False
) -> float | None:
    """A finite non-negative number of seconds; None when ``optional`` and absent."""
    if value is None and optional:
        return None
    if is_time(value):
        return float(value)
    got = "nothing" if value is None else repr(value)
    raise InputError(
        path, f"expected a non-negative number of seconds, got {got}", where=where, field=field
    )


def is_time(value: object) -> bool:
    """A finite non-negative JSON number that fits a float (huge integers do not)."""
    if type(value) is int:
        return 0 <= value < 1 << 60
    return type(value) is float and math.isfinite(value) and value >= 0


def leading_seen_blocks(
    group: np.ndarray, rank: np.ndarray, offsets: np.ndarray, ids: np.ndarray
) -> np.ndarray:
    """Per call, the number of leading block ids already seen in an earlier call of its group.

    Call ``i`` owns ``ids[offsets[i]:offsets[i+1]]``; ``rank`` orders calls within a group
    (earlier = smaller). An id counts as seen when any call of the same group with a smaller
    rank carries it, which is an infinite prefix cache walked in rank order.
    """
    n = len(rank)
    offsets = np.asarray(offsets, dtype=np.int64)
    lens = np.diff(offsets)
    starts = offsets[:-1]
    if n == 0 or len(ids) == 0:
        return np.zeros(n, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    nonempty = lens > 0
    call_max = np.zeros(n, dtype=np.uint64)
    call_max[nonempty] = np.maximum.reduceat(ids, starts[nonempty])
    gmax = np.zeros(int(group.max()) + 1, dtype=np.uint64)
    np.maximum.at(gmax, group, call_max)
    span = gmax.astype(np.float64) + 1
    if gmax.max() < (1 << 40) and span.sum() <= 4 * len(ids) + (1 << 20):
        # ids are dense per group (new content gets the next id): index one flat table
        base = np.concatenate(([0], np.cumsum(gmax.astype(np.int64) + 1)[:-1]))
        key = ids.astype(np.int64)
        key += np.repeat(base[group], lens)
        size = int(base[-1] + gmax[-1]) + 1
    else:
        packed = np.stack([np.repeat(group.astype(np.uint64), lens), ids], axis=1)
        _, key = np.unique(packed, axis=0, return_inverse=True)
        key = key.reshape(-1)
        size = int(key.max()) + 1
    rdtype = np.int32 if n < (1 << 31) else np.int64
    elem_rank = np.repeat(np.asarray(rank, dtype=rdtype), lens)
    first = np.full(size, np.iinfo(rdtype).max, dtype=rdtype)
    np.minimum.at(first, key, elem_rank)
    unseen = np.flatnonzero(first[key] >= elem_rank)  # first occurrences, in element order
    nxt = np.searchsorted(unseen, starts)
    first_unseen = np.append(unseen, len(ids))[nxt]
    return np.minimum(first_unseen, offsets[1:]) - starts


def compaction_flags(df: pl.DataFrame) -> pl.Series:
    """SEED-6 compaction: rows must already be sorted by session and call order."""
    prev = pl.col("input_tokens").shift(1).over(["session_id", "agent_id"])
    flag = (prev > COMPACTION_MIN_PREV_TOKENS) & (
        pl.col("input_tokens") < COMPACTION_DROP_RATIO * prev
    )
    return df.select(flag.fill_null(False).alias("is_compaction"))["is_compaction"]


def finish(df: pl.DataFrame, meta: dict[str, str], path: object) -> Trace:
    """Add derived columns, order and cast to schema v1, and validate before anyone writes it."""
    df = df.with_columns(
        (pl.col("input_tokens") - pl.col("reused_prefix_tokens")).alias("new_tokens"),
    )
    flags = compaction_flags(df)
    if "is_compaction" in df.columns:  # the source's own compaction markers, kept alongside
        flags = flags | df["is_compaction"].fill_null(False)
    df = df.with_columns(flags)
    df = S.conform(df)
    S.validate(df, path)
    return Trace(df, meta)
