"""The canonical agentic trace: one row per model call (schema version 1).

``COLUMNS`` is the single definition of every column (type, unit, meaning); it drives
validation, ``traces/README.md`` and the empty-frame constructor. Checks are vectorized:
each invariant is one polars expression, and only the first offending row is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from agentx.errors import InputError

SCHEMA_VERSION = "1"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType
    nullable: bool
    unit: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column(
        "session_id",
        pl.String(),
        False,
        "-",
        "Session (one agent conversation); sub-agent calls keep their parent's session.",
    ),
    Column(
        "call_index",
        pl.Int64(),
        False,
        "-",
        "Order of the call inside its session: 0, 1, 2, … contiguous, by arrival.",
    ),
    Column(
        "agent_id",
        pl.String(),
        True,
        "-",
        "Sub-agent id inside the session; null for the main agent.",
    ),
    Column(
        "t_start_s",
        pl.Float64(),
        False,
        "s",
        "Arrival time from the trace start, on one clock shared by all sessions.",
    ),
    Column(
        "input_tokens",
        pl.Int64(),
        False,
        "tokens",
        "Whole prompt of the call, cached and uncached.",
    ),
    Column(
        "reused_prefix_tokens",
        pl.Int64(),
        False,
        "tokens",
        "Leading prompt tokens identical to a prefix of an earlier call (block hashes or the source's cache-read field); ≤ input_tokens.",
    ),
    Column(
        "new_tokens",
        pl.Int64(),
        False,
        "tokens",
        "input_tokens − reused_prefix_tokens: what must be filled (prefill or midfill).",
    ),
    Column("output_tokens", pl.Int64(), False, "tokens", "Generated tokens (decode steps)."),
    Column(
        "is_compaction",
        pl.Boolean(),
        False,
        "-",
        "True when this call starts a compacted context: the prompt shrank sharply and only the fixed tool/system prefix is shared with the previous call of the same agent (SEED-6).",
    ),
    Column(
        "shared_prefix_tokens",
        pl.Int64(),
        False,
        "tokens",
        "Leading tokens common to all sessions of the same client (tool definitions + system prompt); 0 when unknown. Lets KV models store that prefix once across sessions (SEED-7).",
    ),
    Column(
        "block_size_tokens",
        pl.Int64(),
        True,
        "tokens",
        "Tokens per block of block_hashes; null when the source has no hashes.",
    ),
    Column(
        "block_hashes",
        pl.List(pl.UInt64()),
        True,
        "-",
        "One id per block of the prompt, ceil(input_tokens / block_size_tokens) of them; equal ids at equal positions mean equal prefixes. Scope (session or global) is in the file metadata 'hash_scope'.",
    ),
    Column(
        "trigger",
        pl.String(),
        False,
        "-",
        "What prompted the call: user, tool_result, subagent, compaction, request (non-agentic sources) or unknown.",
    ),
    Column(
        "think_time_s",
        pl.Float64(),
        True,
        "s",
        "Client-side gap before the call (tool run time or human time); null when unknown.",
    ),
    Column("model", pl.String(), True, "-", "Model name recorded by the source."),
    Column(
        "source",
        pl.String(),
        False,
        "-",
        "Importer that produced the row: weka, mooncake, azure, tracelab, claude-code, codex, otel or synth.",
    ),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
SCHEMA: dict[str, pl.DataType] = {c.name: c.dtype for c in COLUMNS}
COUNT_COLUMNS = (
    "input_tokens",
    "reused_prefix_tokens",
    "new_tokens",
    "output_tokens",
    "shared_prefix_tokens",
)

# Keys of the Parquet key-value metadata every trace carries.
META_SCHEMA_VERSION = "agentx.schema_version"
META_SOURCE = "agentx.source"
META_BLOCK_SIZE = "agentx.block_size_tokens"
META_HASH_SCOPE = "agentx.hash_scope"  # "session" (ids local to a session) | "global" | "none"
META_OPTIONS = "agentx.importer_options"  # JSON of the importer's options


def empty_trace() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Order and cast columns to the canonical schema (extra columns are kept after them)."""
    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    if missing:
        raise ValueError(f"trace frame lacks columns {missing}")
    extra = [c for c in df.columns if c not in SCHEMA]
    return df.select([pl.col(c).cast(SCHEMA[c]) for c in COLUMN_NAMES] + extra)


def _where(df: pl.DataFrame, i: int) -> str:
    return f"session '{df['session_id'][i]}' call {df['call_index'][i]}"


