"""Pieces the agent-log importers share (Claude Code, Codex, OpenTelemetry GenAI spans).

Each reader turns its files into a ``Calls`` table of plain lists (one entry per model call,
wall-clock times in epoch seconds); ``assemble`` puts all sessions on one clock, orders them,
derives think time and sub-agent parent links, and hands the frame to ``finish``. No prompt or
response text is ever copied into a ``Calls`` table: readers keep counts, ids and times only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from agentx.errors import InputError
from agentx.traces.importers._common import finish, parse_json, read_bytes
from agentx.traces.io import Trace, trace_metadata

FIELDS = (
    "session_id",
    "agent_id",
    "t_begin",  # epoch s: when the call was sent (its prompt's last entry)
    "t_end",  # epoch s: when its response was complete (last entry of the response)
    "input_tokens",
    "reused_prefix_tokens",
    "output_tokens",
    "trigger",
    "model",
    "marked_compaction",  # the source itself marks a compaction boundary before this call
)


class Calls:
    """Columns of model calls as lists, appended in file order."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {k: [] for k in FIELDS}

    def add(self, **values) -> None:
        for k in FIELDS:
            self.cols[k].append(values[k])

    def __len__(self) -> int:
        return len(self.cols["session_id"])


def source_files(sources, suffix: str, what: str) -> list[Path]:
    """Files named ``*suffix`` in each source (a file, or a folder searched recursively)."""
    files: list[Path] = []
    for src in [sources] if isinstance(sources, (str, Path)) else list(sources):
        src = Path(src)
        if src.is_file():
            files.append(src)
        elif src.is_dir():
            found = sorted(p for p in src.rglob(f"*{suffix}") if p.is_file())
            if not found:
                raise InputError(src, f"no {what} (*{suffix}) in this folder or below")
            files.extend(found)
        else:
            raise InputError(src, "no such file or folder")
    seen: set[Path] = set()
    unique = [p for p in files if not (p.resolve() in seen or seen.add(p.resolve()))]
    if not unique:
        raise InputError(str(sources), f"no {what} given")
    return unique


def json_lines(path: Path):
    """``(line number, object)`` for each non-blank line of a JSON Lines file."""
    text = read_bytes(path)
    for line_no, line in enumerate(text.split(b"\n"), 1):
        if line.strip():
            obj = parse_json(path, line, f"line {line_no}")
            if not isinstance(obj, dict):
                raise InputError(
                    path, f"expected a JSON object, got {obj!r:.40}", where=f"line {line_no}"
                )
            yield line_no, obj


def iso_seconds(value: object, path: Path, where: str, field: str) -> float:
    """Epoch seconds of an ISO-8601 time; a time without zone is taken as UTC."""
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if t.tzinfo is None:
                t = t.replace(tzinfo=UTC)
            return t.timestamp()
    raise InputError(
        path, f"expected an ISO-8601 time, got {value!r:.40}", where=where, field=field
    )


def assemble(calls: Calls, source: str, options: dict, path: object) -> Trace:
    """One validated trace from the calls of all files.

    * clock: 0 s is the earliest call of all sessions; every call keeps its wall-clock gap;
    * rows: sessions ordered by their first call, calls by send time (ties keep file order);
    * ``think_time_s``: send time − the end of the same agent's previous call (≥ 0; null first);
    * ``parent_call_index``: for a sub-agent's calls, the call of the main agent last sent
      before the sub-agent's first call (the one that spawned it); null for main-agent calls;
    * ``shared_prefix_tokens``: the reused prefix of the agent's first call, i.e. what the
      provider's cache already held from other sessions (tool definitions, system prompt).
    """
    if len(calls) == 0:
        raise InputError(path, "no model calls with token usage in the input")
    c = calls.cols
    df = pl.DataFrame(
        {**c, "_seq": np.arange(len(calls))},
        schema_overrides={
            "agent_id": pl.String,
            "model": pl.String,
            "t_begin": pl.Float64,
            "t_end": pl.Float64,
            "marked_compaction": pl.Boolean,
        },
    )
    t0 = df["t_begin"].min()
    df = (
        df.with_columns(pl.col("t_begin").min().over("session_id").alias("_first"))
        .sort("_first", "session_id", "t_begin", "_seq")
        .with_columns(
            pl.int_range(pl.len()).over("session_id").alias("call_index"),
            (pl.col("t_begin") - t0).alias("t_start_s"),
        )
    )
    by_agent = ["session_id", "agent_id"]
    gap = pl.col("t_begin") - pl.col("t_end").shift(1).over(by_agent)
    df = df.with_columns(
        pl.when(gap < 0).then(0.0).otherwise(gap).alias("think_time_s"),
        pl.min_horizontal(
            pl.col("reused_prefix_tokens").first().over(by_agent), pl.col("input_tokens")
        ).alias("shared_prefix_tokens"),
        pl.col("marked_compaction").alias("is_compaction"),
        pl.when(pl.col("marked_compaction"))
        .then(pl.lit("compaction"))
        .when(pl.col("agent_id").is_not_null() & (pl.int_range(pl.len()).over(by_agent) == 0))
        .then(pl.lit("subagent"))
        .otherwise(pl.col("trigger"))
        .alias("trigger"),
    )
    df = df.with_columns(_parent_links(df))
    n = df.height
    df = df.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("block_size_tokens"),
        pl.Series("block_hashes", [None] * n, dtype=pl.List(pl.UInt64)),
        pl.lit(source).alias("source"),
    )
    meta = trace_metadata(source, block_size_tokens=None, hash_scope="none", options=options)
    keep = [
        "session_id",
        "call_index",
        "agent_id",
        "t_start_s",
        "input_tokens",
        "reused_prefix_tokens",
        "output_tokens",
        "is_compaction",
        "shared_prefix_tokens",
        "block_size_tokens",
        "block_hashes",
        "trigger",
        "think_time_s",
        "model",
        "source",
        "parent_call_index",
    ]
    return finish(df.select(keep), meta, path)


def _parent_links(df: pl.DataFrame) -> pl.Series:
    """Per row: the main-agent call that spawned the row's sub-agent (null for the main agent)."""
    main = df.filter(pl.col("agent_id").is_null()).select(
        "session_id", pl.col("t_begin").alias("_t"), pl.col("call_index").alias("_parent")
    )
    first = (
        df.filter(pl.col("agent_id").is_not_null())
        .group_by("session_id", "agent_id")
        .agg(pl.col("t_begin").min().alias("_t"))
        .sort("_t")
    )
    links = first.join_asof(
        main.sort("_t"), on="_t", by="session_id", strategy="backward", check_sortedness=False
    )
    out = df.join(
        links.select("session_id", "agent_id", "_parent"),
        on=["session_id", "agent_id"],
        how="left",
        maintain_order="left",
    )
    return out["_parent"].cast(pl.Int64).alias("parent_call_index")
