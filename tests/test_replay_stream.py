"""The replay seam (``replay_partition`` + ``merge_partials``) and the streaming driver.

Any session-aligned partitioning, and any chunk size of the streaming CLI, gives the results of
the one-partition replay: integer columns exactly, floats within 1e-9 relative (only the order
of float additions changes), and the same options give the same bytes run to run.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.kv import replay_tiers
from agentx.replay import make_config, replay_trace
from agentx.replay.chunks import replay_chunks, session_cuts
from agentx.replay.replay import (
    CALL_COLUMNS,
    SLIM_COLUMNS,
    merge_partials,
    priced_columns,
    replay_partition,
)
from agentx.traces.io import read_trace, write_trace
from agentx.traces.synth import synthesize

CFG = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
TRACE = synthesize(40, seed=3)
KV = replay_tiers(TRACE, CFG)
WHOLE = replay_trace(TRACE, CFG, kv=KV)


def assert_frames_close(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns and a.height == b.height
    for c in a.columns:
        x, y = a[c], b[c]
        if x.dtype.is_float():
            np.testing.assert_allclose(x.to_numpy(), y.to_numpy(), rtol=1e-9, atol=0)
        else:
            assert x.equals(y), c


def assert_close(a, b, path="summary") -> None:
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and not isinstance(b, str):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300), (path, a, b)
    else:
        assert a == b, (path, a, b)


def assert_results_close(got, want) -> None:
    assert_frames_close(got.calls, want.calls)
    assert_frames_close(got.stages, want.stages)
    assert_frames_close(got.footprint, want.footprint)
    assert_close(got.summary, want.summary)


def session_starts(df: pl.DataFrame) -> list[int]:
    sid = df["session_id"]
    return [0, *np.flatnonzero((sid[1:] != sid[:-1]).to_numpy()) + 1]


@settings(max_examples=25)
@given(st.data(), st.booleans())
def test_any_session_partition_merges_to_the_whole(data, with_kv):
    starts = session_starts(TRACE.calls)
    cuts = sorted(data.draw(st.sets(st.sampled_from(starts[1:]), max_size=8)))
    bounds = [0, *cuts, TRACE.calls.height]
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        kv = KV.per_call.slice(a, b - a) if with_kv else None
        parts.append(replay_partition(TRACE.calls.slice(a, b - a), CFG, kv))
    want = WHOLE if with_kv else replay_trace(TRACE, CFG)
    assert_results_close(merge_partials(parts, CFG, KV.summary if with_kv else None), want)
    slim = merge_partials([p.slim() for p in parts], CFG, KV.summary if with_kv else None)
    assert slim.calls.columns == list(SLIM_COLUMNS)
    assert_close(slim.summary, want.summary)


@settings(max_examples=25)
@given(st.integers(1, 2 * TRACE.calls.height))
def test_any_chunk_size_gives_the_whole(rows):
    cuts = session_cuts(TRACE.calls, rows)
    assert sum(n for _, n in cuts) == TRACE.calls.height
    assert all(a in session_starts(TRACE.calls) for a, _ in cuts)  # only between sessions
    got = merge_partials(replay_chunks(TRACE.calls, CFG, KV.per_call, rows), CFG, KV.summary)
    assert_results_close(got, WHOLE)


@settings(max_examples=25)
@given(st.sets(st.sampled_from(CALL_COLUMNS)))
def test_a_partition_prices_only_the_columns_asked_and_the_same_sums(wanted):
    full = replay_partition(TRACE.calls, CFG, KV.per_call)
    some = replay_partition(TRACE.calls, CFG, KV.per_call, priced_columns(wanted))
    kept = [c for c in CALL_COLUMNS if c in wanted or c in ("ttft_s", "decode_latency_s")]
    assert [c for c in some.calls.columns if c in CALL_COLUMNS] == kept
    assert some.calls.equals(full.calls.select(some.calls.columns))
    assert some.sums.tobytes() == full.sums.tobytes()


def test_sessions_out_of_order_are_one_partition():
    df = TRACE.calls.sort("t_start_s")
    assert session_cuts(df, 10) == [(0, df.height)]


def test_a_partition_with_the_wrong_kv_rows_is_refused():
    with pytest.raises(Exception, match="expected 3 per-call rows"):
        replay_partition(TRACE.calls.head(3), CFG, KV.per_call.head(4))


def _run(args) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output


def _replay_dir(trace_path, out, *extra) -> dict:
    _run(["replay", str(trace_path), "--hw", "gb200", "--gpus", "32", "-q", "-o", str(out), *extra])
    return json.loads((out / "summary.json").read_text())


def test_cli_streams_any_chunk_size_and_is_byte_identical(tmp_path):
    p = tmp_path / "t.parquet"
    write_trace(TRACE, p)
    want = _replay_dir(p, tmp_path / "a", "--calls", "full")
    for rows in ("7", "100"):
        got = _replay_dir(p, tmp_path / f"c{rows}", "--chunk-rows", rows, "--calls", "full")
        assert_close(got, want)
        assert_frames_close(
            pl.read_parquet(tmp_path / f"c{rows}" / "calls.parquet"),
            pl.read_parquet(tmp_path / "a" / "calls.parquet"),
        )
    assert_frames_close(pl.read_parquet(tmp_path / "a" / "calls.parquet"), WHOLE.calls)
    _replay_dir(p, tmp_path / "c7b", "--chunk-rows", "7", "--calls", "full")
    for f in ("calls.parquet", "stages.parquet", "footprint.parquet", "summary.json", "run.json"):
        assert (tmp_path / "c7" / f).read_bytes() == (tmp_path / "c7b" / f).read_bytes(), f


def test_cli_calls_modes(tmp_path):
    p = tmp_path / "t.parquet"
    write_trace(TRACE, p)
    full = _replay_dir(p, tmp_path / "full", "--calls", "full")
    summ = _replay_dir(p, tmp_path / "summary")  # the default
    none = _replay_dir(p, tmp_path / "none", "--calls", "none")
    assert_close(summ, full) and assert_close(none, full)
    assert not (tmp_path / "none" / "calls.parquet").exists()
    run = json.loads((tmp_path / "none" / "run.json").read_text())
    assert run["tables"] == ["footprint", "stages"]
    run = json.loads((tmp_path / "summary" / "run.json").read_text())
    assert run["tables"] == ["calls", "footprint", "stages"]
    small = pl.read_parquet(tmp_path / "summary" / "calls.parquet")
    big = pl.read_parquet(tmp_path / "full" / "calls.parquet")
    assert set(small.columns) < set(big.columns)
    assert {"ttft_s", "decode_latency_s", "kv_recompute_tokens", "session_id"} <= set(small.columns)
    # the KV link bytes stay (the report's per-call KV traffic chart reads them); the reload
    # time and energy follow from them and the summary's link costs (agentx sql derives them)
    assert {"kv_dram_to_hbm_bytes", "kv_ssd_to_dram_bytes"} <= set(small.columns)
    assert not {"kv_transfer_time_s", "kv_transfer_energy_j"} & set(small.columns)
    # so are the decode experts' time and energy (output tokens x a per-token cost), the new
    # tokens (input - reused) and the HBM hits (reused - the other hits - recomputes)
    assert not {"decode_experts_time_s", "decode_experts_energy_j"} & set(small.columns)
    assert not {"new_tokens", "kv_hbm_hit_tokens"} & set(small.columns)
    assert not [c for c in small.columns if c.endswith(("_flops", "_comm_bytes"))]
    assert_frames_close(small, big.select(small.columns))


def test_cli_rejects_bad_chunk_rows(tmp_path):
    p = tmp_path / "t.parquet"
    write_trace(TRACE, p)
    res = CliRunner().invoke(cli, ["replay", str(p), "--hw", "gb200", "--chunk-rows", "0"])
    assert res.exit_code == 2
    assert "Error: --chunk-rows must be positive, got 0" in res.output
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize("rows", [37, 1000])
def test_sample_streamed_equals_whole(sample_trace, rows):
    tr = read_trace(sample_trace)
    kv = replay_tiers(tr, CFG)
    got = merge_partials(replay_chunks(tr.calls, CFG, kv.per_call, rows), CFG, kv.summary)
    assert_results_close(got, replay_trace(tr, CFG, kv=kv))


def test_weka_streamed_equals_whole(weka_parquet):
    tr = read_trace(weka_parquet)
    kv = replay_tiers(tr, CFG)
    want = replay_trace(tr, CFG, kv=kv)
    got = merge_partials(replay_chunks(tr.calls, CFG, kv.per_call, 5000), CFG, kv.summary)
    assert len(session_cuts(tr.calls, 5000)) > 1
    assert_results_close(got, want)


def _full_and_summary(runs, columns: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``columns`` of agentx sql's replay_calls for the runs "full" and "summary" under
    ``runs``, each in session and call order."""
    from agentx.analysis import open_db

    with open_db([], [runs]) as db:
        got = db.query(
            f"SELECT run, {columns} FROM replay_calls ORDER BY run, session_id, call_index"
        )
    return tuple(got.filter(pl.col("run") == r).drop("run") for r in ("full", "summary"))


