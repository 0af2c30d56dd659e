"""Round trips: generated traces → Parquet (write_trace) → read_trace give the same frame,
the same metadata and, written twice, the same bytes. Also checks that ``agentx.testing``
strategies produce what they promise (valid frames, consistent block hashes)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.testing import trace_objects, traces
from agentx.traces import read_trace, write_trace
from agentx.traces.schema import COLUMN_NAMES, SCHEMA, validate
from agentx.traces.synth import synthesize

_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(trace=st.booleans().flatmap(lambda h: trace_objects(with_hashes=h, min_sessions=0)))
def test_write_read_gives_identical_frame_metadata_and_bytes(tmp_path, trace):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(trace, a)
    write_trace(trace, b)
    assert a.read_bytes() == b.read_bytes()
    back = read_trace(a)
    assert back.calls.columns == list(COLUMN_NAMES)
    assert back.calls.schema == trace.calls.schema
    assert back.calls.equals(trace.calls)
    assert back.meta == trace.meta


@settings(max_examples=60, deadline=None)
@given(df=traces(with_hashes=True, max_sessions=3))
def test_strategy_hashes_agree_with_reused_prefix(df):
    """reused_prefix_tokens = leading run of block ids seen earlier in the session × block size."""
    validate(df)
    seen: dict[str, set[int]] = {}
    for sid, inp, reused, bs, ids in df.select(
        "session_id", "input_tokens", "reused_prefix_tokens", "block_size_tokens", "block_hashes"
    ).iter_rows():
        known = seen.setdefault(sid, set())
        run = 0
        while run < len(ids) and ids[run] in known:
            run += 1
        assert reused == min(run * bs, inp)
        known.update(ids)


@settings(max_examples=30, deadline=None)
@given(df=traces(with_hashes=False, min_sessions=0, max_sessions=5))
def test_strategy_without_hashes_is_valid_and_hash_free(df):
    validate(df)
    assert df.schema == SCHEMA
    assert df["block_hashes"].is_null().all() and df["block_size_tokens"].is_null().all()


def test_synthetic_trace_round_trips(tmp_path):
    trace = synthesize(40, seed=9, subagent_session_share=0.5, context_limit_tokens=120_000)
    p = tmp_path / "s.parquet"
    write_trace(trace, p)
    back = read_trace(p)
    assert back.calls.equals(trace.calls) and back.meta == trace.meta
