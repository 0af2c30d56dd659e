"""Streamed partitioning (agentx.fleet.stream): session-aligned batches, same dataset as in memory."""

from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq
import pytest
from _mutations import CASES, broken_file
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.errors import InputError
from agentx.fleet import plan_fleet
from agentx.fleet.partition import write_dataset
from agentx.fleet.stream import partition_stream, session_batches
from agentx.limits import LimitError
from agentx.replay.config import make_config
from agentx.traces.io import read_trace

EXTRA = {"hw": "gb200", "model": "kimi-k2", "gpus_per_replica": 32}


@pytest.fixture(scope="module")
def cfg():
    return make_config(load_catalog(()), "gb200", "kimi-k2")


@pytest.fixture(scope="module")
def small_synth(tmp_path_factory):
    """A synthetic trace written by the streamed generator in several chunks."""
    import agentx.traces.synth as sy
    from agentx.traces.io import write_trace_chunks

    path = tmp_path_factory.mktemp("synth") / "s.parquet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sy, "CHUNK_CALLS", 1_500)
        chunks, meta = sy.synth_chunks(n_calls=6_000, seed=9)
        write_trace_chunks(chunks, meta, path)
    return path


def _same_dataset(a, b, replicas: int) -> None:
    assert json.loads((a / "fleet.json").read_text()) == json.loads((b / "fleet.json").read_text())
    for r in range(replicas):
        ta = pq.read_table(a / f"replica={r}" / "part-0.parquet")
        tb = pq.read_table(b / f"replica={r}" / "part-0.parquet")
        assert ta.schema.metadata == tb.schema.metadata, r
        assert ta.equals(tb), r


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(1, 5_000),
    replicas=st.integers(1, 9),
    eps=st.sampled_from([0.0, 0.1, 0.25, 1.0]),
    which=st.sampled_from(["sample", "synth"]),
)
def test_streamed_partition_equals_the_in_memory_one(
    tmp_path_factory, cfg, sample_trace, small_synth, rows, replicas, eps, which
):
    """Any batch size: the manifest and every replica's rows and metadata are exactly
    plan_fleet's + write_dataset's."""
    src = sample_trace if which == "sample" else small_synth
    d = tmp_path_factory.mktemp("ds")
    parts, manifest = plan_fleet(read_trace(src), cfg, replicas, "session", eps=eps)
    write_dataset(parts, d / "mem", {**manifest, **EXTRA})
    partition_stream(src, d / "stream", replicas, EXTRA, eps=eps, rows=rows)
    _same_dataset(d / "mem", d / "stream", replicas)


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 3_000))
def test_batches_hold_whole_sessions_in_file_order(small_synth, rows):
    whole = pl.read_parquet(small_synth)
    seen, parts = set(), []
    for offset, df in session_batches(small_synth, rows):
        assert offset == sum(p.height for p in parts)
        ids = set(df["session_id"].unique())
        assert not ids & seen  # no session split over two batches
        seen |= ids
        parts.append(df)
    assert pl.concat(parts).equals(whole)


def test_cli_session_partition_streams_and_replays_as_routing_in_place(tmp_path, sample_trace):
    ds = tmp_path / "ds"
    r = CliRunner().invoke(cli, ["partition", str(sample_trace), "--hw", "gb200", "--replicas", "3",
                                 "--router", "session", "-o", str(ds), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["calls"] == pl.read_parquet(sample_trace).height
    a = CliRunner().invoke(
        cli, ["replay", str(ds), "--hw", "gb200", "-o", str(tmp_path / "a"), "-q"]
    )
    b = CliRunner().invoke(cli, ["replay", str(sample_trace), "--hw", "gb200", "--replicas", "3",
                                 "--router", "session", "-o", str(tmp_path / "b"), "-q"])  # fmt: skip
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    for t in ("calls", "replicas", "stages"):
        assert pl.read_parquet(tmp_path / "a" / f"{t}.parquet").equals(
            pl.read_parquet(tmp_path / "b" / f"{t}.parquet")
        ), t
    assert (tmp_path / "a" / "summary.json").read_bytes() == (
        tmp_path / "b" / "summary.json"
    ).read_bytes()


def test_the_call_limit_applies_per_batch(tmp_path, small_synth, monkeypatch):
    """A trace past AGENTX_MAX_CALLS streams when each batch is within it; the in-memory
    read refuses it."""
    monkeypatch.setenv("AGENTX_MAX_CALLS", "2000")
    with pytest.raises(LimitError, match="past the limit of 2,000"):
        read_trace(small_synth)
    m = partition_stream(small_synth, tmp_path / "ds", 4, EXTRA, rows=1_000)
    assert sum(m["calls_per_replica"].values()) == 6_000


def test_bad_rows_are_named_in_the_whole_file(tmp_path, small_synth):
    df = pl.read_parquet(small_synth)
    meta = read_trace(small_synth).meta
    bad = tmp_path / "bad.parquet"
    # a session's rows in two places: each batch is valid alone, the file is not
    first = df["session_id"][0]
    twice = pl.concat([df, df.filter(pl.col("session_id") == first)])
    pq.write_table(twice.to_arrow().replace_schema_metadata(meta), bad)
    with pytest.raises(InputError) as err:
        partition_stream(bad, tmp_path / "ds", 2, EXTRA, rows=500)
    n = df.height
    assert "expected each session's rows to be contiguous" in str(err.value)
    assert f"row {n}" in str(err.value) and not (tmp_path / "ds").exists()
    # a broken value deep in the file: the row is counted from the file's start
    neg = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 4_321)
        .then(-1)
        .otherwise(pl.col("output_tokens"))
        .alias("output_tokens")
    )
    pq.write_table(neg.to_arrow().replace_schema_metadata(meta), bad)
    with pytest.raises(
        InputError, match=r"row 4321: .*field 'output_tokens': expected a non-negative"
    ):
        partition_stream(bad, tmp_path / "ds", 2, EXTRA, rows=700)
    empty = tmp_path / "empty.parquet"
    pq.write_table(df.head(0).to_arrow().replace_schema_metadata(meta), empty)
    with pytest.raises(InputError, match="expected at least one call to route, got none"):
        partition_stream(empty, tmp_path / "ds", 2, EXTRA)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(*CASES)
def test_batches_refuse_a_broken_row_as_read_trace_does(tmp_path, kind, row, group, rows):
    # one rule broken in one row: the streamed batches refuse it with read_trace's words
    # (the row counted in the whole file); a file read_trace takes comes back whole
    p, want = broken_file(tmp_path, kind, row, group)
    if isinstance(want, InputError):
        err = want
        if kind == "session elsewhere":  # apart across batches: the router's pass refuses it
            try:
                ids = [set(df["session_id"]) for _, df in session_batches(p, rows)]
            except InputError as got:
                assert str(got) == str(err)
            else:
                assert any(a & b for i, a in enumerate(ids) for b in ids[i + 1 :])
            return
        with pytest.raises(InputError) as got:
            list(session_batches(p, rows))
        assert str(got.value) == str(err)
    else:
        got = pl.concat([df for _, df in session_batches(p, rows)])
        assert got.equals(want.calls)
