"""``agentx report``: one self-contained HTML file of run directories."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import quiet_option


@click.command("report", epilog="Example: agentx report runs/ -o report.html --png-dir slides/")
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file to write (atomically).",
)
@click.option(
    "--png-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also export each chart as SVG and PNG into this folder.",
)
@quiet_option
def command(run_dirs, output, png_dir, quiet) -> None:
    """Tables and charts of RUN_DIRS (run directories or folders of them) in one HTML file.

    Vega, Vega-Lite and vega-embed are inlined: the file opens with no network.
    """
    from agentx.analysis.report import write_report
    from agentx.errors import UsageError
    from agentx.io import ensure_distinct

    for d in run_dirs:
        if d.resolve() in output.resolve().parents or (
            png_dir is not None and d.resolve() in (png_dir.resolve(), *png_dir.resolve().parents)
        ):
            raise UsageError(
                f"output '{output if png_dir is None else png_dir}' lies inside the run folder '{d}'; choose another path"
            )
    ensure_distinct(output, run_dirs)
    for path in write_report(
        run_dirs, output, png_dir=png_dir, progress_bar=False if quiet else None
    ):
        if not quiet:
            click.echo(str(path))
