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

import numpy as np
import polars as pl

from agentx.errors import UnknownNameError, UsageError
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata
from agentx.traces.synth_chunk import _chunk
from agentx.traces.synth_params import PREFIX_BREAK_MAX_KEEP, SynthParams

# A chunk's streams and times live in synth_streams, its rows and frame in synth_chunk; this
# module keeps the chunking and seeds (CHUNK_CALLS/CHUNK_SESSIONS are looked up here, where
# tests patch them) and the public entry points.
__all__ = ["PREFIX_BREAK_MAX_KEEP", "SynthParams", "synth_chunks", "synthesize"]


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
