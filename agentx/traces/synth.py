"""A seeded, vectorized generator of agentic sessions in the canonical trace format.

Each session is a main agent that appends tool results and user turns to one growing context
(SEED-6), plus, in a few sessions, sub-agents with their own shared prefix that run while the
parent waits. When the context would pass its limit the agent compacts: the prompt restarts
from the shared tool+system prefix plus a summary (SEED-6, default limit 1,000,000 tokens).

Every per-call quantity is drawn as one numpy array; streams (one per agent) are laid out
session-major, times come from segmented cumulative sums, and the one truly sequential step
(context growth with compaction resets, whose reset value depends on the path) is a tiny numba
kernel. Defaults are the Weka Claude Code statistics (``shared/traces/SOURCES.md`` §2, "W§2");
figures marked "W603" were computed from the same 603 shared session files (see the field
comments); distributions are log-normal through the stated p50 and p90.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numba
import numpy as np
import polars as pl

from agentx.errors import UnknownNameError, UsageError
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata

TRIGGERS = ("user", "tool_result", "subagent", "compaction")
Z90 = 1.2815515655446004
PREFIX_BREAK_MAX_KEEP = 0.9  # W§2 counts a break when < 90 % of the previous blocks are reused  # standard normal 90th percentile: p90 = p50 · exp(Z90 · sigma)


@dataclass(frozen=True)
class SynthParams:
    """Every knob of the generator; log-normal quantities are given by their p50 and p90."""

    # Main-agent calls per session (W§2 47 / 156 for all): W603 fresh 67 / 173, resumed 27.5 / 121.
    fresh_calls_per_session_p50: float = 67
    fresh_calls_per_session_p90: float = 173
    resumed_calls_per_session_p50: float = 27.5
    resumed_calls_per_session_p90: float = 121
    # First prompts are bimodal (W§2 p50 24,775 / p90 261,387): fresh sessions start near the
    # shared prefix, resumed ones carry a long earlier context. W603: 280 of 603 start at
    # ≥ 2 × prefix; fresh first prompt minus prefix 3,680 / 6,678; resumed 109,698 / 410,064.
    resumed_session_share: float = 0.464
    fresh_first_extra_tokens_p50: float = 3_680
    fresh_first_extra_tokens_p90: float = 6_678
    resumed_first_input_tokens_p50: float = 109_698
    resumed_first_input_tokens_p90: float = 410_064
    tool_appended_tokens_p50: float = 733  # W§2 appended per call 733 / 4,868
    tool_appended_tokens_p90: float = 4_868
    user_appended_tokens_p50: float = 733  # W§2 gives no split by trigger; --like fits one
    user_appended_tokens_p90: float = 4_868
    output_tokens_p50: float = 217  # W§2 217 / 894
    output_tokens_p90: float = 894
    tool_think_time_s_p50: float = 9  # W603 tool-result calls 9 / 67 s (all calls W§2: 10 / 158)
    tool_think_time_s_p90: float = 67
    user_think_time_s_p50: float = 128  # W603 user-text calls 128 / 2,125 s
    user_think_time_s_p90: float = 2_125
    api_time_s_p50: float = 6  # W§2 api time 6 / 18 s: spaces calls, t_k = t_k-1 + api + think
    api_time_s_p90: float = 18
    user_turn_share: float = 0.147  # W603 6,058 of 41,306 later main calls carry user text
    shared_prefix_tokens: int = 14_825  # W§2 tool + system tokens p50
    prefix_break_share: float = 0.0143  # W§2 607 prefix breaks without a size drop in 42,535 calls
    summary_tokens_p50: float = 18_900  # W603 post-compaction prompt minus prefix 18.9k / 54k
    summary_tokens_p90: float = 54_000
    context_limit_tokens: int = 1_000_000  # SEED-6
    early_limit_tokens: int = 165_000  # W603 pre-compaction prompt p50 151k / p90 165k
    early_limit_share: float = 0.0  # share of fresh sessions compacting at early_limit_tokens
    subagent_session_share: float = 0.027  # W§2 16 of 603 sessions
    subagents_per_session_mean: float = 3.7  # W§2 59 sub-agents in 16 sessions
    subagent_calls_p50: float = 11  # W603 calls per sub-agent 11 / 17 (mean 10.6 = 626 / 59)
    subagent_calls_p90: float = 17
    subagent_first_input_tokens_p50: float = 10_348  # W603 10,348 / 12,483
    subagent_first_input_tokens_p90: float = 12_483
    subagent_shared_prefix_tokens: int = 8_627  # W603 sub-agent tool + system tokens p50
    session_rate_per_s: float = 1 / 6  # Poisson arrivals; the Weka importer's default (603 in ~1 h)
    model: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "model":
                continue
            if (
                not isinstance(v, (int, float))
                or isinstance(v, bool)
                or not np.isfinite(v)
                or v < 0
            ):
                raise UsageError(f"synth parameter {f.name} must be a finite number ≥ 0, got {v!r}")
            if f.name.endswith("_p90") and v < getattr(self, f.name[:-3] + "p50"):
                raise UsageError(f"synth parameter {f.name} must be ≥ its p50, got {v!r}")
        for name in (
            "prefix_break_share",
            "user_turn_share",
            "early_limit_share",
            "subagent_session_share",
            "resumed_session_share",
        ):
            if getattr(self, name) > 1:
                raise UsageError(
                    f"synth parameter {name} must be a share in [0, 1], got {getattr(self, name)!r}"
                )
        need = 2 * max(self.shared_prefix_tokens, self.subagent_shared_prefix_tokens) + 2
        for name in ("context_limit_tokens", "early_limit_tokens"):
            if getattr(self, name) < need:
                raise UsageError(
                    f"synth parameter {name} must be at least twice the shared prefix + 2 ({need:,} tokens), got {getattr(self, name):,}"
                )
        if self.session_rate_per_s <= 0:
            raise UsageError(
                f"synth parameter session_rate_per_s must be > 0, got {self.session_rate_per_s!r}"
            )

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _lognormal(rng: np.random.Generator, p50: float, p90: float, size: int) -> np.ndarray:
    if p50 <= 0:
        return np.zeros(size)
    sigma = (np.log(max(p90, p50)) - np.log(p50)) / Z90
    return rng.lognormal(np.log(p50), sigma, size)


def _lognormal_below(
    rng: np.random.Generator, p50: float, p90: float, cap: np.ndarray
) -> np.ndarray:
    """Log-normal draws truncated to ``≤ cap`` by redrawing (a clip would pile mass on the cap)."""
    x = _lognormal(rng, p50, p90, cap.size)
    for _ in range(64):  # rounds, not calls: each round redraws only what is still too large
        over = np.flatnonzero(x > cap)
        if over.size == 0:
            break
        x[over] = _lognormal(rng, p50, p90, over.size)
    return np.minimum(x, cap)


def _tokens(x: np.ndarray, lo: int = 1) -> np.ndarray:
    return np.maximum(np.rint(x), lo).astype(np.int64)


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


def _segmented_cumsum(
    inc: np.ndarray, start_rows: np.ndarray, stream_of_row: np.ndarray
) -> np.ndarray:
    """Cumulative sum restarting at every stream start (``inc`` is 0 on those rows)."""
    cs = np.cumsum(inc)
    return cs - cs[start_rows][stream_of_row]


def _session_lengths(
    rng: np.random.Generator, p: SynthParams, n_sessions: int | None, n_calls: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Main-agent calls and the resumed flag per session, for n_sessions or ≥ n_calls calls."""

    def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
        resumed = rng.random(k) < p.resumed_session_share
        fresh_len = _lognormal(rng, p.fresh_calls_per_session_p50, p.fresh_calls_per_session_p90, k)
        resumed_len = _lognormal(
            rng, p.resumed_calls_per_session_p50, p.resumed_calls_per_session_p90, k
        )
        return _tokens(np.where(resumed, resumed_len, fresh_len)), resumed

    if n_sessions is not None:
        return draw(n_sessions)
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    total = 0
    while total < n_calls:  # few passes: each chunk is sized from the calls still missing
        k = (
            16
            if not chunks
            else int(1.3 * (n_calls - total) * len(chunks[0][0]) / max(total, 1)) + 16
        )
        chunks.append(draw(min(k, n_calls)))
        total += int(chunks[-1][0].sum())
    lengths, resumed = (np.concatenate(c) for c in zip(*chunks, strict=True))
    n = int(np.searchsorted(np.cumsum(lengths), n_calls)) + 1
    return lengths[:n], resumed[:n]


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
    ``synthesize(100, seed=1, context_limit_tokens=200_000)``. Same arguments, same frame.
    """
    known = {f.name for f in dataclasses.fields(SynthParams)}
    for name in overrides:
        if name not in known:
            raise UnknownNameError("synth parameter", name, known)
    p = dataclasses.replace(params or SynthParams(), **overrides)
    if (n_sessions is None) == (n_calls is None):
        raise UsageError("give either n_sessions or n_calls")
    if (
        (n_sessions if n_sessions is not None else n_calls) < 1
        or not isinstance(seed, int)
        or seed < 0
    ):
        raise UsageError(
            f"n_sessions / n_calls must be ≥ 1 and seed a non-negative integer, got {n_sessions or n_calls}, {seed!r}"
        )
    # One stream per concern, so e.g. --calls and --sessions draw the same session lengths.
    streams = np.random.SeedSequence(seed).spawn(5)
    r = {
        k: np.random.default_rng(s)
        for k, s in zip(("len", "sub", "row", "time", "first"), streams, strict=True)
    }

    main_len, resumed = _session_lengths(r["len"], p, n_sessions, n_calls)
    n = main_len.size
    # Sub-agents: which sessions, how many, where in the parent they start, how many calls.
    has_sub = r["sub"].random(n) < p.subagent_session_share
    n_sub = np.where(has_sub, 1 + r["sub"].poisson(max(p.subagents_per_session_mean - 1, 0), n), 0)
    sub_session = np.repeat(np.arange(n), n_sub)
    sub_spawn = np.floor(
        r["sub"].random(sub_session.size) * np.maximum(main_len[sub_session] - 1, 1)
    ).astype(np.int64)
    sub_len = _tokens(
        _lognormal(r["sub"], p.subagent_calls_p50, p.subagent_calls_p90, sub_session.size)
    )
    sub_rank = np.arange(sub_session.size) - np.repeat(np.cumsum(n_sub) - n_sub, n_sub) + 1

    # Streams (one per agent), session-major: main agent (rank 0), then its sub-agents.
    st_session = np.concatenate([np.arange(n), sub_session])
    st_rank = np.concatenate([np.zeros(n, np.int64), sub_rank])
    order = np.lexsort((st_rank, st_session))
    st_session, st_rank = st_session[order], st_rank[order]
    st_len = np.concatenate([main_len, sub_len])[order]
    st_spawn = np.concatenate([np.full(n, -1), sub_spawn])[order]
    st_start = np.cumsum(st_len) - st_len
    is_sub_st = st_rank > 0
    st_base = np.where(is_sub_st, p.subagent_shared_prefix_tokens, p.shared_prefix_tokens).astype(
        np.int64
    )
    # Resumed sessions already hold more than a short window allows, so only fresh ones may
    # run on the early (short-window) limit.
    early = ~resumed & (r["sub"].random(n) < p.early_limit_share)
    st_limit = np.where(
        early, min(p.early_limit_tokens, p.context_limit_tokens), p.context_limit_tokens
    )[st_session].astype(np.int64)
    st_resumed = resumed[st_session] & ~is_sub_st
    room = (st_limit - st_base).astype(np.float64)
    first_in = np.select(
        [is_sub_st, st_resumed],
        [
            _lognormal_below(
                r["first"],
                p.subagent_first_input_tokens_p50,
                p.subagent_first_input_tokens_p90,
                st_limit,
            ),
            _lognormal_below(
                r["first"],
                p.resumed_first_input_tokens_p50,
                p.resumed_first_input_tokens_p90,
                st_limit,
            ),
        ],
        st_base
        + _lognormal_below(
            r["first"], p.fresh_first_extra_tokens_p50, p.fresh_first_extra_tokens_p90, room
        ),
    )
    st_first_in = np.minimum(np.maximum(_tokens(first_in), st_base + 1), st_limit)

    # Rows, stream-major: per-call draws as whole arrays.
    N = int(st_len.sum())
    row_st = np.repeat(np.arange(st_len.size), st_len)
    first = np.zeros(N, np.bool_)
    first[st_start] = True
    row_sub = is_sub_st[row_st]
    user = ~first & ~row_sub & (r["row"].random(N) < p.user_turn_share)
    appended = _tokens(
        np.where(
            user,
            _lognormal(r["row"], p.user_appended_tokens_p50, p.user_appended_tokens_p90, N),
            _lognormal(r["row"], p.tool_appended_tokens_p50, p.tool_appended_tokens_p90, N),
        )
    )
    output = _tokens(_lognormal(r["row"], p.output_tokens_p50, p.output_tokens_p90, N))
    base, limit = st_base[row_st], st_limit[row_st]
    # Summary and one append each fit in half the room above the prefix, so the call after a
    # compaction never has to compact again (binding only for small limits).
    half_room = np.maximum((limit - base) // 2, 1)
    summary = np.minimum(
        _tokens(_lognormal(r["row"], p.summary_tokens_p50, p.summary_tokens_p90, N)), half_room
    )
    appended = np.minimum(appended, np.maximum(half_room - 1, 1))
    broken = r["row"].random(N) < p.prefix_break_share
    keep = np.where(broken, PREFIX_BREAK_MAX_KEEP * r["row"].random(N), 1.0)
    input_tokens, reused = np.empty(N, np.int64), np.empty(N, np.int64)
    compaction = np.zeros(N, np.bool_)
    _grow_context(
        first,
        st_first_in[row_st],
        appended,
        summary,
        keep,
        base,
        limit,
        input_tokens,
        reused,
        compaction,
    )

    # Times: t_k = t_k-1 + api_k-1 + think_k inside a stream; a parent waits for its sub-agents.
    think = np.where(
        user,
        _lognormal(r["time"], p.user_think_time_s_p50, p.user_think_time_s_p90, N),
        _lognormal(r["time"], p.tool_think_time_s_p50, p.tool_think_time_s_p90, N),
    )
    think[first] = 0.0
    api = _lognormal(r["time"], p.api_time_s_p50, p.api_time_s_p90, N)
    prev_api = np.concatenate([[0.0], api[:-1]])
    rel = _segmented_cumsum(np.where(first, 0.0, prev_api + think), st_start, row_st)
    main_st_of_session = st_start[~is_sub_st]  # first row of each session's main stream
    sub_st = np.flatnonzero(is_sub_st)
    if sub_st.size:
        last = st_start[sub_st] + st_len[sub_st] - 1
        parent_row = main_st_of_session[st_session[sub_st]] + st_spawn[sub_st]
        waits = (
            parent_row + 1 < main_st_of_session[st_session[sub_st]] + main_len[st_session[sub_st]]
        )
        np.maximum.at(think, parent_row[waits] + 1, rel[last][waits] + api[last][waits])
        rel = _segmented_cumsum(np.where(first, 0.0, prev_api + think), st_start, row_st)
    session_t0 = np.cumsum(r["time"].exponential(1.0 / p.session_rate_per_s, n))
    session_t0 -= session_t0[0]
    st_offset = session_t0[st_session]
    if sub_st.size:
        st_offset[sub_st] += rel[parent_row] + api[parent_row]
    t = st_offset[row_st] + rel

    # Interleave sub-agent calls by time; only sessions with sub-agents need reordering.
    row_session = st_session[row_st]
    perm = np.arange(N)
    mixed = np.flatnonzero(has_sub[row_session])
    if mixed.size:
        perm[mixed] = mixed[np.lexsort((row_st[mixed], t[mixed], row_session[mixed]))]
    session_rows = np.bincount(row_session, minlength=n)
    session_first_row = np.cumsum(session_rows) - session_rows
    keep = N if n_calls is None else n_calls
    perm = perm[:keep]
    rs = row_session[perm]
    trigger = np.select(
        [compaction[perm], first[perm] & row_sub[perm], first[perm] | user[perm]], [3, 2, 0], 1
    ).astype(np.int64)
    # Strings are gathered from small tables: building 10M strings by expression is slower.
    width = max(6, len(str(n - 1)))
    names = pl.Series(np.char.add("s", np.char.zfill(np.arange(n).astype(str), width)))
    rank = st_rank[row_st[perm]]
    agents = pl.Series([None, *(f"sub{k}" for k in range(1, int(rank.max()) + 1))], dtype=pl.String)
    calls = pl.DataFrame(
        {
            "session_id": names.gather(rs),
            "call_index": np.arange(keep) - session_first_row[rs],
            "agent_id": agents.gather(rank),
            "t_start_s": t[perm],
            "input_tokens": input_tokens[perm],
            "reused_prefix_tokens": reused[perm],
            "new_tokens": input_tokens[perm] - reused[perm],
            "output_tokens": output[perm],
            "is_compaction": compaction[perm],
            "shared_prefix_tokens": base[perm],
            "block_size_tokens": pl.Series([None], dtype=pl.Int64).gather(np.zeros(keep, np.int64)),
            "block_hashes": pl.Series([None], dtype=pl.List(pl.UInt64)).gather(
                np.zeros(keep, np.int64)
            ),
            "trigger": pl.Series(TRIGGERS).gather(trigger),
            "think_time_s": think[perm],
            "model": pl.Series([p.model], dtype=pl.String).gather(np.zeros(keep, np.int64)),
            "source": pl.Series(["synth"]).gather(np.zeros(keep, np.int64)),
        }
    )
    options = {"seed": seed, "n_sessions": n_sessions, "n_calls": n_calls, **p.as_dict()}
    return Trace(
        S.conform(calls),
        trace_metadata("synth", block_size_tokens=None, hash_scope="none", options=options),
    )
