"""``agentx export TRACE --format mooncake|weka -o OUT``: a canonical trace for other replay tools."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import emit_json, json_option, quiet_option


@click.command(
    "export",
    help="""Write TRACE (an agentx trace Parquet file) in a format other replay tools read.

\b
Formats:
  mooncake: Mooncake FAST'25 JSONL (timestamp ms, input_length, output_length, 512-token
            hash_ids), as read by AIPerf, Dynamo's trace replay and kvcache-simulator
  weka:     a new folder of Weka/AgentX session JSON files (64-token local hash_ids,
            sub-agents nested), as read by kv-cache-tester and the InferenceX agentic replay

Block ids come from the trace's block_hashes where their size fits; otherwise they are
derived from the token counts (each call keeps the previous call's blocks over its reused
prefix). The output is written atomically and never onto the input.""",
    epilog="Example: agentx export w.parquet --format mooncake -o w.jsonl",
)
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    required=True,
    help="Output format: mooncake (one JSONL file) or weka (a new folder).",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="File or folder to write.",
)
@json_option
@quiet_option
def command(trace, fmt, output, as_json, quiet) -> None:
    from agentx.errors import UnknownNameError
    from agentx.io import ensure_distinct
    from agentx.traces.export import FORMATS, export_trace
    from agentx.traces.io import read_trace

    if fmt not in FORMATS:
        raise UnknownNameError("export format", fmt, FORMATS)
    ensure_distinct(output, [trace])
    t = read_trace(trace)
    n = export_trace(t, fmt, output)
    what = "requests" if fmt == "mooncake" else "session files"
    summary = {"output": str(output), "format": fmt, what.replace(" ", "_"): n}
    if as_json:
        emit_json(summary)
    elif not quiet:
        click.echo(f"wrote {output}: {n:,} {what} ({fmt}) from {t.calls.height:,} calls")
