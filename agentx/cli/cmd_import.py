"""``agentx import FORMAT SOURCE -o OUT.parquet``: a public trace into the canonical schema."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import emit_json, json_option, output_file_option, quiet_option
from agentx.traces.importers import FORMATS

_FORMATS_HELP = "\n".join(f"  {name}: {desc}" for name, (_, _, desc) in FORMATS.items())


@click.command(
    "import",
    help=f"""Import SOURCE... (format FORMAT) into one canonical trace Parquet file.

\b
Formats:
{_FORMATS_HELP}

Weka sessions carry no absolute start times; they are placed on one clock by a seeded Poisson
process of session arrivals (--session-rate, --seed). claude-code, codex and otel read
several files or folders at once and keep their wall-clock times; no prompt or response
text is read into the trace, only token counts, ids, times and model names. The output is written atomically and is
byte-identical for equal input and options.""",
    epilog="Example: agentx import weka ../shared/traces/weka-claude-code -o w.parquet",
)
@click.argument("fmt", metavar="FORMAT")
@click.argument("source", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_file_option("Trace to write (atomically).")
@click.option(
    "--session-rate",
    "session_rate_per_s",
    type=float,
    help="weka: session arrivals per second [default 1/6: one every 6 s].",
)
@click.option("--seed", type=int, help="weka: seed of the session arrival process [default 0].")
@json_option
@quiet_option
def command(fmt, source, output, session_rate_per_s, seed, as_json, quiet) -> None:
    from agentx.errors import UsageError
    from agentx.traces.importers import import_trace, loader

    loader(fmt)  # unknown format first: it is a usage error
    options: dict = {}
    if fmt == "weka":
        options["progress_bar"] = False if quiet else None
        if session_rate_per_s is not None:
            options["session_rate_per_s"] = session_rate_per_s
        if seed is not None:
            options["seed"] = seed
        if seed is not None and seed < 0:
            raise UsageError(f"--seed must be a non-negative integer, got {seed}")
    elif session_rate_per_s is not None or seed is not None:
        raise UsageError(f"--session-rate and --seed apply to the weka format only, not '{fmt}'")
    trace = import_trace(fmt, source if len(source) > 1 else source[0], output, **options)
    df = trace.calls
    summary = {
        "output": str(output),
        "format": fmt,
        "calls": df.height,
        "sessions": df["session_id"].n_unique(),
        "subagent_calls": int(df["agent_id"].is_not_null().sum()),
    }
    if as_json:
        emit_json(summary)
    elif not quiet:
        click.echo(
            f"wrote {output}: {summary['calls']:,} calls in {summary['sessions']:,} sessions "
            f"({summary['subagent_calls']:,} sub-agent calls) from {fmt}"
        )