def null_typed(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with each column of null type (every value absent) cast to the type it stands
    for, so it is checked as that type."""
    return df.with_columns(
        pl.col(c.name).cast(c.dtype) for c in COLUMNS if isinstance(df.schema[c.name], pl.Null)
    )


def check_size(df: pl.DataFrame, path: object = "<trace>") -> None:
    """The limits a frame of calls keeps (agentx.limits): how many calls, and each call's
    tokens; ``LimitError`` names the file (and row) past one."""
    from agentx.limits import check

    check("calls", df.height, str(path))
    big = df.get_column("input_tokens").max()
    if big is not None and big > 0:
        check("call_tokens", big, f"{path}: row {int(df['input_tokens'].arg_max())}")


def validate(df: pl.DataFrame, path: object = "<trace>") -> None:
    """Raise ``InputError`` naming file, row, session/call and column at the first broken invariant."""
    for col in COLUMNS:
        if col.name not in df.columns:
            raise InputError(
                path,
                f"missing column (schema v{SCHEMA_VERSION} needs {', '.join(COLUMN_NAMES)})",
                field=col.name,
            )
        got = df.schema[col.name]
        if got != col.dtype and not (isinstance(got, pl.Null)):
            raise InputError(path, f"expected type {col.dtype}, got {got}", field=col.name)
    if df.height == 0:
        return
    from agentx.limits import check

    check("calls", df.height, str(path))
    df = null_typed(df)
    for col in COLUMNS:
        if not col.nullable:
            bad = df[col.name].is_null()
            if bad.any():
                i = int(bad.arg_max())
                raise InputError(path, "expected a value, got null", row=i, field=col.name)
    big = df["input_tokens"].max()
    if big is not None and big > 0:
        check("call_tokens", big, f"{path}: row {int(df['input_tokens'].arg_max())}")
    checks: list[tuple[str, pl.Expr, str]] = [
        *[(c, pl.col(c) < 0, "expected a non-negative token count") for c in COUNT_COLUMNS],
        ("t_start_s", ~pl.col("t_start_s").is_finite(), "expected a finite time in seconds"),
        (
            "think_time_s",
            pl.col("think_time_s").is_not_null()
            & ((pl.col("think_time_s") < 0) | ~pl.col("think_time_s").is_finite()),
            "expected a non-negative finite time in seconds",
        ),
        (
            "reused_prefix_tokens",
            pl.col("reused_prefix_tokens") > pl.col("input_tokens"),
            "expected reused_prefix_tokens ≤ input_tokens",
        ),
        (
            "new_tokens",
            pl.col("new_tokens") != pl.col("input_tokens") - pl.col("reused_prefix_tokens"),
            "expected new_tokens = input_tokens − reused_prefix_tokens",
        ),
        (
            "block_size_tokens",
            pl.col("block_size_tokens").is_not_null() & (pl.col("block_size_tokens") <= 0),
            "expected a positive block size",
        ),
        (
            "block_size_tokens",
            pl.col("block_hashes").is_not_null() & pl.col("block_size_tokens").is_null(),
            "expected a block size where block_hashes are given",
        ),
        (
            "block_hashes",
            pl.col("block_hashes").is_not_null()
            & (
                pl.col("block_hashes").list.len()
                != (pl.col("input_tokens") + pl.col("block_size_tokens") - 1)
                // pl.col("block_size_tokens")
            ),
            "expected ceil(input_tokens / block_size_tokens) hashes",
        ),
        (
            "call_index",
            pl.col("call_index") != pl.int_range(pl.len()).over("session_id"),
            "expected call_index 0, 1, 2, … contiguous within the session, rows grouped by session in call order",
        ),
        (
            "t_start_s",
            pl.col("t_start_s") < pl.col("t_start_s").shift(1).over("session_id"),
            "expected times sorted within the session",
        ),
    ]
    flags = df.select(
        [expr.fill_null(False).alias(f"{i}") for i, (_, expr, _) in enumerate(checks)]
    )
    for i, (field, _, msg) in enumerate(checks):
        s = flags[f"{i}"]
        if s.any():
            r = int(s.arg_max())
            got = df[field][r]
            if field == "block_hashes":
                got = f"{len(got)} hashes for {df['input_tokens'][r]} tokens of block size {df['block_size_tokens'][r]}"
            raise InputError(path, f"{msg}, got {got}", row=r, field=field, where=_where(df, r))
    sessions = df["session_id"]
    first_rows = sessions.ne_missing(sessions.shift(1))
    if int(first_rows.sum()) != sessions.n_unique():
        dup = (
            df.with_row_index("_r").filter(first_rows).filter(pl.col("session_id").is_duplicated())
        )
        r = int(dup["_r"][1]) if dup.height > 1 else 0
        raise InputError(
            path,
            "expected each session's rows to be contiguous",
            row=r,
            field="session_id",
            where=_where(df, r),
        )
