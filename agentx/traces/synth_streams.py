"""The agent streams of one synth chunk: sessions, sub-agents and their timing.

A chunk's agents are laid out as *streams* (session-major: the main agent, then its
sub-agents). This module owns how many calls each stream makes, where a sub-agent spawns, the
shared prefix, context limit and first input of each stream, and every call's arrival and
think time (segmented cumulative sums; a parent waits for the sub-agents it spawned). The
per-call token draws and the frame are ``agentx.traces.synth_chunk``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentx.traces.synth_params import (
    SynthParams,
    lognormal,
    lognormal_below,
    lognormal_by,
    whole_tokens,
)


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
