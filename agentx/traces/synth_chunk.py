"""One chunk of the synth generator as canonical trace rows.

This module owns the per-call draws of a chunk (user turns, appended, output and summary
tokens, prefix breaks), the one sequential step (context growth with compaction resets, a
small numba kernel), the interleaving of sub-agent calls by time and the frame's string
columns. The streams it draws over and their times are ``agentx.traces.synth_streams``'s;
the chunking and the seeds are ``agentx.traces.synth``'s.
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl

from agentx.traces import schema as S
from agentx.traces.synth_params import (
    PREFIX_BREAK_MAX_KEEP,
    SynthParams,
    lognormal,
    lognormal_by,
    whole_tokens,
)
from agentx.traces.synth_streams import _Streams, _streams, _times

TRIGGERS = ("user", "tool_result", "subagent", "compaction")


@numba.njit(cache=True, nogil=True)
def _grow_context(
    first, first_input, appended, summary, keep, base, limit, input_out, reused_out, comp_out
):  # pragma: no cover (compiled)
    # Sequential by nature: whether call k compacts depends on the context left by call k-1.
    # keep < 1 is a prefix break: the context grows as usual but only that share of it (and
    # at least the shared prefix) is still a cached prefix.
    c = 0
    for i in range(first.size):
        if first[i]:
            c = first_input[i]
            reused_out[i] = 0
        elif c + appended[i] > limit[i]:
            reused_out[i] = base[i]
            c = base[i] + summary[i]
            comp_out[i] = True
        else:
            reused_out[i] = c if keep[i] >= 1.0 else min(c, max(base[i], int(c * keep[i])))
            c += appended[i]
        input_out[i] = c


def _chunk(
    r: dict,
    p: SynthParams,
    n_sessions: int | None,
    n_calls: int | None,
    *,
    rows: int | None,
    first_session: int,
    t_after: float | None,
    width: int | None,
) -> tuple[pl.DataFrame, int, float]:
    """One chunk's calls, its session count and its last session start."""
    s = _streams(r, p, n_sessions, n_calls)

    # Rows, stream-major: per-call draws as whole arrays.
    N = int(s.length.sum())
    row_st = np.repeat(np.arange(s.length.size), s.length)
    first = np.zeros(N, np.bool_)
    first[s.start] = True
    row_sub = np.repeat(s.is_sub, s.length)
    user = ~first & ~row_sub & (r["row"].random(N) < p.user_turn_share)
    user_appended = (p.user_appended_tokens_p50, p.user_appended_tokens_p90)
    appended = whole_tokens(
        lognormal_by(
            r["row"], user, user_appended, (p.tool_appended_tokens_p50, p.tool_appended_tokens_p90)
        )
    )
    output = whole_tokens(lognormal(r["row"], p.output_tokens_p50, p.output_tokens_p90, N))
    base, limit = np.repeat(s.base, s.length), np.repeat(s.limit, s.length)
    # Summary and one append each fit in half the room above the prefix, so the call after a
    # compaction never has to compact again (binding only for small limits).
    half_room = np.maximum((limit - base) // 2, 1)
    summary = np.minimum(
        whole_tokens(lognormal(r["row"], p.summary_tokens_p50, p.summary_tokens_p90, N)), half_room
    )
    appended = np.minimum(appended, np.maximum(half_room - 1, 1))
    broken = r["row"].random(N) < p.prefix_break_share
    kept_share = np.ones(N)
    kept_share[broken] = PREFIX_BREAK_MAX_KEEP * r["row"].random(int(broken.sum()))
    input_tokens, reused = np.empty(N, np.int64), np.empty(N, np.int64)
    compaction = np.zeros(N, np.bool_)
    _grow_context(
        first,
        np.repeat(s.first_input, s.length),
        appended,
        summary,
        kept_share,
        base,
        limit,
        input_tokens,
        reused,
        compaction,
    )
    t, think, t_last = _times(r, p, s, first, user, t_after)

    # Interleave sub-agent calls by time; only sessions with sub-agents need reordering.
    row_session = np.repeat(s.session, s.length)
    mixed = np.flatnonzero(s.has_sub[row_session])
    order = mixed[np.lexsort((row_st[mixed], t[mixed], row_session[mixed]))]
    # whole sessions, but never past the calls left: cutting the last session keeps a valid prefix
    rows = N if rows is None else min(N, rows)

    def final(x: np.ndarray) -> np.ndarray:
        """``x`` in output order: rows of sessions with sub-agents sorted by time, then cut."""
        y = x.copy()
        y[mixed] = x[order]
        return y[:rows]

    trigger = final(np.select([compaction, first & row_sub, first | user], [3, 2, 0], 1))
    per_session = np.bincount(row_session, minlength=s.main_len.size)
    rs = row_session[:rows]  # sorting within sessions leaves every row's session in place
    input_tokens, reused = final(input_tokens), final(reused)
    cols = {
        "call_index": np.arange(rows) - (np.cumsum(per_session) - per_session)[rs],
        "t_start_s": final(t),
        "input_tokens": input_tokens,
        "reused_prefix_tokens": reused,
        "new_tokens": input_tokens - reused,
        "output_tokens": final(output),
        "is_compaction": final(compaction),
        "shared_prefix_tokens": final(base),
        "trigger": pl.Series(TRIGGERS).gather(trigger),
        "think_time_s": final(think),
    }
    rank = final(np.repeat(s.rank, s.length))
    return _frame(s, p, rs, rank, cols, first_session, width), s.main_len.size, t_last


def _frame(
    s: _Streams,
    p: SynthParams,
    rs: np.ndarray,
    rank: np.ndarray,
    cols: dict,
    first_session: int,
    width: int | None,
) -> pl.DataFrame:
    # Strings are gathered from small tables: building 10M strings by expression is slower.
    n, rows = s.main_len.size, rs.size
    width = width or max(6, len(str(n - 1)))
    ids = np.arange(first_session, first_session + n).astype(str)
    names = pl.Series(np.char.add("s", np.char.zfill(ids, width)))
    agents = pl.Series([None, *(f"sub{k}" for k in range(1, int(rank.max()) + 1))], dtype=pl.String)
    const = np.zeros(rows, np.int64)
    calls = pl.DataFrame(
        {
            "session_id": names.gather(rs),
            "agent_id": agents.gather(rank),
            **cols,
            "block_size_tokens": pl.Series([None], dtype=pl.Int64).gather(const),
            "block_hashes": pl.Series([None], dtype=pl.List(pl.UInt64)).gather(const),
            "model": pl.Series([p.model], dtype=pl.String).gather(const),
            "source": pl.Series(["synth"]).gather(const),
        }
    )
    return S.conform(calls)