def test_sql_derives_the_sums_a_summary_run_leaves_out(tmp_path):
    from agentx.analysis import open_db
    from agentx.analysis.derived import DERIVED

    p = tmp_path / "t.parquet"
    write_trace(TRACE, p)
    _replay_dir(p, tmp_path / "runs" / "full", "--calls", "full")
    _replay_dir(p, tmp_path / "runs" / "summary")
    with open_db([], [tmp_path / "runs"]) as db:
        cols = db.query("SELECT * FROM replay_calls LIMIT 0").columns
    assert set(DERIVED["replay_calls"]) <= set(cols)
    full, summ = _full_and_summary(
        tmp_path / "runs",
        "call_index, session_id, fill_time_s, decode_time_s, total_time_s, total_energy_j, "
        "kv_hit_tokens, kv_hit_ratio, kv_dram_to_ssd_bytes, kv_transfer_time_s, "
        "kv_transfer_energy_j",
    )
    assert_frames_close(full, summ)
    # the summary file leaves total energy, the DRAM->SSD bytes and the reload time and
    # energy out: the view's values are the stored ones, bit for bit
    stored = pl.read_parquet_schema(tmp_path / "runs/summary/calls.parquet")
    for c in ("total_energy_j", "kv_dram_to_ssd_bytes", "kv_transfer_time_s", "kv_transfer_energy_j", "decode_time_s"):  # fmt: skip
        assert c not in stored
        assert summ[c].to_list() == full[c].to_list()
    w = WHOLE.calls
    np.testing.assert_allclose(
        full["total_time_s"].to_numpy(),
        sum(
            w[f"{s}_time_s"] for s in ("prefill", "midfill", "decode_attention", "decode_experts")
        ).to_numpy(),
        rtol=1e-12,
    )
    hits = w["kv_hbm_hit_tokens"] + w["kv_dram_hit_tokens"] + w["kv_ssd_hit_tokens"]
    assert full["kv_hit_tokens"].to_list() == hits.to_list()


