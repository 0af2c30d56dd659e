"""Weka / AgentX Claude Code sessions (kv-cache-tester format): one JSON file per session.

Files are read by ``weka_read``; here calls are put in time order per session, reused prefixes
are measured on each session's small arrays (cache-resident, so the 83 M ids of the shared set
cost seconds), and sessions are placed on one clock by a seeded Poisson arrival process.
The files list only *full* 64-token blocks (``floor(in/64)`` ids); one never-shared id is
appended for the trailing partial block so every row carries ``ceil(in/64)`` ids (schema v1).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from agentx.errors import InputError, UsageError
from agentx.progress import progress
from agentx.traces.importers._common import finish, leading_seen_blocks
from agentx.traces.importers.weka_read import (
    BLOCK_SIZE_TOKENS,
    PARTIAL_BLOCK_ID_BASE,
    Session,
    read_session,
)
from agentx.traces.io import Trace, trace_metadata

DEFAULT_SESSION_RATE_PER_S = 1 / 6  # one session every 6 s: 603 sessions over about an hour


def session_files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise InputError(source, "no such file or folder")
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        raise InputError(source, "no Weka session files (*.json or *.json.gz) in this folder")
    seen: set[str] = set()
    for p in files:
        try:
            p.name.encode("utf-8")
        except UnicodeEncodeError:  # the name becomes the session id, which must be text
            raise InputError(p, "file name is not valid UTF-8; rename the file") from None
        if (name := session_name(p)) in seen:
            raise InputError(
                source, f"two files hold session '{name}' ({name}.json and {name}.json.gz)"
            )
        seen.add(name)
    return files


def session_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


def session_offsets_s(n: int, session_rate_per_s: float, seed: int) -> np.ndarray:
    """Session start times: a Poisson process (exponential gaps), the first session at 0."""
    gaps = np.random.default_rng(seed).exponential(1.0 / session_rate_per_s, size=n)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if n else gaps


def load_weka(
    source: Path | str,
    *,
    session_rate_per_s: float = DEFAULT_SESSION_RATE_PER_S,
    seed: int = 0,
    progress_bar: bool | None = None,
) -> Trace:
    """Read a folder (or one file) of Weka sessions into a validated trace."""
    source = Path(source)
    if not (
        isinstance(session_rate_per_s, (int, float))
        and math.isfinite(session_rate_per_s)
        and session_rate_per_s > 0
    ):
        raise UsageError(
            f"session rate must be a positive number of sessions per second, got {session_rate_per_s}"
        )
    files = session_files(source)
    offsets_s = session_offsets_s(len(files), float(session_rate_per_s), int(seed))
    cols: dict[str, list] = {}
    values, lens = [], []
    for code, path in enumerate(progress(files, label="weka", enabled=progress_bar)):
        s, ids = read_session(path)
        order, reused, session_values, session_lens = _blocks(s, ids)
        s.cols.update(
            session_id=[session_name(path)] * len(order),
            t_start_s=[t + offsets_s[code] for t in s.cols["t"]],
            reused_prefix_tokens=reused.tolist(),
        )
        identity = bool((order == np.arange(len(order))).all())
        for k, v in s.cols.items():
            cols.setdefault(k, []).extend(v if identity else [v[i] for i in order])
        values.append(session_values)
        lens.append(session_lens)
    n_ids = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    offsets = pa.array(np.concatenate(([0], np.cumsum(n_ids))), pa.int64())
    blocks = pa.LargeListArray.from_arrays(offsets, pa.array(np.concatenate(values), pa.uint64()))
    df = pl.DataFrame(cols, schema_overrides=_OVERRIDES).with_columns(
        pl.Series("block_hashes", blocks),
        pl.int_range(pl.len()).over("session_id").alias("call_index"),
        pl.lit(BLOCK_SIZE_TOKENS).alias("block_size_tokens"),
        pl.lit("weka").alias("source"),
    )
    return finish(df.drop("t", "n_ids"), _meta(session_rate_per_s, seed), source)


_OVERRIDES = {
    "agent_id": pl.String,
    "model": pl.String,
    "t": pl.Float64,
    "t_start_s": pl.Float64,
    "think_time_s": pl.Float64,
    "api_time_s": pl.Float64,
}


def _blocks(s: Session, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One session, small arrays: call order by time, reused prefixes, ids in call order.

    Done per session so the arrays stay in cache; the walk shares one seen-set between the
    main agent and its sub-agents, in call order (SOURCES.md §6).
    """
    t = np.asarray(s.cols["t"], dtype=np.float64)
    n = len(t)
    order = np.lexsort((np.arange(n), t))  # stable: ties keep file order
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    n_ids = np.asarray(s.cols["n_ids"], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(n_ids)))
    lead = leading_seen_blocks(np.zeros(n, np.int64), rank, offsets, ids)
    n_in = np.asarray(s.cols["input_tokens"], dtype=np.int64)
    reused = np.minimum(lead * BLOCK_SIZE_TOKENS, n_in)  # file order, like s.cols
    # the trailing partial block is never shared: give it an id no source id can equal
    add = (((n_in % BLOCK_SIZE_TOKENS) != 0) & (n_ids == n_in // BLOCK_SIZE_TOKENS))[order]
    n_sorted = n_ids[order]
    lens = n_sorted + add
    new_offsets = np.concatenate(([0], np.cumsum(lens)))
    out = np.empty(int(new_offsets[-1]), dtype=np.uint64)
    out[_segment_positions(new_offsets[:-1], n_sorted)] = ids[
        _segment_positions(offsets[:-1][order], n_sorted)
    ]
    out[new_offsets[1:][add] - 1] = np.uint64(PARTIAL_BLOCK_ID_BASE) + np.flatnonzero(add).astype(
        np.uint64
    )
    return order, reused, out, lens


def _segment_positions(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ranges starts[i] .. starts[i] + lens[i] - 1."""
    total = int(lens.sum())
    shift = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    return np.arange(total, dtype=np.int64) + shift


def _meta(session_rate_per_s: float, seed: int) -> dict[str, str]:
    options = {
        "arrival": "poisson",
        "session_rate_per_s": float(session_rate_per_s),
        "seed": int(seed),
        "session_order": "file name",
    }
    return trace_metadata(
        "weka", block_size_tokens=BLOCK_SIZE_TOKENS, hash_scope="session", options=options
    )
