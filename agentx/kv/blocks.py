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

from agentx.kv.budget import fit_block_size, fit_counted, ref_count  # noqa: F401 (re-exported)
from agentx.kv.geometry import (  # noqa: F401 (re-exported: the block model's public names)
    MAX_REFS,
    ORDER,
    Geometry,
    geometry,
)
from agentx.kv.hashes import hash_ids
from agentx.traces.io import Trace


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
    # the block stream keeps int64 throughout (its policies multiply ids by call counts)
    n_blk, n_read, write_pos, spt, sh_base, n_in, reused = (
        np.asarray(a, np.int64) for a in (g.n_blk, g.n_read, g.write_pos, g.spt, g.sh_base, g.n_in, g.reused)
    )  # fmt: skip
    df, bs, ref_off = trace.calls, g.bs, g.ref_off
    row, chain, agent = g.row.astype(np.int64), g.chain.astype(np.int64), g.agent
    out = np.empty(int(ref_off[-1]), np.int64)
    if g.use_hashes:
        geo = (n_blk, n_read, write_pos, ref_off, spt)
        n_blocks, n_private = hash_ids(df, row, g.scope, bs // g.native, geo, g.spt_tokens, out)
        shared = np.arange(n_blocks) >= n_private
    else:
        order = np.lexsort((np.arange(len(chain)), chain))
        geo = (n_blk, n_read, write_pos, ref_off, spt, sh_base)
        n_blocks = int(_synth_kernel(order, chain, *geo, g.n_shared, out))
        shared = np.arange(n_blocks) < g.n_shared
    sessions = g.session  # dense session ranks per call, time order
    shared = _multi_session(shared, out, ref_off, sessions)
    return BlockStream(
        block_size_tokens=bs,
        block_size_note=g.note,
        row=row,
        ref_off=ref_off,
        n_read=n_read,
        write_pos=write_pos,
        input_tokens=n_in,
        reused_tokens=reused,
        ref_block=out,
        n_blocks=n_blocks,
        shared=shared,
        chain=chain,
        agent=agent,
        compaction=df["is_compaction"].to_numpy()[row],
    )


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
