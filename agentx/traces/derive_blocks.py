"""Block ids for a trace that has none, derived from its token counts.

Each agent of a session is one *chain* of calls. A call reuses the leading
``floor(reused_prefix_tokens / B)`` full blocks of the previous call of its chain (no more than
that call's full blocks) and gets new ids for the rest of its prompt, ``ceil(input_tokens / B)`` ids in all. Ids are
numbered from 0 inside each session, in call order, like the Weka files' local ids: equal ids
at equal positions mean equal prefixes within the session. A compaction needs no special case:
its reused prefix (the tool and system prompt, SEED-6) keeps just those leading blocks.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import polars as pl


def derive_block_ids(df: pl.DataFrame, block_size_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, ids): row ``k``'s ids are ``ids[offsets[k]:offsets[k+1]]``, in ``df``'s order.

    ``df`` must be grouped by session in call order (schema v1 guarantees it).
    """
    b = int(block_size_tokens)
    agent = pl.col("agent_id").fill_null("")
    keys = df.select(
        pl.col("session_id").rank("dense").cast(pl.Int64).alias("session"),
        pl.struct(pl.col("session_id"), agent.alias("a"))
        .rank("dense")
        .cast(pl.Int64)
        .alias("chain"),
    )
    n_in = df["input_tokens"].to_numpy().astype(np.int64)
    n_blk = -(-n_in // b)
    offsets = np.concatenate(([0], np.cumsum(n_blk))).astype(np.int64)
    out = np.empty(int(offsets[-1]), dtype=np.uint64)
    _kernel(
        keys["session"].to_numpy(),
        keys["chain"].to_numpy() - 1,
        n_blk,
        df["reused_prefix_tokens"].to_numpy().astype(np.int64) // b,
        n_in // b,
        offsets,
        out,
    )
    return offsets, out


@nb.njit(cache=True)
def _kernel(session, chain, n_blk, lead, n_full, offsets, out):  # pragma: no cover (compiled)
    n = len(session)
    n_chains = int(chain.max()) + 1 if n else 0
    last_off = np.full(n_chains, -1, np.int64)
    last_full = np.zeros(n_chains, np.int64)
    next_id = 0
    cur = -1
    for k in range(n):
        if session[k] != cur:
            cur = session[k]
            next_id = 0
        c = chain[k]
        keep = 0
        if last_off[c] >= 0:
            keep = min(lead[k], last_full[c], n_blk[k])
        o = offsets[k]
        for j in range(keep):
            out[o + j] = out[last_off[c] + j]
        for j in range(keep, n_blk[k]):
            out[o + j] = next_id
            next_id += 1
        last_off[c] = o
        last_full[c] = n_full[k]
