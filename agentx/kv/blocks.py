"""The block model of a trace: every KV block each call reads or writes, in time order.

KV state is a chain of immutable fixed-size blocks (SEED-4): a call reads the leading blocks
that cover its reused prefix and writes new blocks for the rest of its prompt. Ids come from
``block_hashes`` where the trace has them (namespaced by session when the file's hash scope is
"session"), else they are synthesized per chain (session, agent, compaction epoch): a position
keeps its block until a call rewrites it, so a compaction or a prefix break starts new blocks.

Assumptions (docs/kv-tiers.md):
* the leading full blocks of ``shared_prefix_tokens`` (tool definitions + system prompt) are the
  same bytes for every session with the same value (the session's smallest, or the agent's
  without hashes), so they map to one set of ids stored once (SEED-7); with hashes the hash
  is part of the name, so a sub-agent's own blocks stay apart. ``shared`` marks the ones two or
  more sessions use;
* a call reads ``ceil(reused / B)`` blocks; with hashes it writes the rest; without hashes a
  partially reused last block is read (its old, shorter version) and rewritten as a new block;
* re-blocking to a serving block of ``m`` trace blocks names each merged block by its last
  trace block's hash (equal hashes at equal positions mean equal prefixes).

The stream is flat numpy arrays (calls' block lists concatenated via offsets): the Weka set has
~83 million 64-token references, far too many for Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np
import polars as pl

from agentx.errors import InputError, UsageError
from agentx.kv.hashes import hash_ids
from agentx.traces.io import Trace

ORDER = ("t_start_s", "session_id", "call_index")
# Block references materialized at most. Measured peaks per reference: ~16 bytes with lru,
# ~48 with seed7 (3.3 and 10.2 GB for 212 M), so ~5 and ~14 GB here on a 24 GB machine. A
# trace with more references is re-blocked to the smallest power-of-two multiple that fits.
MAX_REFS = 300_000_000


@dataclass(frozen=True)
class BlockStream:
    """Block references of a trace; per-call arrays are in reference (time) order."""

    block_size_tokens: int
    row: np.ndarray  # trace row of each call
    ref_off: np.ndarray  # refs of call k are ref_block[ref_off[k]:ref_off[k+1]], reads first
    n_read: np.ndarray  # leading refs of each call that read its reused prefix
    write_pos: np.ndarray  # block position (in the prompt) of each call's first write
    input_tokens: np.ndarray
    reused_tokens: np.ndarray
    ref_block: np.ndarray  # dense block id of every reference (int64)
    n_blocks: int
    shared: np.ndarray  # bool per block: shared-prefix block used by two or more sessions
    chain: np.ndarray  # per call: id of (session, agent, compaction epoch)
    agent: np.ndarray  # per call: id of (session, agent)
    compaction: np.ndarray  # per call: starts a compacted context
    block_size_note: str = ""  # why block_size_tokens is coarser than asked ("" if it is not)

    @property
    def n_calls(self) -> int:
        return len(self.row)

    @property
    def n_refs(self) -> int:
        return len(self.ref_block)


def build_blocks(
    trace: Trace,
    block_size_tokens: int | None = None,
    *,
    share_prefix: bool = True,
    max_refs: int = MAX_REFS,
) -> BlockStream:
    """The reference stream of ``trace`` at ``block_size_tokens`` (default: the trace's own),
    coarsened by powers of two until it has at most ``max_refs`` references."""
    g = geometry(trace, block_size_tokens, share_prefix=share_prefix, max_refs=max_refs)
    df, row, bs, n_blk, n_read, write_pos, ref_off, spt = (
        trace.calls,
        g.row,
        g.bs,
        g.n_blk,
        g.n_read,
        g.write_pos,
        g.ref_off,
        g.spt,
    )
    use_hashes, native, chain, agent = g.use_hashes, g.native, g.chain, g.agent
    out = np.empty(int(ref_off[-1]), np.int64)
    if use_hashes:
        geo = (n_blk, n_read, write_pos, ref_off, spt)
        n_blocks, n_private = hash_ids(df, row, g.scope, bs // native, geo, g.spt_tokens, out)
        shared = np.arange(n_blocks) >= n_private
    else:
        order = np.lexsort((np.arange(len(chain)), chain))
        geo = (n_blk, n_read, write_pos, ref_off, spt, g.sh_base)
        n_blocks = int(_synth_kernel(order, chain, *geo, g.n_shared, out))
        shared = np.arange(n_blocks) < g.n_shared
    sessions = df["session_id"].rank("dense").to_numpy().astype(np.int64)[row]
    shared = _multi_session(shared, out, ref_off, sessions)
    return BlockStream(
        block_size_tokens=bs,
        block_size_note=g.note,
        row=row,
        ref_off=ref_off,
        n_read=n_read,
        write_pos=write_pos,
        input_tokens=g.n_in,
        reused_tokens=g.reused,
        ref_block=out,
        n_blocks=n_blocks,
        shared=shared,
        chain=chain,
        agent=agent,
        compaction=df["is_compaction"].to_numpy()[row],
    )


@dataclass(frozen=True)
class Geometry:
    """Per call, in time order: where its references fall, without naming any block.

    ``spt``: leading blocks of the call that are shared-prefix blocks (0 with global hashes
    or ``share_prefix=False``); without hashes shared ids come first, one run per distinct
    ``spt`` (``sh_base``: the call's first shared id; ``n_shared`` ids in all)."""

    row: np.ndarray
    bs: int
    note: str
    use_hashes: bool
    native: int | None
    scope: str
    n_in: np.ndarray
    reused: np.ndarray
    n_blk: np.ndarray
    n_read: np.ndarray
    write_pos: np.ndarray
    ref_off: np.ndarray
    chain: np.ndarray
    agent: np.ndarray
    spt: np.ndarray
    spt_tokens: np.ndarray
    sh_base: np.ndarray
    n_shared: int


def geometry(
    trace: Trace,
    block_size_tokens: int | None = None,
    *,
    share_prefix: bool = True,
    max_refs: int = MAX_REFS,
) -> Geometry:
    """The block geometry ``build_blocks`` and the chain kernel (agentx.kv.chains) share."""
    df = trace.calls
    use_hashes = df.height > 0 and bool(df["block_hashes"].is_not_null().all())
    native = _native_block_size(df, trace) if use_hashes else None
    bs = int(block_size_tokens) if block_size_tokens is not None else (native or 64)
    if bs <= 0:
        raise UsageError(f"--block-size-tokens must be positive, got {bs}")
    if use_hashes and bs % native:
        raise UsageError(
            f"--block-size-tokens {bs} must be a multiple of the trace's {native}-token hash blocks"
        )
    # time order without moving the (large) hash lists: per-call columns are gathered instead
    row = df.select(pl.arg_sort_by([*ORDER], maintain_order=True)).to_series().to_numpy()
    row = row.astype(np.int64)

    def col(name: str) -> np.ndarray:
        return df[name].to_numpy()[row].astype(np.int64)

    n_in = col("input_tokens")
    reused = col("reused_prefix_tokens")
    bs, note = fit_block_size(n_in, reused, bs, use_hashes, max_refs)
    n_blk = -(-n_in // bs)
    n_read = -(-reused // bs)
    write_pos = n_read.copy() if use_hashes else reused // bs
    ref_off = np.zeros(df.height + 1, np.int64)
    np.cumsum(n_read + n_blk - write_pos, out=ref_off[1:])
    chain, agent = (a[row] for a in _chains(df))
    # One shared-prefix size per session (hashes) or agent (synthesized chains), so a block is
    # shared or private the same way in every call that names it.
    scope = trace.hash_scope if use_hashes else "none"
    keys = ["session_id"] if use_hashes else ["session_id", pl.col("agent_id").fill_null("")]
    spt_min = df.select(pl.col("shared_prefix_tokens").min().over(keys)).to_series()
    spt = spt_min.to_numpy()[row].astype(np.int64) // bs
    if not share_prefix or scope == "global":  # global hashes already name shared blocks
        spt[:] = 0
    groups, gi = np.unique(spt, return_inverse=True)
    spt_tokens = spt_min.to_numpy()[row].astype(np.int64)
    return Geometry(
        row=row, bs=bs, note=note, use_hashes=use_hashes, native=native, scope=scope,
        n_in=n_in, reused=reused, n_blk=n_blk, n_read=n_read, write_pos=write_pos,
        ref_off=ref_off, chain=chain, agent=agent, spt=spt, spt_tokens=spt_tokens,
        sh_base=(np.cumsum(groups) - groups)[gi].astype(np.int64), n_shared=int(groups.sum()),
    )  # fmt: skip


def ref_count(n_in: np.ndarray, reused: np.ndarray, bs: int, use_hashes: bool) -> int:
    """References of the stream at block size ``bs``, in closed form (as ``ref_off`` counts
    them: ``ceil(R/B)`` reads, writes from ``ceil(R/B)`` (hashes) or ``floor(R/B)`` on)."""
    n_read = -(-reused // bs)
    write_pos = n_read if use_hashes else reused // bs
    return int((n_read + -(-n_in // bs) - write_pos).sum())


def fit_block_size(
    n_in: np.ndarray, reused: np.ndarray, bs: int, use_hashes: bool, max_refs: int
) -> tuple[int, str]:
    """``bs`` doubled until the stream has at most ``max_refs`` references, and why."""
    if max_refs <= 0:
        raise UsageError(f"--max-block-refs must be positive, got {max_refs}")
    top = max(int(n_in.max(initial=1)), 1)
    return fit_counted(lambda b: ref_count(n_in, reused, b, use_hashes), bs, top, max_refs)


def fit_counted(count, bs: int, top: int, max_refs: int) -> tuple[int, str]:
    """``fit_block_size`` given ``count(bs)``, the references at block size ``bs``, and
    ``top``, the longest prompt (a streamed trace counts every candidate size in one pass)."""
    asked = bs
    n = count(bs)
    if n <= max_refs:
        return bs, ""
    while n > max_refs and bs < 2 * top:  # past the longest prompt every call has ≤ 2 refs
        bs *= 2
        n = count(bs)
    if n > max_refs:
        raise UsageError(
            f"the trace needs {n:,} block references even with one block per prompt; "
            f"raise --max-block-refs above {max_refs:,}"
        )
    first = count(asked)
    return bs, (
        f"re-blocked from {asked} to {bs} tokens: {first:,} block references exceed the "
        f"budget of {max_refs:,} (--max-block-refs); {n:,} at {bs}"
    )


def _native_block_size(df: pl.DataFrame, trace: Trace) -> int:
    sizes = df["block_size_tokens"].unique().drop_nulls()
    if sizes.len() != 1:
        r = int(df["block_size_tokens"].ne_missing(df["block_size_tokens"][0]).arg_max())
        raise InputError(
            trace.meta.get("path", "<trace>"),
            f"expected one block size for the whole file, got {sorted(sizes.to_list())}",
            row=r,
            field="block_size_tokens",
        )
    return int(sizes[0])


def _multi_session(candidate, ids, ref_off, sessions) -> np.ndarray:
    """Keep as shared only the prefix blocks that two or more sessions actually use."""
    if not candidate.any():
        return candidate
    return _multi_kernel(candidate, ids, ref_off, sessions)


@nb.njit(cache=True)
def _multi_kernel(candidate, ids, ref_off, sessions):  # pragma: no cover (compiled)
    first = np.full(candidate.size, -1, np.int64)
    multi = np.zeros(candidate.size, np.bool_)
    for k in range(ref_off.size - 1):
        for r in range(ref_off[k], ref_off[k + 1]):
            b = ids[r]
            if candidate[b]:
                if first[b] < 0:
                    first[b] = sessions[k]
                elif first[b] != sessions[k]:
                    multi[b] = True
    return multi


def _chains(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(chain, agent) ids per call: an agent keeps one context until it compacts (SEED-6)."""
    agent = pl.col("agent_id").fill_null("")
    epoch = pl.col("is_compaction").cast(pl.Int64).cum_sum().over(["session_id", agent])
    key = df.select(pl.col("session_id"), agent, epoch.alias("epoch"))
    ranks = key.select(
        pl.struct(pl.all()).rank("dense").alias("chain"),
        pl.struct("session_id", "agent_id").rank("dense").alias("agent"),
    )
    return (
        ranks["chain"].to_numpy().astype(np.int64) - 1,
        ranks["agent"].to_numpy().astype(np.int64) - 1,
    )


@nb.njit(cache=True)
def _synth_kernel(
    order, chain, n_blk, n_read, write_pos, ref_off, spt, sh_base, id0, out
):  # pragma: no cover
    """Per chain, a position keeps its block until a later call rewrites it."""
    cur = np.full(int(n_blk.max()) + 1 if n_blk.size else 1, -1, np.int64)
    last_chain = -1
    next_id = id0
    hi = 0  # positions >= hi are unset
    for k in order:
        if chain[k] != last_chain:
            cur[:hi] = -1
            hi = 0
            last_chain = chain[k]
        r = ref_off[k]
        for j in range(n_read[k]):
            if j < spt[k]:
                out[r] = sh_base[k] + j
            else:
                if cur[j] < 0:  # reused per the trace but never written in this chain: new block
                    cur[j] = next_id
                    next_id += 1
                out[r] = cur[j]
            r += 1
        for j in range(write_pos[k], n_blk[k]):
            if j < spt[k]:
                out[r] = sh_base[k] + j
            else:
                cur[j] = next_id
                out[r] = next_id
                next_id += 1
            r += 1
        if hi > n_blk[k]:  # positions past the prompt are gone
            cur[n_blk[k] : hi] = -1
        hi = n_blk[k]
    return next_id
