"""Mooncake FAST'25 JSONL (one request per line, 512-token ``hash_ids``, no session ids).

Ids are global and depend on the whole prefix (SOURCES.md §1), so a request's reused prefix
is its leading run of ids seen anywhere earlier in the file, and sessions are recovered by
chaining: a request continues the latest earlier request whose *full* blocks (all ids but its
last) are a prefix of its own ids, provided that request introduced at least one new full
block (otherwise the shared system-prompt block 0 would link unrelated requests). Because an
id fixes its position and prefix, "F is a prefix of h" is a dictionary lookup of F's last id
at its position, so the pass is linear (3,963 links and 2,011 chains of ≥ 2 on
conversation_trace, as SOURCES.md reports).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from agentx.errors import InputError
from agentx.traces.importers._common import (
    count,
    finish,
    is_time,
    leading_seen_blocks,
    parse_json,
    read_bytes,
)
from agentx.traces.io import Trace, trace_metadata

BLOCK_SIZE_TOKENS = 512


def _read(path: Path) -> tuple[list[float], list[int], list[int], list[list[int]], list[int]]:
    t_ms, n_in, n_out, hashes, lines = [], [], [], [], []
    text = read_bytes(path)
    prev = 0.0
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {line_no}"
        r = parse_json(path, line, where)
        if not isinstance(r, dict):
            raise InputError(path, f"expected a JSON object, got {r!r:.40}", where=where)
        t = r.get("timestamp")
        if not is_time(t):
            raise InputError(
                path,
                f"expected a non-negative time in milliseconds, got {t!r:.40}",
                where=where,
                field="timestamp",
            )
        if t < prev:
            raise InputError(
                path,
                f"expected times sorted through the file, got {t} after {prev}",
                where=where,
                field="timestamp",
            )
        prev = t
        k_in = count(r.get("input_length"), path, where, "input_length")
        k_out = count(r.get("output_length"), path, where, "output_length")
        h = r.get("hash_ids")
        if not isinstance(h, list) or not all(type(x) is int and 0 <= x < 1 << 63 for x in h):
            raise InputError(
                path,
                f"expected a list of non-negative integer block ids, got {h!r:.40}",
                where=where,
                field="hash_ids",
            )
        want = -(-k_in // BLOCK_SIZE_TOKENS)
        if len(h) != want:
            raise InputError(
                path,
                f"expected ceil(input_length/{BLOCK_SIZE_TOKENS}) = {want} block ids for {k_in} tokens, got {len(h)}",
                where=where,
                field="hash_ids",
            )
        t_ms.append(float(t))
        n_in.append(k_in)
        n_out.append(k_out)
        hashes.append(h)
        lines.append(line_no)
    if not hashes:
        raise InputError(path, "no requests in the file")
    return t_ms, n_in, n_out, hashes, lines


def chain_roots(hashes: list[list[int]]) -> np.ndarray:
    """For each request, the first request of its inferred conversation (itself if none)."""
    seen: set[int] = set()
    last_full: dict[tuple[int, int], int] = {}
    root = np.arange(len(hashes))
    for j, h in enumerate(hashes):
        for k in range(len(h) - 1, -1, -1):
            i = last_full.get((k, h[k]))
            if i is not None:
                root[j] = root[i]
                break
        full = h[:-1]
        if full and not seen.issuperset(full):
            last_full[(len(full) - 1, full[-1])] = j
        seen.update(h)
    return root


def load_mooncake(source: Path | str) -> Trace:
    """Read a Mooncake JSONL trace; sessions are the inferred continuation chains."""
    path = Path(source)
    if path.is_dir():
        raise InputError(path, "is a folder, expected one Mooncake .jsonl file")
    t_ms, n_in, n_out, hashes, lines = _read(path)
    n = len(hashes)
    lens = np.fromiter(map(len, hashes), dtype=np.int64, count=n)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    ids = np.fromiter((x for h in hashes for x in h), dtype=np.uint64, count=int(offsets[-1]))
    lead = leading_seen_blocks(np.zeros(n, np.int64), np.arange(n), offsets, ids)
    root = chain_roots(hashes)
    blocks = pa.LargeListArray.from_arrays(
        pa.array(offsets, pa.int64()), pa.array(ids, pa.uint64())
    )
    n_in_a = np.asarray(n_in, dtype=np.int64)
    df = pl.DataFrame(
        {
            "_row": np.arange(n),
            "_root": root,
            "session_id": [f"{path.stem}-{r:06d}" for r in root],
            "agent_id": pl.Series([None] * n, dtype=pl.String),
            "t_start_s": np.asarray(t_ms) / 1000.0,
            "input_tokens": n_in_a,
            "reused_prefix_tokens": np.minimum(lead * BLOCK_SIZE_TOKENS, n_in_a),
            "output_tokens": np.asarray(n_out, dtype=np.int64),
            "shared_prefix_tokens": np.zeros(n, dtype=np.int64),
            "block_size_tokens": np.full(n, BLOCK_SIZE_TOKENS),
            "block_hashes": pl.Series(blocks),
            "trigger": "request",
            "think_time_s": pl.Series([None] * n, dtype=pl.Float64),
            "model": pl.Series([None] * n, dtype=pl.String),
            "source": "mooncake",
            # file order breaks ties of the ms-bucketed timestamps, so an export keeps it
            "source_line": np.asarray(lines, dtype=np.int64),
        }
    ).sort("_root", "_row")
    df = df.with_columns(pl.int_range(pl.len()).over("_root").alias("call_index"))
    meta = trace_metadata(
        "mooncake",
        block_size_tokens=BLOCK_SIZE_TOKENS,
        hash_scope="global",
        options={"sessions": "inferred continuation chains"},
    )
    return finish(df.drop("_row", "_root"), meta, path)
