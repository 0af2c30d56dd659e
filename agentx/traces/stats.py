"""What a trace holds: counts, token percentiles, prefix reuse, compaction, context growth, time.

``inspect_trace`` returns plain JSON-able values (ints, floats, strings, dicts) so the CLI,
notebooks and tests read the same figures. Percentiles interpolate linearly (numpy's
default), as SOURCES.md §6 computed its reference figures.
"""

from __future__ import annotations

import polars as pl

from agentx.traces import schema as S
from agentx.traces.importers._common import COMPACTION_DROP_RATIO, COMPACTION_MIN_PREV_TOKENS
from agentx.traces.io import Trace

QUANTILES = (0.5, 0.9, 0.99)


def _dist(s: pl.Series, *, with_sum: bool = False) -> dict[str, float | int | None]:
    """mean, p50, p90, p99, max (and sum) of a numeric series; None entries when empty."""
    s = s.drop_nulls()
    out: dict[str, float | int | None] = {"n": s.len()}
    if s.len() == 0:
        out.update(dict.fromkeys(("mean", "p50", "p90", "p99", "max"), None))
    else:
        out["mean"] = float(s.mean())
        for q in QUANTILES:
            out[f"p{round(q * 100)}"] = float(s.quantile(q, interpolation="linear"))
        out["max"] = s.max().item() if hasattr(s.max(), "item") else s.max()
    if with_sum:
        out["sum"] = int(s.sum()) if s.len() else 0
    return out


def inspect_trace(trace: Trace) -> dict:
    """Summary statistics of a validated trace (see traces/README.md for each figure)."""
    df = trace.calls
    main = df.filter(pl.col("agent_id").is_null())
    sessions = df.group_by("session_id", maintain_order=True).agg(
        pl.len().alias("calls"),
        pl.col("t_start_s").min().alias("t_first_s"),
        pl.col("t_start_s").max().alias("t_last_s"),
    )
    growth = (
        main.group_by("session_id", maintain_order=True)
        .agg(
            pl.col("input_tokens").first().alias("first"),
            pl.col("input_tokens").last().alias("last"),
            pl.col("input_tokens").max().alias("max"),
            pl.len().alias("n"),
        )
        .with_columns(
            pl.when(pl.col("n") > 1)
            .then((pl.col("last") - pl.col("first")) / (pl.col("n") - 1))
            .alias("per_call")
        )
    )
    input_sum = int(df["input_tokens"].sum())
    block = trace.meta.get(S.META_BLOCK_SIZE) or None
    comp = df.filter(pl.col("is_compaction"))
    prefix_only = comp.filter(
        pl.col("reused_prefix_tokens")
        <= pl.col("shared_prefix_tokens") + pl.col("block_size_tokens").fill_null(0)
    )
    span_s = float(df["t_start_s"].max() - df["t_start_s"].min()) if df.height else 0.0
    starts = sessions["t_first_s"]
    start_span_s = float(starts.max() - starts.min()) if sessions.height else 0.0
    return {
        "source": trace.source,
        "schema_version": trace.meta.get(S.META_SCHEMA_VERSION),
        "hash_scope": trace.hash_scope,
        "block_size_tokens": int(block) if block else None,
        "sessions": sessions.height,
        "calls": df.height,
        "main_agent_calls": main.height,
        "subagent_calls": df.height - main.height,
        "subagents": df.filter(pl.col("agent_id").is_not_null())
        .select("session_id", "agent_id")
        .n_unique(),
        "calls_per_session": _dist(sessions["calls"]),
        "tokens": {
            c: _dist(df[c], with_sum=True)
            for c in ("input_tokens", "output_tokens", "new_tokens", "reused_prefix_tokens")
        },
        "prefix_reuse_token_weighted": (int(df["reused_prefix_tokens"].sum()) / input_sum)
        if input_sum
        else None,
        "new_over_input_per_call": _dist(
            (df["new_tokens"] / df["input_tokens"]).filter(df["input_tokens"] > 0)
        ),
        "compaction": {
            "events": comp.height,
            "sessions": comp["session_id"].n_unique(),
            "prefix_only_events": prefix_only.height,
            "rule": f"input < {COMPACTION_DROP_RATIO} x the same agent's previous call, which had > {COMPACTION_MIN_PREV_TOKENS} tokens",
        },
        "context_growth": {
            "first_input_tokens": _dist(growth["first"]),
            "last_input_tokens": _dist(growth["last"]),
            "max_input_tokens": _dist(growth["max"]),
            "growth_tokens_per_call": _dist(growth["per_call"]),
        },
        "time": {
            "trace_duration_s": span_s,
            "session_duration_s": _dist(sessions["t_last_s"] - sessions["t_first_s"]),
            "think_time_s": _dist(df["think_time_s"]),
            "call_rate_per_s": df.height / span_s if span_s > 0 else None,
            "session_rate_per_s": (sessions.height - 1) / start_span_s
            if start_span_s > 0
            else None,
        },
        "triggers": dict(sorted(df["trigger"].value_counts().rows())),
        "models": dict(sorted((str(k), v) for k, v in df["model"].value_counts().rows())),
    }


def distribution_rows(stats: dict) -> list[dict]:
    """The percentile block of ``inspect_trace`` as table rows (quantity, unit, n, mean, p50 …)."""
    named = {
        "calls per session": stats["calls_per_session"],
        **{k: v for k, v in stats["tokens"].items()},
        "new / input per call": stats["new_over_input_per_call"],
        **{f"session {k}": v for k, v in stats["context_growth"].items()},
        "session_duration_s": stats["time"]["session_duration_s"],
        "think_time_s": stats["time"]["think_time_s"],
    }
    keys = ("n", "mean", "p50", "p90", "p99", "max")
    return [{"quantity": name, **{k: d.get(k) for k in keys}} for name, d in named.items()]


def read_for_stats(path) -> Trace:
    """Read a trace for ``inspect_trace`` without its block ids (the slow column, never used
    here): every other invariant is still validated; ``block_hashes`` comes back null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentx.errors import InputError
    from agentx.io import decode_metadata, regular_file
    from agentx.traces.io import read_trace

    regular_file(path, "Parquet file")
    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
    except (pa.ArrowException, OSError):
        return read_trace(path)  # let the common reader word the damage
    if "block_hashes" not in names:
        return read_trace(path)
    try:
        table = pf.read(columns=[n for n in names if n != "block_hashes"])
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(path, f"not a readable Parquet file ({first})") from None
    meta = decode_metadata(pf.schema_arrow.metadata)
    table = table.replace_schema_metadata(None)  # polars panics on non-UTF-8 metadata
    version = meta.get(S.META_SCHEMA_VERSION)
    if version != S.SCHEMA_VERSION:
        return read_trace(path)  # the common reader explains what is wrong with the version
    df = pl.from_arrow(table).with_columns(pl.lit(None, pl.List(pl.UInt64)).alias("block_hashes"))
    S.validate(df, path)
    return Trace(S.conform(df), meta)
