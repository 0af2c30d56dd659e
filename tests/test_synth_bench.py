"""Benchmark-shape traces (agentx synth --isl/--osl/--concurrency)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.cli import cli
from agentx.traces.io import read_trace
from agentx.traces.synth_bench import synthesize_benchmark


@settings(max_examples=25, deadline=None)
@given(
    isl=st.integers(1, 20_000),
    osl=st.integers(1, 4_000),
    conc=st.integers(1, 300),
    seed=st.integers(0, 2**31),
)
def test_lengths_are_uniform_in_the_harness_range_and_nothing_is_reused(isl, osl, conc, seed):
    t = synthesize_benchmark(isl, osl, conc, seed=seed).calls
    assert t.height == 10 * conc
    assert t["input_tokens"].min() >= max(1, round(0.8 * isl)) and t["input_tokens"].max() <= isl
    assert t["output_tokens"].min() >= max(1, round(0.8 * osl)) and t["output_tokens"].max() <= osl
    assert (t["reused_prefix_tokens"] == 0).all() and (t["think_time_s"] == 0).all()
    assert t["session_id"].n_unique() == conc
    assert (t.group_by("session_id").len()["len"] == 10).all()


def test_mean_length_is_nine_tenths_of_nominal():
    t = synthesize_benchmark(8192, 1024, 256, seed=3).calls
    assert t["input_tokens"].mean() == pytest.approx(0.9 * 8192, rel=0.01)
    assert t["output_tokens"].mean() == pytest.approx(0.9 * 1024, rel=0.01)


def test_cli_writes_the_same_bytes_for_the_same_seed(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for out in (a, b):
        res = CliRunner().invoke(
            cli, ["synth", "--isl", "1024", "--osl", "1024", "--concurrency", "64", "-o", str(out)]
        )
        assert res.exit_code == 0, res.output
    assert a.read_bytes() == b.read_bytes()
    tr = read_trace(a)
    assert tr.calls.height == 640
    opts = json.loads(tr.meta["agentx.importer_options"])
    assert opts["closed_loop"] is True and opts["concurrency"] == 64


@pytest.mark.parametrize(
    "args,message",
    [
        (["--isl", "1024"], "Error: the benchmark shape needs --osl, --concurrency as well\n"),
        (
            ["--isl", "1", "--osl", "1", "--concurrency", "0"],
            "Error: --concurrency must be a positive integer, got 0\n",
        ),
        (
            ["--isl", "1", "--osl", "1", "--concurrency", "2", "--sessions", "3"],
            "Error: --sessions does not apply to the benchmark shape (--isl/--osl)\n",
        ),
    ],
)
def test_cli_bad_benchmark_options(tmp_path, args, message):
    res = CliRunner().invoke(cli, ["synth", *args, "-o", str(tmp_path / "x.parquet")])
    assert res.exit_code != 0
    assert res.output.endswith(message)
    assert not (tmp_path / "x.parquet").exists()
