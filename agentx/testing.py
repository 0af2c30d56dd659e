"""Hypothesis strategies for valid canonical traces, for agentx's tests and for users' own.

Like ``polars.testing.parametric``: ``traces()`` draws a small frame that passes
``agentx.traces.schema.validate``. Prompts are built the way agents build them: each call keeps
a leading run of full blocks of its agent's previous prompt and appends new content, so
``reused_prefix_tokens`` is exactly the leading run of block ids seen earlier in the session
(hash scope "session") and, with ``with_hashes=True``, the ids agree with it.

    from hypothesis import given
    from agentx.testing import traces

    @given(traces(max_sessions=3, with_hashes=True))
    def test_reuse_never_exceeds_input(df): ...
"""

from __future__ import annotations

import polars as pl

try:
    from hypothesis import strategies as st
except ImportError as exc:  # a test extra, like polars.testing.parametric
    raise ImportError("agentx.testing needs hypothesis: pip install 'agentx[test]'") from exc

from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata

__all__ = ["trace_objects", "traces"]

_TRIGGERS = ("user", "tool_result", "subagent", "compaction", "unknown")


@st.composite
def _session(draw: st.DrawFn, sid: str, bs: int, max_calls: int, max_tokens: int) -> list[dict]:
    n = draw(st.integers(1, max_calls))
    agents = draw(st.lists(st.sampled_from([None, "sub1", "sub2"]), min_size=n, max_size=n))
    next_id = draw(st.integers(0, 2**64 - 1 - 64 * (max_tokens // bs + 2) * max_calls))
    t = draw(st.floats(0, 1e6, allow_nan=False, allow_infinity=False))
    prev: dict[str | None, tuple[int, list[int]]] = {}  # agent → (input tokens, block ids)
    rows = []
    for k in range(n):
        agent = agents[k]
        p_in, p_ids = prev.get(agent, (0, []))
        keep = draw(st.integers(0, p_in // bs))  # only full blocks of the previous prompt
        extra = draw(st.integers(0 if keep else 1, max_tokens))
        fresh = -(-extra // bs)
        ids = p_ids[:keep] + list(range(next_id, next_id + fresh))
        next_id += fresh
        inp = keep * bs + extra
        prev[agent] = (inp, ids)
        t += draw(st.floats(0, 3600, allow_nan=False, allow_infinity=False))
        rows.append(
            {
                "session_id": sid,
                "call_index": k,
                "agent_id": agent,
                "t_start_s": t,
                "input_tokens": inp,
                "reused_prefix_tokens": keep * bs,
                "new_tokens": extra,
                "output_tokens": draw(st.integers(0, 4096)),
                "is_compaction": bool(p_in) and keep * bs < p_in // 2 and draw(st.booleans()),
                "shared_prefix_tokens": min(inp, draw(st.sampled_from([0, bs, 2 * bs]))),
                "block_size_tokens": bs,
                "block_hashes": ids,
                "trigger": draw(st.sampled_from(_TRIGGERS)),
                "think_time_s": draw(
                    st.none() | st.floats(0, 3600, allow_nan=False, allow_infinity=False)
                ),
                "model": draw(st.sampled_from([None, "model-a", "model-b"])),
                "source": "synth",
            }
        )
    return rows


@st.composite
def traces(
    draw: st.DrawFn,
    *,
    min_sessions: int = 1,
    max_sessions: int = 4,
    max_calls_per_session: int = 6,
    max_new_tokens: int = 1000,
    with_hashes: bool = False,
    block_size_tokens: int | None = None,
) -> pl.DataFrame:
    """A valid canonical frame (schema v1); block hashes only when ``with_hashes``.

    ``block_size_tokens`` fixes the block size (default: drawn from 1, 16, 64 and 512); the
    reuse structure is block-aligned either way.
    """
    bs = block_size_tokens or draw(st.sampled_from([1, 16, 64, 512]))
    n = draw(st.integers(min_sessions, max_sessions))
    rows: list[dict] = []
    for i in range(n):
        rows += draw(_session(f"s{i}", bs, max_calls_per_session, max_new_tokens))
    df = pl.DataFrame(rows, schema=S.SCHEMA) if rows else S.empty_trace()
    if not with_hashes:
        df = df.with_columns(
            block_size_tokens=pl.lit(None, pl.Int64), block_hashes=pl.lit(None, pl.List(pl.UInt64))
        )
    return df


@st.composite
def trace_objects(draw: st.DrawFn, *, with_hashes: bool = False, **kwargs: object) -> Trace:
    """A ``Trace``: a ``traces()`` frame with the file metadata that matches it."""
    df = draw(traces(with_hashes=with_hashes, **kwargs))
    bs = df["block_size_tokens"].drop_nulls().first() if with_hashes and df.height else None
    meta = trace_metadata(
        "synth",
        block_size_tokens=bs,
        hash_scope="session" if bs else "none",
        options={"strategy": "agentx.testing.traces"},
    )
    return Trace(df, meta)
