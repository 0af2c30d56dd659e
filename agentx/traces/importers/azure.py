"""Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens; Splitwise 2023).

No sessions and no prefix information: every row is its own one-call session, nothing is
reused, and the clock starts at the earliest TIMESTAMP.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentx.errors import InputError
from agentx.traces.importers._common import finish, read_bytes
from agentx.traces.io import Trace, trace_metadata

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MIN_YEAR, MAX_YEAR = 1970, 2200
TIME_FORMAT = "%Y-%m-%d %H:%M:%S%.f"


def _first_bad(path: Path, bad: pl.Series, raw: pl.Series, field: str, expected: str) -> None:
    if bad.any():
        i = int(bad.arg_max())
        # line numbers count the header as line 1, as an editor shows them
        got = "nothing" if raw[i] is None else repr(raw[i])
        raise InputError(
            path, f"expected {expected}, got {got}", where=f"line {i + 2}", field=field
        )


def load_azure(source: Path | str) -> Trace:
    """Read an Azure LLM inference CSV; one call per row, each its own session."""
    path = Path(source)
    if path.is_dir():
        raise InputError(path, "is a folder, expected one Azure .csv file")
    text = read_bytes(path)
    try:
        raw = pl.read_csv(text, infer_schema=False, has_header=True)
    except (pl.exceptions.PolarsError, UnicodeDecodeError) as exc:
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(path, f"not a readable CSV ({line})") from None
    for col in COLUMNS:
        if col not in raw.columns:
            raise InputError(
                path,
                f"missing column (expected {', '.join(COLUMNS)}; found {', '.join(raw.columns)})",
                field=col,
            )
    if raw.height == 0:
        raise InputError(path, "no rows")
    parsed = raw.select(
        pl.col("TIMESTAMP")
        .str.strip_chars()
        .str.to_datetime(TIME_FORMAT, time_unit="us", strict=False),
        *[pl.col(c).str.strip_chars().cast(pl.Int64, strict=False) for c in COLUMNS[1:]],
    )
    _first_bad(
        path,
        parsed["TIMESTAMP"].is_null(),
        raw["TIMESTAMP"],
        "TIMESTAMP",
        "a time like 2023-11-16 18:15:46.6805900",
    )
    for col in COLUMNS[1:]:
        v = parsed[col]
        _first_bad(
            path,
            v.is_null() | (v < 0).fill_null(False),
            raw[col],
            col,
            "a non-negative integer token count",
        )
    ts = parsed["TIMESTAMP"]
    # The 2023 trace's clock; a year such as 1000 or 9999 is damage, not a trace (and past
    # 2262 nanoseconds since 1970 no longer fit in 64 bits).
    _first_bad(
        path,
        (ts.dt.year() < MIN_YEAR) | (ts.dt.year() > MAX_YEAR),
        raw["TIMESTAMP"],
        "TIMESTAMP",
        f"a time between the years {MIN_YEAR} and {MAX_YEAR}",
    )
    n = raw.height
    df = pl.DataFrame(
        {
            "session_id": pl.int_range(n, eager=True).cast(pl.String),
            "call_index": pl.zeros(n, pl.Int64, eager=True),
            "agent_id": pl.Series([None] * n, dtype=pl.String),
            "t_start_s": (ts - ts.min()).dt.total_nanoseconds() / 1e9,
            "input_tokens": parsed["ContextTokens"],
            "reused_prefix_tokens": pl.zeros(n, pl.Int64, eager=True),
            "output_tokens": parsed["GeneratedTokens"],
            "shared_prefix_tokens": pl.zeros(n, pl.Int64, eager=True),
            "block_size_tokens": pl.Series([None] * n, dtype=pl.Int64),
            "block_hashes": pl.Series([None] * n, dtype=pl.List(pl.UInt64)),
            "trigger": "request",
            "think_time_s": pl.Series([None] * n, dtype=pl.Float64),
            "model": pl.Series([None] * n, dtype=pl.String),
            "source": "azure",
        }
    )
    meta = trace_metadata(
        "azure", block_size_tokens=None, hash_scope="none", options={"clock_start": str(ts.min())}
    )
    return finish(df, meta, path)
