"""``agentx inspect TRACE.parquet``: what a canonical trace holds (see traces/README.md)."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import emit_json, json_option


@click.command(
    "inspect",
    epilog="Example: agentx inspect w.parquet --json",
)
@click.argument("trace", type=click.Path(path_type=Path))
@json_option
def command(trace, as_json) -> None:
    """Sessions, calls, sub-agent calls, token percentiles, token-weighted prefix reuse,
    compaction events, context growth per session, duration and arrival rate of TRACE."""
    import polars as pl

    from agentx.cli._common import print_table
    from agentx.traces.stats import distribution_rows, inspect_trace, read_for_stats

    stats = inspect_trace(read_for_stats(trace))
    if as_json:
        emit_json(stats)
        return
    t, comp = stats["time"], stats["compaction"]
    reuse = stats["prefix_reuse_token_weighted"]
    summary = [
        ("source", stats["source"]),
        ("hash scope", stats["hash_scope"]),
        (
            "block size",
            f"{stats['block_size_tokens']} tokens" if stats["block_size_tokens"] else "-",
        ),
        ("sessions", f"{stats['sessions']:,}"),
        ("calls", f"{stats['calls']:,}"),
        ("main-agent calls", f"{stats['main_agent_calls']:,}"),
        ("sub-agent calls", f"{stats['subagent_calls']:,} ({stats['subagents']:,} sub-agents)"),
        ("input tokens (sum)", f"{stats['tokens']['input_tokens']['sum']:,}"),
        ("output tokens (sum)", f"{stats['tokens']['output_tokens']['sum']:,}"),
        ("prefix reuse, token-weighted", "-" if reuse is None else f"{100 * reuse:.1f} %"),
        (
            "compaction events",
            f"{comp['events']:,} in {comp['sessions']:,} sessions ({comp['prefix_only_events']:,} keep only the tool+system prefix)",
        ),
        ("trace duration", f"{t['trace_duration_s']:,.0f} s"),
        ("call arrival rate", _rate(t["call_rate_per_s"])),
        ("session arrival rate", _rate(t["session_rate_per_s"])),
        ("triggers", ", ".join(f"{k} {v:,}" for k, v in stats["triggers"].items())),
    ]
    print_table(pl.DataFrame(summary, schema=["metric", "value"], orient="row"))
    click.echo("")
    print_table(pl.DataFrame(distribution_rows(stats), infer_schema_length=None))


def _rate(per_s: float | None) -> str:
    return "-" if per_s is None else f"{per_s:.4g} /s"
