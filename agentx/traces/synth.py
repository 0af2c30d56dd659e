"""A seeded, vectorized generator of agentic sessions in the canonical trace format.

Each session is a main agent that appends tool results and user turns to one growing context
(SEED-6), plus, in a few sessions, sub-agents with their own shared prefix that run while the
parent waits. When the context would pass its limit the agent compacts: the prompt restarts
from the shared tool+system prefix plus a summary (SEED-6, default limit 1,000,000 tokens).

Every per-call quantity is drawn as one numpy array. Agents are laid out as *streams*
(session-major: the main agent, then its sub-agents), times come from segmented cumulative
sums, and the one truly sequential step (context growth with compaction resets, whose reset
point depends on the path) is a tiny numba kernel. Knobs and defaults: ``synth_params``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numba
import numpy as np
import polars as pl

from agentx.errors import UnknownNameError, UsageError
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata
from agentx.traces.synth_params import (
    PREFIX_BREAK_MAX_KEEP,
    SynthParams,
    lognormal,
    lognormal_below,
    lognormal_by,
    whole_tokens,
)

__all__ = ["PREFIX_BREAK_MAX_KEEP", "SynthParams", "synth_chunks", "synthesize"]

TRIGGERS = ("user", "tool_result", "subagent", "compaction")


@dataclass(frozen=True)
class _Streams:
    """One entry per agent stream, session-major; ``rank`` 0 is the main agent."""

    session: np.ndarray
    rank: np.ndarray
    length: np.ndarray
    spawn: np.ndarray  # parent call index a sub-agent starts after; -1 for main agents
    start: np.ndarray  # first row of the stream
    base: np.ndarray  # shared prefix tokens
    limit: np.ndarray  # context limit tokens
    first_input: np.ndarray
    main_len: np.ndarray  # per session
    has_sub: np.ndarray  # per session

    @property
    def is_sub(self) -> np.ndarray:
        return self.rank > 0


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


def _session_lengths(
    rng: np.random.Generator, p: SynthParams, n_sessions: int | None, n_calls: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Main-agent calls and the resumed flag per session, for n_sessions or ≥ n_calls calls."""

    def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
        resumed = rng.random(k) < p.resumed_session_share
        fresh = lognormal(rng, p.fresh_calls_per_session_p50, p.fresh_calls_per_session_p90, k)
        again = lognormal(rng, p.resumed_calls_per_session_p50, p.resumed_calls_per_session_p90, k)
        return whole_tokens(np.where(resumed, again, fresh)), resumed

    if n_sessions is not None:
        return draw(n_sessions)
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    total = 0
    while total < n_calls:  # few passes: each chunk is sized from the calls still missing
        k = 16 if not chunks else int(1.3 * (n_calls - total) * len(chunks[0][0]) / total) + 16
        chunks.append(draw(min(k, n_calls)))
        total += int(chunks[-1][0].sum())
    lengths, resumed = (np.concatenate(c) for c in zip(*chunks, strict=True))
    n = int(np.searchsorted(np.cumsum(lengths), n_calls)) + 1
    return lengths[:n], resumed[:n]


