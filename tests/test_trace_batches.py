"""The batched trace read (agentx.traces.batches) accepts exactly what ``read_trace`` accepts:
the same frame for a valid file, the same error text for a broken one, for any batch size
and row-group layout; session codes keep the order of the ids."""

from __future__ import annotations

import polars as pl
import pytest
from _mutations import CASES, TRACE, broken_file, set_at, write_groups
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.errors import InputError
from agentx.traces.batches import row_ranges
from agentx.traces.io import read_trace_columns

COLS = ["session_id", "call_index", "agent_id", "t_start_s", "input_tokens", "block_hashes"]


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(*CASES)
def test_batched_read_accepts_and_refuses_as_read_trace(tmp_path, kind, row, group, batch):
    p, want = broken_file(tmp_path, kind, row, group)
    if isinstance(want, InputError):
        with pytest.raises(InputError) as got:
            read_trace_columns(p, COLS, batch_rows=batch)
        assert str(got.value) == str(want)
    else:
        got = read_trace_columns(p, COLS, batch_rows=batch)
        assert got.calls.equals(want.calls.select(COLS)) and got.meta == want.meta


@given(st.lists(st.integers(1, 50), max_size=12), st.integers(1, 30))
def test_row_ranges_cover_every_row_once_on_group_edges(groups, batch):
    ranges = row_ranges(groups, batch)
    assert [a for a, _ in ranges] == [sum(n for _, n in ranges[:i]) for i in range(len(ranges))]
    assert sum(n for _, n in ranges) == sum(groups) and all(n > 0 for _, n in ranges)
    edges = {sum(groups[:i]) for i in range(len(groups) + 1)}
    for a, n in ranges:  # a range ends on a row-group edge unless it splits a big group
        big = any(g > 4 * batch for g in groups)
        assert (a + n in edges) or big


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=30, unique=True))
def test_session_codes_keep_the_order_of_the_ids(tmp_path, ids):
    calls = pl.concat(
        [TRACE.calls.head(2).with_columns(session_id=pl.lit(s)) for s in ids], how="vertical"
    )
    p = tmp_path / "t.parquet"
    write_groups(calls, p, 7)
    tr = read_trace_columns(p, ["session_id", "call_index"], batch_rows=5, session_codes=True)
    codes, want = tr.calls["session_id"], calls["session_id"]
    assert codes.dtype == pl.UInt32
    assert tr.session_names.gather(codes).to_list() == want.to_list()
    assert codes.rank("dense").to_list() == want.rank("dense").to_list()
    assert codes.arg_sort().to_list() == want.arg_sort().to_list()


def test_unread_string_columns_are_checked_from_statistics(tmp_path):
    """A null trigger is refused without decoding trigger (its null count is in the file)."""
    p = tmp_path / "t.parquet"
    write_groups(TRACE.calls.with_columns(set_at("trigger", 3, pl.lit(None, pl.String))), p, 10)
    with pytest.raises(InputError, match="field 'trigger': expected a value, got null"):
        read_trace_columns(p, ["session_id"])


def test_a_path_with_glob_characters_is_read_as_one_file(tmp_path):
    from agentx.traces.batches import TraceBatches

    p = tmp_path / "runs[1]*" / "t?.parquet"
    p.parent.mkdir()
    write_groups(TRACE.calls, p, 10)
    frames = list(TraceBatches(p, ["session_id", "call_index"], batch_rows=16))
    assert pl.concat(frames).equals(TRACE.calls.select("session_id", "call_index"))
