"""The canonical schema: validation names file, row, session/call and field."""

from __future__ import annotations

import polars as pl
import pytest

from agentx.errors import InputError
from agentx.traces import Trace, read_trace, trace_metadata, write_trace
from agentx.traces.schema import COLUMN_NAMES, SCHEMA, validate


def _frame(**over) -> pl.DataFrame:
    base = {
        "session_id": ["a", "a", "b"],
        "call_index": [0, 1, 0],
        "agent_id": [None, None, None],
        "t_start_s": [0.0, 5.0, 1.0],
        "input_tokens": [100, 180, 50],
        "reused_prefix_tokens": [0, 100, 0],
        "new_tokens": [100, 80, 50],
        "output_tokens": [10, 20, 5],
        "is_compaction": [False, False, False],
        "shared_prefix_tokens": [0, 0, 0],
        "block_size_tokens": [64, 64, 64],
        "block_hashes": [[1, 2], [1, 2, 3], [9]],
        "trigger": ["user", "tool_result", "user"],
        "think_time_s": [0.0, 4.0, None],
        "model": ["m", "m", "m"],
        "source": ["test"] * 3,
    }
    base.update(over)
    return pl.DataFrame(base, schema=SCHEMA)


def test_valid_frame_passes_and_roundtrips(tmp_path):
    df = _frame()
    validate(df)
    p = tmp_path / "t.parquet"
    write_trace(Trace(df, trace_metadata("test", block_size_tokens=64, hash_scope="session")), p)
    back = read_trace(p)
    assert back.calls.equals(df)
    assert back.meta["agentx.source"] == "test"
    assert list(back.calls.columns) == list(COLUMN_NAMES)


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        (
            {"output_tokens": [10, -1, 5]},
            "t.parquet: row 1: session 'a' call 1: field 'output_tokens': expected a non-negative token count, got -1",
        ),
        (
            {"reused_prefix_tokens": [0, 200, 0], "new_tokens": [100, -20, 50]},
            "t.parquet: row 1: session 'a' call 1: field 'new_tokens': expected a non-negative token count, got -20",
        ),
        (
            {"new_tokens": [100, 81, 50]},
            "t.parquet: row 1: session 'a' call 1: field 'new_tokens': expected new_tokens = input_tokens − reused_prefix_tokens, got 81",
        ),
        (
            {"call_index": [0, 2, 0]},
            "t.parquet: row 1: session 'a' call 2: field 'call_index': expected call_index 0, 1, 2, … contiguous within the session, rows grouped by session in call order, got 2",
        ),
        (
            {"t_start_s": [5.0, 1.0, 1.0]},
            "t.parquet: row 1: session 'a' call 1: field 't_start_s': expected times sorted within the session, got 1.0",
        ),
        (
            {"block_hashes": [[1, 2], [1, 2], [9]]},
            "t.parquet: row 1: session 'a' call 1: field 'block_hashes': expected ceil(input_tokens / block_size_tokens) hashes, got 2 hashes for 180 tokens of block size 64",
        ),
    ],
)
def test_broken_invariants_name_row_and_field(over, expected):
    with pytest.raises(InputError) as err:
        validate(_frame(**over), "t.parquet")
    assert str(err.value) == expected


def test_non_contiguous_sessions_rejected():
    df = _frame(session_id=["a", "b", "a"], call_index=[0, 0, 1], t_start_s=[0.0, 1.0, 5.0])
    with pytest.raises(InputError, match="contiguous"):
        validate(df, "t.parquet")
