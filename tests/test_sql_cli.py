"""``agentx sql`` through click, and the terminal contract every command keeps (help, --json)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click
import polars as pl
import pytest
from _runs_fixture import make_runs, write_trace_file
from click.testing import CliRunner

from agentx.cli import COMMANDS, cli


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sqlcli")
    trace = write_trace_file(root / "trace.parquet")
    make_runs(root / "runs", trace)
    return root, trace


def invoke(*args):
    return CliRunner().invoke(cli, list(map(str, args)))


def test_table_csv_json_parquet_agree(data, tmp_path):
    root, trace = data
    sql = "SELECT session_id, calls, max_input_tokens FROM sessions ORDER BY session_id"
    want = (
        pl.read_parquet(trace)
        .group_by("session_id")
        .agg(calls=pl.len(), max_input_tokens=pl.col("input_tokens").max())
        .sort("session_id")
    )
    r = invoke("sql", sql, trace)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert (
        lines[0].split() == ["session_id", "calls", "max_input_tokens"]
        and len(lines) == want.height + 2
    )
    r = invoke("sql", sql, trace, "--format", "csv")
    assert pl.read_csv(r.output.encode()).equals(want.cast({"calls": pl.Int64}))
    r = invoke("sql", sql, trace, "--format", "json")
    assert json.loads(r.output) == want.to_dicts()
    out = tmp_path / "res.parquet"
    r = invoke("sql", sql, trace, "--format", "parquet", "-o", out)
    assert r.exit_code == 0 and r.output == ""
    assert pl.read_parquet(out).equals(want.cast({"calls": pl.Int64}))
    first = out.read_bytes()
    invoke("sql", sql, trace, "--format", "parquet", "-o", out)
    assert out.read_bytes() == first  # same input, byte-identical output


def test_named_query_over_runs(data):
    root, _ = data
    r = invoke("sql", "--runs", root / "runs", "--query", "cheapest_system", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["rank"] for x in rows] == [1, 2, 3]
    assert rows[0]["system"] == "gb200"  # the fixture's fastest system spends the least energy


def test_named_query_with_trace_argument(data):
    _, trace = data
    r = invoke("sql", "--query", "session_growth", trace, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)[0]["calls"] == pl.read_parquet(trace).height


def test_list_queries():
    r = invoke("sql", "--list-queries")
    assert r.exit_code == 0
    assert any(line.startswith("energy_per_stage ") for line in r.output.splitlines())


def test_bad_sql_is_one_line_exit_1(data):
    _, trace = data
    r = invoke("sql", "SELEC 1", trace)
    assert r.exit_code == 1
    assert r.output == 'Error: query failed: Parser Error: syntax error at or near "SELEC"\n'
    r = invoke("sql", "SELECT * FROM nope", trace)
    assert r.exit_code == 1 and r.output.startswith(
        "Error: query failed: Catalog Error: Table with name nope does not exist!"
    )
    assert "views: calls, sessions" in r.output


def test_writing_files_from_sql_is_refused(data, tmp_path):
    _, trace = data
    leak = tmp_path / "leak.csv"
    r = invoke("sql", f"COPY calls TO '{leak}'", trace)
    assert r.exit_code == 1
    assert r.output.startswith(
        f'Error: query refused: Permission Error: Cannot access file "{leak}"'
    )
    assert r.output.count("\n") == 1 and not leak.exists()


def test_usage_errors_exit_2(data, tmp_path):
    root, trace = data
    r = invoke("sql", "SELECT 1", "--format", "parquet")
    assert r.exit_code == 2 and "give -o OUT.parquet" in r.output
    r = invoke("sql")
    assert r.exit_code == 2 and "give a SQL statement or --query NAME" in r.output
    r = invoke("sql", "--query", "energy_per_stag")
    assert (
        r.exit_code == 2
        and r.output == "Error: unknown query 'energy_per_stag'; did you mean 'energy_per_stage'?\n"
    )
    before = trace.read_bytes()
    r = invoke("sql", "SELECT 1", trace, "-o", trace, "--format", "csv")
    assert r.exit_code == 2 and "is the input" in r.output and trace.read_bytes() == before
    r = invoke("sql", "SELECT 1", "--runs", root / "runs", "-o", root / "runs" / "kv" / "x.csv")
    assert r.exit_code == 2 and "inside the input folder" in r.output


def test_missing_trace_exit_1(tmp_path):
    r = invoke("sql", "SELECT 1", tmp_path / "none.parquet")
    assert r.exit_code == 1 and r.output == f"Error: {tmp_path / 'none.parquet'}: no such file\n"


# Terminal experience (issue 6 part 6): every registered command's help ends with an example,
# and every command that prints a table offers --json (or a --format with json).
TABLE_COMMANDS = {
    "inspect",
    "hw",
    "models",
    "plan",
    "replay",
    "kv-curve",
    "sweep",
    "simulate",
    "sql",
}


def walk(name: str, cmd: click.Command):
    """(command path, command) for a command and, for a group, every subcommand below it."""
    yield [name], cmd
    if isinstance(cmd, click.Group):
        for sub_name, sub in sorted(cmd.commands.items()):
            for path, c in walk(sub_name, sub):
                yield [name, *path], c


@pytest.mark.parametrize("name,module", COMMANDS)
def test_every_command_help_ends_with_example(name, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"command module {module} not written yet")
    for path, cmd in walk(name, importlib.import_module(module).command):
        r = invoke(*path, "--help")
        assert r.exit_code == 0, r.output
        last_paragraph = r.output.rstrip().split("\n\n")[-1].strip()
        assert last_paragraph.startswith("Example: agentx"), (path, r.output)
        assert (cmd.epilog or "").startswith("Example: agentx"), path
        # a table-printing command (a group's leaves) offers --json or --format json
        if name in TABLE_COMMANDS and not isinstance(cmd, click.Group):
            opts = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
            fmt = next((p for p in cmd.params if p.name == "fmt"), None)
            assert "--json" in opts or (fmt is not None and "json" in fmt.type.choices), path


def test_docs_cli_documents_every_command_and_exit_code():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in doc
    for name, module in COMMANDS:
        assert f"### `agentx {name}`" in doc, name
        if importlib.util.find_spec(module) is not None:
            for path, _ in walk(name, importlib.import_module(module).command):
                assert f"### `agentx {' '.join(path)}`" in doc, path


def test_table_prints_booleans_as_words(data):
    _, trace = data
    r = invoke(
        "sql", "SELECT bool_or(is_compaction) AS any_compaction, count(*) AS n FROM calls", trace
    )
    assert r.exit_code == 0
    assert r.output.splitlines()[2].split()[0] == "true"


def test_json_output_is_strict_json(data):
    _, trace = data
    r = invoke(
        "sql", "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, 1.5 AS c", trace, "--format", "json"
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) == [
        {"a": None, "b": None, "c": 1.5}
    ]
