"""``agentx sql``: DuckDB over traces and run directories."""

from __future__ import annotations

import json
from pathlib import Path

import click
import polars as pl

from agentx.cli._common import format_table
from agentx.errors import UsageError

FORMATS = ("table", "csv", "json", "parquet")


@click.command(
    "sql",
    epilog='Example: agentx sql "SELECT count(*) FROM sessions" w.parquet --format json',
)
@click.argument("sql", required=False)
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--runs",
    "runs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Folder of run directories (repeatable); each table becomes a view with a 'run' column.",
)
@click.option("--query", "query_name", help="Run a named query from analysis/*.sql instead of SQL.")
@click.option("--list-queries", is_flag=True, help="List the named queries and exit.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output format (parquet needs -o).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the result here (atomically) instead of printing it.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json (as every command).")
def command(sql, traces, runs, query_name, list_queries, fmt, output, as_json) -> None:
    """Run SQL over TRACES (views calls, sessions) and runs (views per table, runs, summary).

    SQL reads only the loaded data: file access is switched off before your query runs, so
    COPY … TO, ATTACH, INSTALL and read_parquet('…') fail; use -o to save a result.
    """
    from agentx.analysis.queries import get_query
    from agentx.analysis.queries import list_queries as all_queries

    if list_queries:
        for q in all_queries():
            click.echo(f"{q.name:<22} {q.description}  [needs: {', '.join(q.needs)}]")
        return
    if query_name:
        if sql is not None:
            # click took the first trace path as SQL: with --query every argument is a trace.
            traces = (Path(sql), *traces)
        sql = get_query(query_name).sql
    if not sql:
        raise UsageError("give a SQL statement or --query NAME (see --list-queries)")
    if as_json:
        if fmt not in ("table", "json"):
            raise UsageError(f"give --json or --format {fmt}, not both")
        fmt = "json"
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet writes binary data; give -o OUT.parquet")
    run_result(sql, list(traces), list(runs), fmt, output)


def run_result(
    sql: str, traces: list[Path], runs: list[Path], fmt: str, output: Path | None
) -> None:
    from agentx.analysis.views import open_db
    from agentx.io import check_output, write_parquet_atomic, write_text_atomic

    inputs = [*traces, *runs]
    if output is not None:
        check_output(output, inputs)
    with open_db(traces, runs) as db:
        df = db.query(sql, fmt)
    if fmt == "parquet":
        write_parquet_atomic(df, output, inputs=inputs)
        return
    text = render(df, fmt)
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
    else:
        write_text_atomic(output, text if text.endswith("\n") else text + "\n", inputs=inputs)


def render(df: pl.DataFrame, fmt: str) -> str:

    if fmt == "csv":
        return df.write_csv()
    if fmt == "json":
        # NaN and ±inf are not JSON: they become null at any depth, as in pandas' and polars'
        # JSON writers; key order is the query's column order.
        rows = [strict_row(r) for r in df.iter_rows(named=True)]
        return json.dumps(rows, indent=2, allow_nan=False) + "\n"
    # format_table prints bools as integers (bool is an int); SQL users expect true/false.
    bools = [pl.col(c).cast(pl.String) for c, t in df.schema.items() if t == pl.Boolean]
    return format_table(df.with_columns(bools) if bools else df)


def strict_row(row: dict) -> dict:
    from agentx.io import strict_json

    return {k: strict_json(v) for k, v in row.items()}