def test_sql_derives_reload_and_decode_expert_columns_bit_for_bit(tmp_path):
    """A summary file leaves out each call's KV reload time and energy and its decode-experts
    time and energy; agentx sql makes them from the link bytes, the output tokens and
    summary.json's constants, equal to what --calls full stores (twenty times the load, so
    that blocks spill to DRAM and come back)."""
    p = tmp_path / "t.parquet"
    write_trace(TRACE, p)
    for mode in ("full", "summary"):
        _replay_dir(p, tmp_path / "runs" / mode, "--calls", mode, "--load-scale", "20")
    stored = pl.read_parquet_schema(tmp_path / "runs/summary/calls.parquet")
    assert "kv_transfer_time_s" not in stored and "kv_dram_to_hbm_bytes" in stored
    assert "decode_experts_energy_j" not in stored
    full, summ = _full_and_summary(
        tmp_path / "runs",
        "kv_transfer_time_s, kv_transfer_energy_j, decode_experts_time_s, "
        "decode_experts_energy_j, total_energy_j, new_tokens, kv_hbm_hit_tokens, kv_hit_tokens",
    )
    assert (full["kv_transfer_time_s"] > 0).sum() > 10
    assert full["decode_experts_energy_j"].n_unique() > 10
    assert summ.to_dict(as_series=False) == full.to_dict(as_series=False)


