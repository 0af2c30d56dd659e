"""TraceLab (UW SyFI) coding-agent JSONL: one row per LLM step, explicit sessions.

The reused prefix is the provider's prompt-cache read (``prefix_tokens``), not block hashes.
A call's time is its first timing event; the clock starts at the earliest such event in the
file, so sessions keep their real relative placement. Think time is the client-side gap from
the previous step's last event to this step's first (tool run time or human time).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from agentx.errors import InputError
from agentx.traces.importers._common import count, finish, parse_json, read_bytes
from agentx.traces.io import Trace, trace_metadata

_TRIGGERS = {"user_message": "user", "tool_result": "tool_result"}


def _time(value: object, path: Path, where: str, field: str) -> float:
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        # a time without an offset is UTC, never the machine's TZ: same file, same trace
        return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError, OSError):
        raise InputError(
            path, f"expected an ISO-8601 time, got {value!r:.40}", where=where, field=field
        ) from None


def _row(r: object, path: Path, where: str) -> dict:
    if not isinstance(r, dict):
        raise InputError(path, f"expected a JSON object, got {r!r:.40}", where=where)
    session = r.get("session_id")
    if not isinstance(session, str) or not session:
        raise InputError(
            path, f"expected a session id, got {session!r:.40}", where=where, field="session_id"
        )
    n_in = count(r.get("input_tokens_total"), path, where, "input_tokens_total")
    prefix = count(r.get("prefix_tokens"), path, where, "prefix_tokens")
    new = count(r.get("newly_append_tokens"), path, where, "newly_append_tokens")
    if prefix > n_in or new != n_in - prefix:
        raise InputError(
            path,
            f"expected input_tokens_total − prefix_tokens = {n_in - prefix}, got {new}",
            where=where,
            field="newly_append_tokens",
        )
    events = r.get("timing_events")
    if not isinstance(events, list) or not events or not all(isinstance(e, dict) for e in events):
        raise InputError(
            path, "expected a non-empty list of timing events", where=where, field="timing_events"
        )
    times = [_time(e.get("timestamp"), path, where, "timing_events.timestamp") for e in events]
    model = r.get("model")
    return {
        "session_id": session,
        "round_index": count(r.get("round_index"), path, where, "round_index"),
        "t_abs": times[0],
        "t_end": max(times),
        "input_tokens": n_in,
        "reused_prefix_tokens": prefix,
        "output_tokens": count(r.get("output_tokens"), path, where, "output_tokens"),
        "trigger": _TRIGGERS.get(str(r.get("first_input_event_type")), "unknown"),
        "model": model if isinstance(model, str) else None,
    }


def load_tracelab(source: Path | str) -> Trace:
    """Read a TraceLab round_trace JSONL file."""
    path = Path(source)
    if path.is_dir():
        raise InputError(path, "is a folder, expected one TraceLab .jsonl file")
    rows = []
    for line_no, line in enumerate(read_bytes(path).splitlines(), 1):
        if line.strip():
            where = f"line {line_no}"
            rows.append(_row(parse_json(path, line, where), path, where) | {"_line": line_no})
    if not rows:
        raise InputError(path, "no rows")
    df = pl.DataFrame(rows, schema_overrides={"model": pl.String})
    first_line = pl.col("_line").min().over("session_id")
    df = df.sort(first_line, "t_abs", "round_index", "_line")
    gap = pl.col("t_abs") - pl.col("t_end").shift(1).over("session_id")
    df = df.with_columns(
        pl.int_range(pl.len()).over("session_id").alias("call_index"),
        pl.lit(None, pl.String).alias("agent_id"),
        (pl.col("t_abs") - pl.col("t_abs").min()).alias("t_start_s"),
        pl.lit(0).alias("shared_prefix_tokens"),
        pl.lit(None, pl.Int64).alias("block_size_tokens"),
        pl.lit(None, pl.List(pl.UInt64)).alias("block_hashes"),
        pl.when(gap >= 0).then(gap).otherwise(None).alias("think_time_s"),
        pl.lit("tracelab").alias("source"),
    )
    meta = trace_metadata(
        "tracelab",
        block_size_tokens=None,
        hash_scope="none",
        options={"clock_start_unix_s": df["t_abs"].min()},
    )
    return finish(df.drop("t_abs", "t_end", "round_index", "_line"), meta, path)
