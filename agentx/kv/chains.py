"""Exact LRU tiers of a trace without hashes, from its chains alone: no block stream in memory.

Without ``block_hashes`` a block is a position of a chain (session, agent, compaction epoch)
until a call rewrites it (agentx.kv.blocks), so the chain's positions are the only state a
block needs: its last reference time and its tokens. The kernel walks the calls in time order
and gives every call its tier outcome directly, with the same reuse distances as
``agentx.kv.stack`` (Mattson's stack algorithm, tokens of distinct blocks touched since the
previous reference), computed once per *run*: references of a call whose previous references
were consecutive share one distance (docs/kv-tiers.md).

Live state only: a block deeper than the largest tier is found nowhere now and at every later
reference (depths only grow until the block is used again), so the time axis before the
*horizon* (the shallowest such depth) is dropped whenever the Fenwick window fills.

API (resumable: the state persists between calls, so a streaming caller feeds batches)::

    st = ChainState(caps_tokens, block_size_tokens, pool=P, n_shared=S)
    acc = st.feed(base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base)
        one batch of calls in time order (int64 arrays, one entry per call, as in
        agentx.kv.blocks.Geometry except ``base``): returns ``acc`` (n, 7) int64, per call
        tokens hit in HBM/DRAM/SSD, recompute tokens, SSD-load, DRAM|SSD-load and created
        block tokens (columns A_*). Any split of the calls into consecutive batches gives
        exactly the rows one whole batch gives. ``st.glob`` holds the running counters
        (read blocks per tier G_BLK+0..3, distinct blocks G_DISTINCT).
    base[k]: the call's chain's first slot in the position pool; the chain's positions are
        base .. base + (its longest prompt in blocks) - 1, disjoint from every other live
        chain's. Shared-prefix blocks live at sh_base[k] + j (j < spt[k]) in a separate pool.
    st.release(bases, widths): chains that have ended (no later call) give their slots back;
        their blocks stay in the cache (they still age out), only the slots can be reused.
    st.grow(pool=..., n_shared=...): enlarge either pool (never shrinks).
    chain_outcomes(g, caps_tokens) -> (acc, glob): the whole trace (one chain per region).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from agentx.errors import UsageError
from agentx.kv.blocks import Geometry
from agentx.kv.chain_ops import CHUNK, _call, _rebuild

WINDOW = 1 << 20


class ChainState:
    """The kernel's whole state: per-position and shared-block last-use times and tokens, the
    Fenwick window over reference times, ``now`` and the global counters."""

    def __init__(self, caps_tokens, block_size_tokens: int, pool: int = 0, n_shared: int = 0,
                 window: int = WINDOW) -> None:  # fmt: skip
        self.caps = np.maximum.accumulate(np.asarray(caps_tokens, np.float64))
        self.bs = int(block_size_tokens)
        self.window = max(int(window), 4)
        self.ptime = np.full(0, -1, np.int64)  # window time of each position's last reference
        self.pw = np.zeros(0, np.int64)  # tokens of the block at each position
        self.phi = np.zeros(0, np.int64)  # at a chain's base: positions it has set
        self.stime = np.full(0, -1, np.int64)
        self.sw = np.zeros(0, np.int64)
        self.grow(pool, n_shared)
        size = max(self.window, pool // 2)  # renumbering costs O(pool): once per pool/2 refs
        self.wt = np.zeros(size, np.int64)  # tokens at each time of the window
        self.bf = np.zeros(size // CHUNK + 2, np.int64)  # Fenwick tree over chunk sums
        self.now = 0
        self.glob = np.zeros(5, np.int64)

    def grow(self, pool: int | None = None, n_shared: int | None = None) -> None:
        def more(a, n, fill):
            return a if n is None or n <= a.size else np.concatenate((a, np.full(n - a.size, fill, np.int64)))  # fmt: skip

        self.ptime, self.pw, self.phi = (more(a, pool, f) for a, f in ((self.ptime, -1), (self.pw, 0), (self.phi, 0)))  # fmt: skip
        self.stime, self.sw = more(self.stime, n_shared, -1), more(self.sw, n_shared, 0)

    def release(self, bases, widths) -> None:
        _release(self.ptime, self.phi, np.asarray(bases, np.int64), np.asarray(widths, np.int64))

    def feed(self, base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base) -> np.ndarray:
        cols = [np.ascontiguousarray(a, np.int64) for a in (base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base)]  # fmt: skip
        base, n_blk, _, _, _, _, spt, sh_base = cols
        if base.size and (base.min() < 0 or (base + n_blk).max() > self.ptime.size):
            raise UsageError(f"chain positions outside the pool of {self.ptime.size} (grow it)")
        if spt.size and (sh_base + np.minimum(spt, n_blk)).max() > self.stime.size:
            raise UsageError(f"shared blocks outside the pool of {self.stime.size} (grow it)")
        acc, self.now, self.wt, self.bf = _feed(
            *cols, self.bs, self.caps, self.window, self.ptime, self.pw, self.phi,
            self.stime, self.sw, self.wt, self.bf, self.now, self.glob,
        )  # fmt: skip
        return acc


def chain_outcomes(g: Geometry, caps_tokens, window: int = WINDOW):
    """Per call (time order) ``acc`` columns and the global counters, at capacities
    ``caps_tokens`` (HBM, DRAM, SSD; inclusive, made cumulative). ``window``: first size of
    the Fenwick window in references (grown as needed; any value gives the same result)."""
    # each chain's positions live at cbase[chain] .. + its longest prompt in blocks
    n_chain = int(g.chain.max()) + 1 if g.chain.size else 0
    width = np.zeros(n_chain, np.int64)
    np.maximum.at(width, g.chain, g.n_blk)
    cbase = np.cumsum(width) - width
    st = ChainState(caps_tokens, g.bs, int(width.sum()), g.n_shared, window)
    acc = st.feed(cbase[g.chain], g.n_blk, g.n_read, g.write_pos, g.n_in, g.reused, g.spt, g.sh_base)  # fmt: skip
    return acc, st.glob


@nb.njit(cache=True)
def _release(ptime, phi, bases, widths):  # pragma: no cover (compiled)
    for i in range(bases.size):
        ptime[bases[i] : bases[i] + widths[i]] = -1
        phi[bases[i]] = 0


@nb.njit(cache=True)
def _feed(
    base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base,
    bs, caps, window, ptime, pw, phi, stime, sw, wt, bf, now, glob,
):  # fmt: skip  # pragma: no cover (compiled)
    n_calls = base.size
    acc = np.zeros((n_calls, 7), np.int64)
    floor = max(window, ptime.size // 2)
    cap = caps[2]
    for k in range(n_calls):
        cb = base[k]
        nref = n_read[k] + n_blk[k] - write_pos[k]
        if now + nref > wt.size:
            now, wt, bf = _rebuild(wt, now, cap, nref, ptime, stime, floor)
        t = now
        now += nref
        _call(k, t, cb, n_read[k], write_pos[k], n_blk[k], n_in[k], reused[k], spt[k],
              sh_base[k], bs, caps, ptime, pw, stime, sw, wt, bf, acc, glob)  # fmt: skip
        # positions past this prompt are gone from the chain (their blocks age out)
        for j in range(n_blk[k], phi[cb]):
            ptime[cb + j] = -1
        phi[cb] = n_blk[k]
    return acc, now, wt, bf