@settings(max_examples=15)
@given(st.integers(1, 400))
def test_reading_in_session_batches_equals_read_trace(tmp_path_factory, batch_rows):
    from agentx.traces.io import read_trace_columns

    p = tmp_path_factory.mktemp("lean") / "t.parquet"
    write_trace(TRACE, p)
    cols = ["session_id", "call_index", "input_tokens", "block_hashes"]
    got = read_trace_columns(p, cols, batch_rows=batch_rows)
    want = read_trace(p)
    assert got.calls.equals(want.calls.select(cols)) and got.meta == want.meta


@pytest.mark.parametrize("bad", ["split_session", "late_bad_row"])
def test_batched_read_reports_errors_as_read_trace(tmp_path, bad):
    from agentx.errors import InputError
    from agentx.io import write_parquet_atomic
    from agentx.traces.io import read_trace_columns

    df = TRACE.calls
    if bad == "split_session":  # the first session's last call moved to the end of the file
        first = df.filter(pl.col("session_id") == df["session_id"][0])
        rest = df.slice(first.height)
        df = pl.concat([first.head(first.height - 1), rest, first.tail(1)])
    else:
        df = df.with_columns(
            output_tokens=pl.when(pl.int_range(pl.len()) == df.height - 3)
            .then(-1)
            .otherwise(pl.col("output_tokens"))
        )
    p = tmp_path / "bad.parquet"
    write_parquet_atomic(df, p, TRACE.meta)
    with pytest.raises(InputError) as want:
        read_trace(p)
    with pytest.raises(InputError) as got:
        read_trace_columns(p, ["session_id"], batch_rows=50)
    assert str(got.value) == str(want.value)


def test_the_chunk_rows_default_is_the_librarys():
    # the option's default is a literal (the CLI does not import the replay for --help)
    from agentx.cli.cmd_replay import command
    from agentx.replay.chunks import CHUNK_ROWS

    option = next(p for p in command.params if p.name == "chunk_rows")
    assert option.default == CHUNK_ROWS


def test_priced_memory_is_taken_again_only_when_nothing_refers_to_it():
    """A partition's priced columns are written into recycled memory (PricedMemory): never
    into memory a partition's rows (a view, a polars frame over it) still refer to."""
    from agentx.replay.chunks import PricedMemory

    m = PricedMemory(12)
    a = m.take((2, 6))
    a[:] = 1.0
    b = m.take((2, 5))  # ``a`` is alive: other memory
    assert not np.shares_memory(a, b) and (a == 1.0).all()
    del a
    c = m.take((3, 4))  # the first array again: nothing refers to it
    assert np.shares_memory(c, m._ring[0]) and c.shape == (3, 4) and c.flags.c_contiguous
    frame = pl.DataFrame({"x": c[0]})  # zero-copy: the frame refers to the memory
    del b, c
    d = m.take((2, 6))  # the second array; the first is the frame's
    assert np.shares_memory(d, m._ring[1]) and not np.shares_memory(d, frame["x"].to_numpy())
    e = m.take((1, 40))  # larger than any: a new array, the third kept
    assert e.shape == (1, 40) and np.shares_memory(e, m._ring[2])
    f = m.take((2, 6))  # all three referred to: a new array, not kept (at most RING)
    assert not any(np.shares_memory(f, r) for r in m._ring) and len(m._ring) == m.RING == 3


def test_partitions_held_at_once_keep_their_own_rows():
    """Every partition's rows alive together (as a merge of full partials holds them): the
    recycled memory must not be reused under them, so they equal the whole's rows."""
    held = list(replay_chunks(TRACE.calls, CFG, KV.per_call, 50))
    assert len(held) > 3
    whole = replay_trace(TRACE, CFG, KV)
    assert pl.concat([p.calls for p in held]).equals(whole.calls)