def _streams(r: dict, p: SynthParams, n_sessions: int | None, n_calls: int | None) -> _Streams:
    main_len, resumed = _session_lengths(r["len"], p, n_sessions, n_calls)
    n = main_len.size
    # Sub-agents: which sessions, how many, after which parent call, how many calls.
    has_sub = r["sub"].random(n) < p.subagent_session_share
    n_sub = np.where(has_sub, 1 + r["sub"].poisson(max(p.subagents_per_session_mean - 1, 0), n), 0)
    sub_session = np.repeat(np.arange(n), n_sub)
    spawn = np.floor(r["sub"].random(sub_session.size) * np.maximum(main_len[sub_session] - 1, 1))
    sub_len = whole_tokens(
        lognormal(r["sub"], p.subagent_calls_p50, p.subagent_calls_p90, sub_session.size)
    )
    sub_rank = np.arange(sub_session.size) - np.repeat(np.cumsum(n_sub) - n_sub, n_sub) + 1
    session = np.concatenate([np.arange(n), sub_session])
    rank = np.concatenate([np.zeros(n, np.int64), sub_rank])
    order = np.lexsort((rank, session))
    session, rank = session[order], rank[order]
    length = np.concatenate([main_len, sub_len])[order]
    is_sub = rank > 0
    base = np.where(is_sub, p.subagent_shared_prefix_tokens, p.shared_prefix_tokens).astype(
        np.int64
    )
    # Resumed sessions already hold more than a short window allows, so only fresh ones may
    # run on the early (short-window) limit.
    early = ~resumed & (r["sub"].random(n) < p.early_limit_share)
    short = min(p.early_limit_tokens, p.context_limit_tokens)
    limit = np.where(early, short, p.context_limit_tokens)[session].astype(np.int64)
    f = r["first"]
    first_in = np.select(
        [is_sub, resumed[session]],
        [
            lognormal_below(
                f, p.subagent_first_input_tokens_p50, p.subagent_first_input_tokens_p90, limit
            ),
            lognormal_below(
                f, p.resumed_first_input_tokens_p50, p.resumed_first_input_tokens_p90, limit
            ),
        ],
        base
        + lognormal_below(
            f,
            p.fresh_first_extra_tokens_p50,
            p.fresh_first_extra_tokens_p90,
            (limit - base).astype(np.float64),
        ),
    )
    return _Streams(
        session=session,
        rank=rank,
        length=length,
        spawn=np.concatenate([np.full(n, -1), spawn.astype(np.int64)])[order],
        start=np.cumsum(length) - length,
        base=base,
        limit=limit,
        first_input=np.minimum(np.maximum(whole_tokens(first_in), base + 1), limit),
        main_len=main_len,
        has_sub=has_sub,
    )


def _segmented_cumsum(inc: np.ndarray, s: _Streams) -> np.ndarray:
    """Cumulative sum restarting at every stream start (``inc`` is 0 on those rows)."""
    cs = np.cumsum(inc)
    return cs - np.repeat(cs[s.start], s.length)


