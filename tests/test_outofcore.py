"""The out-of-core replay (agentx.replay.outofcore) equals the in-memory one.

Any partition size, any time-range size, with or without KV tiers, at any tier capacities:
summary values equal (integers exactly, floats within 1e-9 relative), calls.parquet holds the
same rows in the same row groups (byte-identical here), and the spill folder is removed.
The pieces are checked on their own: the session partitions are ``session_cuts``', the radix
select gives polars' quantiles exactly, the bucketed sweep gives ``resident_context``'s peak.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from _mutations import CASES, broken_file
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.errors import InputError
from agentx.kv import TierCapacities, replay_tiers
from agentx.replay import bounded as B
from agentx.replay import make_config
from agentx.replay.chunks import replay_chunks, session_cuts
from agentx.replay.outofcore import replay_file
from agentx.replay.replay import (
    TRACE_COLUMNS,
    merge_partials,
    resident_context,
    write_calls,
)
from agentx.traces.io import read_trace, read_trace_columns, write_trace
from agentx.traces.partitions import NotStreamable, session_partitions
from agentx.traces.synth import synthesize

CFG = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
KV_READ = ["is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes"]


def assert_close(a, b, path="summary") -> None:
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)), (path, a, b)
    else:
        assert a == b, (path, a, b)


def in_memory(path, kv_tiers, caps, rows, out):
    tr = read_trace_columns(path, [*TRACE_COLUMNS, *(KV_READ if kv_tiers else ())])
    kv = replay_tiers(tr, CFG, caps) if kv_tiers else None
    parts = replay_chunks(tr.calls, CFG, kv.per_call if kv else None, rows)
    return merge_partials(write_calls(parts, out, {}), CFG, kv.summary if kv else None)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("ooc")
    out = {}
    for n, seed in ((300, 1), (2500, 7)):
        out[n] = d / f"s{n}.parquet"
        write_trace(synthesize(n_calls=n, seed=seed), out[n])
    return out


CAPS = st.sampled_from(
    [None, (0.0, 0.0, 0.0), (2e9, 1e10, 5e10), (1e8, 1e11, 1e11), (5e9, 5e9, 1e13)]
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.sampled_from([300, 2500]),
    rows=st.integers(1, 3000),
    bucket_rows=st.integers(1, 3000),
    kv_tiers=st.booleans(),
    caps=CAPS,
)
def test_out_of_core_equals_in_memory(
    tmp_path_factory, traces, n, rows, bucket_rows, kv_tiers, caps
):
    d = tmp_path_factory.mktemp("run")
    caps = None if caps is None else TierCapacities(*caps)
    want = in_memory(traces[n], kv_tiers, caps, rows, d / "a.parquet")
    got = replay_file(traces[n], CFG, kv_tiers=kv_tiers, capacities=caps, calls_path=d / "b.parquet",
                      meta={}, rows=rows, bucket_rows=bucket_rows)  # fmt: skip
    assert_close(got.summary, want.summary)
    assert got.stages.columns == want.stages.columns
    assert pl.read_parquet(d / "a.parquet").equals(pl.read_parquet(d / "b.parquet"))
    assert (d / "a.parquet").read_bytes() == (d / "b.parquet").read_bytes()
    if kv_tiers and caps is not None and caps.hbm_bytes == 0:
        assert want.summary["kv_tiers"]["hits"]["hbm"]["tokens"] == 0


def test_spill_folder_is_removed_even_on_error(tmp_path, traces, monkeypatch):
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv("AGENTX_SPILL_DIR", str(spill))
    replay_file(traces[300], CFG, rows=50, bucket_rows=40)
    assert not list(spill.iterdir())

    def boom(*a, **k):
        raise RuntimeError("stop")

    monkeypatch.setattr("agentx.replay.outofcore._price", boom)
    with pytest.raises(RuntimeError):
        replay_file(traces[300], CFG, rows=50, bucket_rows=40)
    assert not list(spill.iterdir())


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.integers(1, 3000))
def test_partitions_are_session_cuts(traces, rows):
    df = read_trace(traces[2500]).calls
    got = list(session_partitions(traces[2500], ["session_id", "call_index"], rows))
    assert [(o, f.height) for o, f in got] == session_cuts(df, rows)
    assert pl.concat([f for _, f in got]).equals(df.select("session_id", "call_index"))


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(*CASES)
def test_partitions_refuse_what_read_trace_refuses(tmp_path, kind, row, group, rows):
    # a partition that breaks a rule sends the replay to the whole read, which words the error
    p, want = broken_file(tmp_path, kind, row, group)
    if isinstance(want, InputError):
        with pytest.raises(NotStreamable):
            list(session_partitions(p, list(TRACE_COLUMNS), rows))
    else:
        got = [f for _, f in session_partitions(p, list(TRACE_COLUMNS), rows)]
        assert pl.concat(got).equals(want.calls.select(TRACE_COLUMNS))


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([0.0, -0.0, 1.5]),
        min_size=1,
        max_size=300,
    ),
    gather=st.integers(0, 40),
    chunk=st.integers(1, 50),
)
def test_radix_select_quantiles_equal_polars(values, gather, chunk):
    v = np.array(values)
    got = B.quantiles(
        lambda: (v[i : i + chunk] for i in range(0, v.size, chunk)),
        v.size,
        (0.5, 0.9, 0.99, 0.0, 1.0),
        gather,
    )
    want = [pl.Series(v).quantile(q, interpolation="linear") for q in (0.5, 0.9, 0.99, 0.0, 1.0)]
    assert got == want


@settings(max_examples=60, deadline=None)
@given(
    t0=st.lists(st.integers(0, 30).map(float), min_size=1, max_size=200),
    busy=st.data(),
    n_buckets=st.integers(1, 12),
    batch=st.integers(1, 8),
)
def test_bucketed_sweep_equals_resident_context(t0, busy, n_buckets, batch):
    t0 = np.array(t0)
    dur = np.array(
        busy.draw(st.lists(st.integers(0, 9).map(float), min_size=t0.size, max_size=t0.size))
    )
    ctx = np.arange(t0.size, dtype=np.int64) % 7 + 1
    calls = pl.DataFrame({"t_start_s": t0, "input_tokens": ctx, "output_tokens": ctx * 0})
    want = resident_context(calls, dur, batch)
    bounds = B.time_buckets(t0, n_buckets)
    t1 = t0 + dur
    state = B.peak_state()
    ba, bf = B.bucket_of(t0, bounds), B.bucket_of(t1, bounds)
    c = ctx.astype(float)
    for b in range(bounds.size + 1):
        B.sweep_bucket(t0[ba == b], c[ba == b], t1[bf == b], c[bf == b], batch, state)
    assert (state[2], state[3]) == want


def _cli(path, out, *extra, env=None):
    res = CliRunner().invoke(
        cli,
        [
            "replay",
            str(path),
            "--hw",
            "gb200",
            "--model",
            "kimi-k2",
            "--gpus",
            "32",
            "-o",
            str(out),
            "--quiet",
            *extra,
        ],
        env=env,
    )
    return res


@pytest.mark.parametrize(
    "extra",
    [(), ("--no-kv-tiers", "--calls", "summary"), ("--chunk-rows", "77"),
     ("--max-block-refs", "6000")],  # re-blocked: the streamed count picks the same size
)  # fmt: skip
def test_cli_switches_out_of_core_past_the_row_limit(tmp_path, traces, monkeypatch, extra):
    a = _cli(traces[2500], tmp_path / "a", *extra)
    monkeypatch.setattr("agentx.traces.partitions.OUT_OF_CORE_ROWS", 100)
    called = []
    import agentx.replay.outofcore as O

    real = O.replay_file
    monkeypatch.setattr(O, "replay_file", lambda *a, **k: called.append(1) or real(*a, **k))
    b = _cli(traces[2500], tmp_path / "b", *extra)
    assert a.exit_code == b.exit_code == 0, (a.output, b.output)
    assert called and a.output == b.output
    assert (tmp_path / "a" / "calls.parquet").read_bytes() == (
        tmp_path / "b" / "calls.parquet"
    ).read_bytes()
    sa, sb = (json.loads((tmp_path / x / "summary.json").read_text()) for x in "ab")
    assert_close(sb, sa)
    if "--max-block-refs" in extra:
        assert sa["kv_tiers"]["block_size_note"].startswith("re-blocked from 64 to ")


def test_cli_falls_back_for_hashed_traces_and_says_the_same_errors(
    tmp_path, sample_trace, monkeypatch
):
    from agentx.io import write_parquet_atomic

    monkeypatch.setattr("agentx.traces.partitions.OUT_OF_CORE_ROWS", 10)
    with pytest.raises(NotStreamable):  # hashed: the block stream needs the whole trace
        replay_file(sample_trace, CFG)
    a = _cli(sample_trace, tmp_path / "a")
    assert a.exit_code == 0, a.output
    # without KV tiers a hashed trace streams too, with the in-memory result
    b = _cli(sample_trace, tmp_path / "b", "--no-kv-tiers")
    monkeypatch.setattr("agentx.traces.partitions.OUT_OF_CORE_ROWS", 10**9)
    c = _cli(sample_trace, tmp_path / "c", "--no-kv-tiers")
    assert b.exit_code == c.exit_code == 0 and b.output == c.output
    assert (tmp_path / "b" / "calls.parquet").read_bytes() == (
        tmp_path / "c" / "calls.parquet"
    ).read_bytes()
    assert_close(*(json.loads((tmp_path / x / "summary.json").read_text()) for x in "bc"))
    # a broken late row: the in-memory path's message
    tr = read_trace(sample_trace)
    df = tr.calls.with_columns(
        pl.when(pl.int_range(pl.len()) == 400)
        .then(-1)
        .otherwise(pl.col("output_tokens"))
        .alias("output_tokens")
    )
    bad = tmp_path / "bad.parquet"
    write_parquet_atomic(df, bad, tr.meta)
    want = _cli(bad, tmp_path / "d").output
    monkeypatch.setattr("agentx.traces.partitions.OUT_OF_CORE_ROWS", 10)
    got = _cli(bad, tmp_path / "e").output
    assert got == want and "expected a non-negative token count" in got
    assert not (tmp_path / "e").exists()


def test_weka_without_kv_tiers_streams_as_in_memory(tmp_path, weka_parquet):
    want = in_memory(weka_parquet, False, None, 5000, tmp_path / "a.parquet")
    got = replay_file(
        weka_parquet,
        CFG,
        kv_tiers=False,
        calls_path=tmp_path / "b.parquet",
        rows=5000,
        bucket_rows=3000,
    )
    assert_close(got.summary, want.summary)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    with pytest.raises(NotStreamable):  # hashed: with KV tiers the block stream reads it whole
        replay_file(weka_parquet, CFG)


@pytest.mark.parametrize("option", ["--chunk-rows", "--max-block-refs"])
def test_cli_bad_option_out_of_core_says_the_same(tmp_path, traces, monkeypatch, option):
    want = _cli(traces[300], tmp_path / "a", option, "0")
    monkeypatch.setattr("agentx.traces.partitions.OUT_OF_CORE_ROWS", 10)
    got = _cli(traces[300], tmp_path / "b", option, "0")
    assert got.exit_code == want.exit_code == 2
    # (in memory the over-context warning of the read comes first; out of core nothing is read)
    assert got.output.splitlines()[-1] == want.output.splitlines()[-1]
    assert got.output.splitlines()[-1] == f"Error: {option} must be positive, got 0"
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
