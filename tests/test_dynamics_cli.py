"""``agentx sweep`` and ``agentx simulate``: outputs, exact errors, exit codes, determinism."""

from __future__ import annotations

import hashlib

import polars as pl
import pytest
from click.testing import CliRunner

from agentx.cli import cli
from agentx.dynamics.engine import TS_COLUMNS
from agentx.dynamics.sweep import COLUMNS
from agentx.runs import read_run

SIM_CALL_COLUMNS = (
    "session_id",
    "call_index",
    "arrival_s",
    "admitted_s",
    "first_token_s",
    "done_s",
    "queue_delay_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "status",
    "drop_reason",
)


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_sweep_writes_a_run_and_is_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    r = _run("sweep", "--hw", "b200,gb200", "--gpus", "16", "-o", a, "-q")
    assert r.exit_code == 0, r.output
    assert "SEED-19 GB200 leads decode" in r.output
    assert _run("sweep", "--hw", "b200,gb200", "--gpus", "16", "-o", b, "-q").exit_code == 0
    assert _digest(a) == _digest(b)
    run = read_run(a)
    assert run.kind == "sweep"
    df = run.table("sweep")
    assert tuple(df.columns) == COLUMNS  # the names the analysis views read
    assert df["fits"].dtype == pl.Boolean


def test_sweep_json_has_the_verdicts(tmp_path):
    r = _run("sweep", "--hw", "gb200", "--gpus", "16,32", "--json", "-o", tmp_path / "j", "-q")
    assert r.exit_code == 0
    assert '"seed21_hbm"' in r.output and '"points": 600' in r.output


@pytest.mark.parametrize(
    ("args", "code", "first_line"),
    [
        (
            ["sweep", "seed-stdy", "-o", "X"],
            2,
            "Error: unknown scenario 'seed-stdy'; did you mean 'seed-study'?",
        ),
        (["sweep", "-o", "X"], 2, "Error: give a SCENARIO or both --hw and --gpus"),
        (
            ["sweep", "--hw", "gb200", "--gpus", "16,x", "-o", "X"],
            2,
            "Error: --gpus expects comma-separated integers, got '16,x'",
        ),
        (
            ["sweep", "--hw", "gb20", "--gpus", "16", "-o", "X"],
            2,
            "Error: unknown hardware 'gb20'; did you mean 'gb200'?",
        ),
    ],
)
def test_sweep_errors(tmp_path, args, code, first_line):
    args = [str(tmp_path / "out") if a == "X" else a for a in args]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == code
    assert r.output.splitlines()[-1] == first_line
    assert "Traceback" not in r.output


def test_simulate_writes_both_tables(tmp_path, sample_trace):
    out = tmp_path / "sim"
    r = _run(
        "simulate", sample_trace, "--hw", "gb200", "--gpus", "16", "--policy", "pi", "-o", out, "-q"
    )
    assert r.exit_code == 0, r.output
    assert "Little's law" in r.output
    run = read_run(out)
    assert run.kind == "simulate" and run.manifest["inputs"]["trace"]["sha256"]
    calls = run.table("sim_calls")
    assert set(SIM_CALL_COLUMNS) <= set(calls.columns)
    assert calls.height == pl.read_parquet(sample_trace).height
    assert set(TS_COLUMNS) <= set(run.table("sim_timeseries").columns)
    again = tmp_path / "sim2"
    assert (
        _run(
            "simulate",
            sample_trace,
            "--hw",
            "gb200",
            "--gpus",
            "16",
            "--policy",
            "pi",
            "-o",
            again,
            "-q",
        ).exit_code
        == 0
    )
    assert _digest(out) == _digest(again)


def test_simulate_aggregated_json(tmp_path, sample_trace):
    r = _run(
        "simulate",
        sample_trace,
        "--hw",
        "b200",
        "--pools",
        "aggregated",
        "--json",
        "-o",
        tmp_path / "s",
        "-q",
    )
    assert r.exit_code == 0
    assert '"pools": "aggregated"' in r.output and '"kv_moved_bytes": 0.0' in r.output


@pytest.mark.parametrize(
    ("extra", "code", "first_line"),
    [
        (["--gpus", "0"], 2, "Error: --gpus must be a positive integer, got 0"),
        (
            ["--gpus", "16", "--fill-gpus", "16"],
            2,
            "Error: --fill-gpus must be between 1 and 15 for 16 GPUs, got 16",
        ),
        (["--hw", "b20"], 2, "Error: unknown hardware 'b20'; did you mean 'b200'?"),
        (["--sample-s", "0"], 2, "Error: --sample-s must be positive, got 0.0"),
    ],
)
def test_simulate_usage_errors(tmp_path, sample_trace, extra, code, first_line):
    args = ["simulate", str(sample_trace), "--hw", "gb200", "-o", str(tmp_path / "o"), *extra]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == code
    assert r.output.splitlines()[-1] == first_line


def test_simulate_bad_trace_is_one_line_exit_1(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    r = CliRunner().invoke(cli, ["simulate", str(bad), "--hw", "gb200", "-o", str(tmp_path / "o")])
    assert r.exit_code == 1
    assert r.output.startswith(f"Error: {bad}")
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["sweep", "simulate"])
def test_help_ends_with_example(name):
    r = CliRunner().invoke(cli, [name, "--help"])
    assert r.exit_code == 0
    assert r.output.strip().splitlines()[-1].strip().startswith("Example: agentx " + name)