def _times(
    r: dict, p: SynthParams, s: _Streams, first: np.ndarray, user: np.ndarray, t_after: float | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Arrival and think time per row: t_k = t_k-1 + api_k-1 + think_k inside a stream, and a
    parent's next call waits until its sub-agents spawned before it have finished. The first
    session starts at 0, or one exponential gap after ``t_after`` (the previous chunk's last
    session start); also returns this chunk's last session start."""
    think = lognormal_by(
        r["time"],
        user,
        (p.user_think_time_s_p50, p.user_think_time_s_p90),
        (p.tool_think_time_s_p50, p.tool_think_time_s_p90),
    )
    think[first] = 0.0
    api = lognormal(r["time"], p.api_time_s_p50, p.api_time_s_p90, first.size)
    prev_api = np.concatenate([[0.0], api[:-1]])
    rel = _segmented_cumsum(np.where(first, 0.0, prev_api + think), s)
    main_start = s.start[~s.is_sub]  # per session
    sub = np.flatnonzero(s.is_sub)
    parent_row = main_start[s.session[sub]] + s.spawn[sub]
    if sub.size:
        last = s.start[sub] + s.length[sub] - 1
        waits = s.spawn[sub] + 1 < s.main_len[s.session[sub]]
        np.maximum.at(think, parent_row[waits] + 1, rel[last][waits] + api[last][waits])
        rel = _segmented_cumsum(np.where(first, 0.0, prev_api + think), s)
    session_t0 = np.cumsum(r["time"].exponential(1.0 / p.session_rate_per_s, s.main_len.size))
    t0 = session_t0 - session_t0[0] if t_after is None else t_after + session_t0
    offset = t0[s.session]
    offset[sub] += rel[parent_row] + api[parent_row]
    return np.repeat(offset, s.length) + rel, think, float(t0[-1])


# Chunks of the streamed generator: part of its definition (like the seed), not a tuning knob.
# A trace of at most CHUNK_CALLS calls (or CHUNK_SESSIONS sessions) is one chunk, drawn exactly
# as the in-memory generator always drew it; a bigger one is a run of chunks of whole sessions,
# chunk k drawing from its own SeedSequence child, so memory follows the chunk, not the trace.
CHUNK_CALLS = 1 << 21
CHUNK_SESSIONS = 1 << 15


def synthesize(
    n_sessions: int | None = None,
    *,
    n_calls: int | None = None,
    seed: int = 0,
    params: SynthParams | None = None,
    **overrides: object,
) -> Trace:
    """Generate a canonical trace of ``n_sessions`` sessions, or exactly ``n_calls`` calls.

    ``overrides`` replace single fields of ``params`` (default ``SynthParams()``), e.g.
    ``synthesize(100, seed=1, context_limit_tokens=200_000)``. Same arguments, same frame;
    the concatenation of :func:`synth_chunks` (held in memory: large traces go through
    :func:`agentx.traces.io.write_trace_chunks` instead).
    """
    chunks, meta = synth_chunks(n_sessions, n_calls=n_calls, seed=seed, params=params, **overrides)
    return Trace(S.conform(pl.concat(list(chunks), rechunk=True)), meta)


def synth_chunks(
    n_sessions: int | None = None,
    *,
    n_calls: int | None = None,
    seed: int = 0,
    params: SynthParams | None = None,
    **overrides: object,
) -> tuple[Iterator[pl.DataFrame], dict[str, str]]:
    """The trace of :func:`synthesize` as a lazy run of frames of whole sessions (the last
    session of a ``n_calls`` trace is cut short), and its metadata."""
    known = {f.name for f in dataclasses.fields(SynthParams)}
    for name in overrides:
        if name not in known:
            raise UnknownNameError("synth parameter", name, known)
    p = dataclasses.replace(params or SynthParams(), **overrides)
    if (n_sessions is None) == (n_calls is None):
        raise UsageError("give either n_sessions or n_calls")
    for name, v in (("n_sessions", n_sessions), ("n_calls", n_calls)):
        if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
            raise UsageError(f"{name} must be a positive integer, got {v!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"seed must be a non-negative integer, got {seed!r}")
    run = {"seed": int(seed), "n_sessions": n_sessions, "n_calls": n_calls}
    meta = trace_metadata(
        "synth", block_size_tokens=None, hash_scope="none", options={**run, **p.as_dict()}
    )
    return _chunks(p, n_sessions, n_calls, int(seed)), meta


def _chunks(
    p: SynthParams, n_sessions: int | None, n_calls: int | None, seed: int
) -> Iterator[pl.DataFrame]:
    total = n_sessions if n_calls is None else n_calls
    cap = CHUNK_SESSIONS if n_calls is None else CHUNK_CALLS
    # session ids keep one width across chunks: the in-memory one for a single chunk, else
    # wide enough for the most sessions the trace can hold
    width = None if total <= cap else max(6, len(str(total - 1)))
    done, first_session, t_after, k = 0, 0, None, 0
    while done < total:
        size = min(total - done, cap)
        # One random stream per concern: a change in one knob leaves the other draws alone.
        # Chunk 0 draws from the seed's first five children (as it always did), chunk k from
        # the children of its (4 + k)-th.
        root = np.random.SeedSequence(seed, spawn_key=() if k == 0 else (4 + k,))
        keys = ("len", "sub", "row", "time", "first")
        r = {q: np.random.default_rng(c) for q, c in zip(keys, root.spawn(5), strict=True)}
        df, n_sess, t_after = _chunk(
            r, p, None if n_sessions is None else size, None if n_calls is None else size,
            rows=None if n_calls is None else total - done, first_session=first_session,
            t_after=t_after, width=width,
        )  # fmt: skip
        done += n_sess if n_calls is None else df.height
        first_session += n_sess
        k += 1
        yield df


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
