"""``agentx report``: one self-contained HTML file of run directories (and traces, curves)."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import emit_json, json_option, output_file_option, quiet_option


@click.command("report", epilog="Example: agentx report runs/ -o report.html --png-dir slides/")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@output_file_option("The HTML file to write (atomically).")
@click.option(
    "--png-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also export each chart as SVG and PNG into this folder.",
)
@json_option
@quiet_option
def command(paths, output, png_dir, as_json, quiet) -> None:
    """Tables and charts of PATHS in one HTML file: run directories (or folders of them), traces
    and kv-curve Parquet files.

    Vega, Vega-Lite and vega-embed are inlined: the file opens with no network. The HTML (and
    the exported charts) may go inside a run folder: only Parquet files there are tables.
    --json prints the files written and the report's opening answer (its sentences).
    """
    from agentx.analysis.report import write_report
    from agentx.errors import UsageError
    from agentx.io import ensure_distinct

    if output.suffix.lower() not in (".html", ".htm"):
        # Also keeps a report from posing as a table (.parquet) or manifest inside a run folder.
        raise UsageError(f"the report is HTML; name the output *.html, got '{output.name}'")
    ensure_distinct(output, paths, inside_ok=True)  # a report may sit beside its run
    progress_bar = False if quiet or as_json else None
    written = write_report(paths, output, png_dir=png_dir, progress_bar=progress_bar)
    if as_json:
        from agentx.analysis.report import report_answer

        emit_json({"written": [str(p) for p in written], "answer": report_answer(paths)})
        return
    for path in written:
        if not quiet:
            click.echo(str(path))
