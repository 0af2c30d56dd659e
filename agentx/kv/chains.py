"""Exact LRU tiers of a trace without hashes, from its chains alone: no block stream in memory.

Without ``block_hashes`` a block is a position of a chain (session, agent, compaction epoch)
until a call rewrites it (agentx.kv.blocks), so the chain's positions are the only state a
block needs: its last reference time and its tokens. A call reads its chain's prefix and
writes on from there, so a chain holds two runs of positions (the one its last call read and
the one it wrote), each with one time: the state is those runs, not a time per block, and a
call costs its runs (a 1 M-call trace at 211 blocks a call: 0.39 s against 1.03 s with a time
per block). The kernel walks the calls in time order
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
        agentx.kv.blocks.Geometry except ``base``): returns ``acc`` (n, 7) int32 (int64
        when a prompt ``n_in`` reaches 2^31 tokens: a call's counts never pass it), per call
        tokens hit in HBM/DRAM/SSD, recompute tokens, SSD-load, DRAM|SSD-load and created
        block tokens (columns A_*). Any split of the calls into consecutive batches gives
        exactly the rows one whole batch gives. ``st.glob`` holds the running counters
        (read blocks per tier G_BLK+0..3, distinct blocks G_DISTINCT).
    base[k]: the call's chain's first slot in the position pool; the chain's positions are
        base .. base + (its longest prompt in blocks) - 1, disjoint from every other live
        chain's. Shared-prefix blocks live at sh_base[k] + j (j < spt[k]) in a separate pool.
    st.release(bases): chains that have ended (no later call) give their slots back;
        their blocks stay in the cache (they still age out), only the slots can be reused.
    st.grow(pool=..., n_shared=...): enlarge either pool (never shrinks).
    chain_outcomes(g, caps_tokens) -> (acc, glob): the whole trace (one chain per region).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from agentx.errors import CapacityError, UsageError
from agentx.kv.blocks import Geometry
from agentx.kv.chain_ops import CHUNK, NOW, REC, ROOM, SC_FIELDS, _feed, fenwick, release

WINDOW = 1 << 20


class ChainState:
    """The kernel's whole state: per-position and shared-block last-use times and tokens, the
    Fenwick window over reference times, ``now`` and the global counters."""

    def __init__(self, caps_tokens, block_size_tokens: int, pool: int = 0, n_shared: int = 0,
                 window: int = WINDOW, horizon_tokens: float | None = None,
                 record: bool = False) -> None:  # fmt: skip
        self.caps = np.maximum.accumulate(np.asarray(caps_tokens, np.float64))
        # blocks deeper than this are dropped (found nowhere ever after): at least the largest
        # tier; larger (up to inf) keeps distances exact for larger capacities (kv-curve)
        self.horizon = max(self.caps[2], self.caps[2] if horizon_tokens is None else horizon_tokens)
        self.rec = np.zeros((1 << 16 if record else 0, 6), np.int64)  # runs (chain_ops R_*)
        self.bs = int(block_size_tokens)
        if self.bs >= 2**31:
            raise UsageError(f"block size {self.bs} tokens is past the chain kernel's 2^31")
        self.window = max(int(window), 4)
        # int32 state: window times < 2^31 (_widen), block tokens <= the block size
        self.pw = np.zeros(0, np.int32)  # tokens of the block at each position
        # at a chain's base: its two runs (chain_ops B_END, A_END, TA, TB; KA, KB)
        self.cs = np.zeros(0, np.int32)
        self.ck = np.zeros(0, np.int64)
        self.stime = np.full(0, -1, np.int32)
        self.sw = np.zeros(0, np.int32)
        self.grow(pool, n_shared)
        size = max(self.window, pool // 2)  # renumbering costs O(pool): once per pool/2 refs
        # tokens at each time of the window: a block's tokens (<= the block size) fit int32,
        # half the cache lines of the window's cold end
        self.wdt = np.int32
        self.wt = np.zeros(size, self.wdt)
        self.bf = np.zeros(size // CHUNK + 2, np.int64)  # Fenwick tree over chunk sums
        self.remap = np.empty(size, np.int32)  # compaction's renumbering buffer
        # now, window's total tokens, chunks in tree, rec rows, HBM boundary (chain_ops B0, S0)
        self.sc = np.zeros(SC_FIELDS, np.int64)
        self.glob = np.zeros(5, np.int64)

    def grow(self, pool: int | None = None, n_shared: int | None = None) -> None:
        def more(a, n, fill):
            return a if n is None or n <= a.size else np.concatenate((a, np.full(n - a.size, fill, a.dtype)))  # fmt: skip

        n = None if pool is None else max(pool, self.pool)
        self.pw = more(self.pw, n, 0)
        if n is not None and 4 * n > self.cs.size:  # new rows: no call yet, no times
            rows = np.tile(np.array([0, 0, -1, -1], np.int32), n - self.cs.size // 4)
            self.cs = np.concatenate((self.cs, rows))
        self.ck = more(self.ck, None if n is None else 2 * n, 0)
        self.stime, self.sw = more(self.stime, n_shared, -1), more(self.sw, n_shared, 0)

    @property
    def pool(self) -> int:
        """Chain positions the state holds."""
        return self.pw.size

    def _widen(self, need: int) -> None:
        size = max(self.window, self.pool // 2, 4)  # renumbering costs O(pool)
        live = int(self.sc[NOW])
        while size < ROOM * (live + need):
            size *= 2
        if size >= 2**31:
            raise CapacityError(f"the KV window needs {size:,} references, past 2^31")
        wt = np.zeros(size, self.wdt)
        wt[:live] = self.wt[:live]
        self.wt, self.remap = wt, np.empty(size, np.int32)
        self.bf = np.zeros(size // CHUNK + 2, np.int64)
        fenwick(self.wt, self.bf, self.sc)

    def release(self, bases) -> None:
        release(self.cs, np.asarray(bases, np.int64))

    def feed(self, base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base, last=None) -> np.ndarray:  # fmt: skip
        # the geometry's columns go in as they are when all are int32 (agentx.kv.geometry);
        # else all as int64: two compiled variants of the kernel, no 80 MB copy per column
        geo = (n_blk, n_read, write_pos, n_in, reused, spt, sh_base)
        dt = np.int32 if all(np.asarray(a).dtype == np.int32 for a in geo) else np.int64
        cols = [np.ascontiguousarray(base, np.int64), *(np.ascontiguousarray(a, dt) for a in geo)]
        last = np.zeros(cols[0].size, np.bool_) if last is None else np.asarray(last, np.bool_)
        base, n_blk, _, _, _, _, spt, sh_base = cols
        lo, hi, sh_hi = _bounds(base, n_blk, spt, sh_base)  # one pass, no temporaries
        if lo < 0 or hi > self.pool:
            raise UsageError(f"chain positions outside the pool of {self.pool} (grow it)")
        if sh_hi > self.stime.size:
            raise UsageError(f"shared blocks outside the pool of {self.stime.size} (grow it)")
        # a call's counts never pass its prompt: 32 bits unless a prompt reaches 2^31 tokens
        # (half the memory and first-touch page zeroing of (calls, 7) int64)
        wide = base.size and int(cols[4].max()) >= 2**31
        acc = np.zeros((base.size, 7), np.int64 if wide else np.int32)
        k = 0
        while k < base.size:
            k = _feed(
                *cols, last, k, acc, self.bs, self.caps, self.horizon, self.pw, self.cs,
                self.ck, self.stime, self.sw, self.wt, self.bf, self.remap, self.sc,
                self.glob, self.rec,
            )  # fmt: skip
            if k == base.size:
                break
            need = int(n_blk[k] + cols[2][k] - cols[3][k])
            if self.rec.shape[0] and self.sc[REC] + need > self.rec.shape[0]:
                rate = self.sc[REC] / max(k, 1)  # rows per call so far: grow once, to the end
                more = np.zeros((int(rate * base.size * 1.1) + 2 * need, 6), np.int64)
                more[: self.sc[REC]] = self.rec[: self.sc[REC]]
                self.rec = more
            else:  # compacted, yet too full: a larger window (same contents)
                self._widen(need)
        return acc

    def records(self) -> np.ndarray:
        """The runs of reused blocks so far (``record=True``): rows of chain_ops R_* columns."""
        return self.rec[: self.sc[REC]]


def chain_outcomes(g: Geometry, caps_tokens, window: int = WINDOW, by_row: int = 0, sums=None):
    """Per call (time order) ``acc`` columns and the global counters, at capacities
    ``caps_tokens`` (HBM, DRAM, SSD; inclusive, made cumulative). ``window``: first size of
    the Fenwick window in references (grown as needed; any value gives the same result).

    ``by_row`` > 0: ``acc`` in the trace's row order instead (row ``g.row[k]`` holds call k's).
    The kernel then walks the calls in time-ordered batches of ``by_row`` and a worker thread
    puts each finished batch at its rows while the kernel goes on with the next, on the core
    the kernel leaves idle, instead of a streaming replay's main thread gathering them per
    partition (agentx.kv.rows) while the calls.parquet writer holds the other core.

    ``sums``: an int64 array of 7 that receives each ``acc`` column's sum; with ``by_row``
    the worker adds each batch's as it puts it (the main thread would walk the whole
    strided outcome after the kernel for them: 0.17 s at 10 M calls)."""
    if by_row <= 0:
        st, acc = chain_pass(g, caps_tokens, window=window)
        if sums is not None:
            sums[:] = acc.sum(axis=0, dtype=np.int64)
        return acc, st.glob
    from concurrent.futures import ThreadPoolExecutor

    st, base, last = _state(g, caps_tokens, window=window)
    n = base.size
    # the width every batch's acc takes (ChainState.feed): 32 bits unless a prompt is 2^31
    wide = n and int(np.asarray(g.n_in).max()) >= 2**31
    out = np.empty((n, 7), np.int64 if wide else np.int32)
    geo = (g.n_blk, g.n_read, g.write_pos, g.n_in, g.reused, g.spt, g.sh_base)
    sums = np.zeros(7, np.int64) if sums is None else sums
    sums[:] = 0
    with ThreadPoolExecutor(max_workers=1) as put:
        jobs = []
        for a in range(0, n, by_row):
            b = min(n, a + by_row)
            acc = st.feed(base[a:b], *(x[a:b] for x in geo), last[a:b])
            jobs.append(put.submit(_put_rows, acc, g.row[a:b], out, sums))
        for job in jobs:
            job.result()
    return out, st.glob


def chain_pass(g: Geometry, caps_tokens, **state) -> tuple[ChainState, np.ndarray]:
    """The whole trace through one ChainState (``state``: its keyword options); returns the
    state (counters, records) and the per-call ``acc``."""
    st, base, last = _state(g, caps_tokens, **state)
    acc = st.feed(base, g.n_blk, g.n_read, g.write_pos, g.n_in, g.reused, g.spt, g.sh_base, last)  # fmt: skip
    return st, acc


def _state(g: Geometry, caps_tokens, **state) -> tuple[ChainState, np.ndarray, np.ndarray]:
    """A ChainState for the whole trace, each call's chain slot and whether it is the chain's
    last call. Each chain's positions live at base .. + its longest prompt in blocks, in a
    slot that a chain seen later reuses once this one has ended: the pool spans the live
    chains only."""
    n_chain = int(g.chain.max()) + 1 if g.chain.size else 0
    base, last, pool = _slots(g.chain, g.n_blk, n_chain)
    return ChainState(caps_tokens, g.bs, pool, g.n_shared, **state), base, last


@nb.njit(cache=True)
def _slots(chain, n_blk, n_chain):  # pragma: no cover (compiled)
    """Per call its chain's slot and whether it is the chain's last call; a slot holds the
    chain's longest prompt, in power-of-two sizes, a free list per size (linked through the
    chains that held them)."""
    n = chain.size
    end = np.full(n_chain, -1, np.int64)
    width = np.zeros(n_chain, np.int64)
    for k in range(n):
        end[chain[k]] = k
        width[chain[k]] = max(width[chain[k]], n_blk[k])
    slot = np.full(width.size, -1, np.int64)
    nxt = np.full(width.size, -1, np.int64)
    head = np.full(64, -1, np.int64)
    base = np.empty(n, np.int64)
    last = np.zeros(n, np.bool_)
    top = 0
    for k in range(n):
        c = chain[k]
        if slot[c] < 0:  # the chain's first call: a slot of its size class
            cls = _size_class(width[c])
            f = head[cls]
            if f >= 0:
                slot[c], head[cls] = slot[f], nxt[f]
            else:
                slot[c], top = top, top + (1 << cls)
        base[k] = slot[c]
        if end[c] == k:
            last[k] = True
            cls = _size_class(width[c])
            nxt[c], head[cls] = head[cls], c
    return base, last, top


@nb.njit(cache=True, inline="always")
def _size_class(width):  # pragma: no cover (compiled)
    """The exponent of the least power of two at or above ``width``: taken at a chain's first
    and last call only (taken at every call, it made the 10 M-call trace's pass 0.23 s, not
    0.09 s)."""
    cls = 0
    while (1 << cls) < width:
        cls += 1
    return cls


@nb.njit(cache=True)
def _bounds(base, n_blk, spt, sh_base):  # pragma: no cover (compiled)
    """Smallest base, largest chain position end and largest shared block end of a batch."""
    lo, hi, sh_hi = 0, 0, 0
    for k in range(base.size):
        lo = min(lo, base[k])
        hi = max(hi, base[k] + n_blk[k])
        sh_hi = max(sh_hi, sh_base[k] + min(spt[k], n_blk[k]))
    return lo, hi, sh_hi


@nb.njit(cache=True, nogil=True)
def _put_rows(acc, row, out, sums):  # pragma: no cover (compiled)
    """Each call's ``acc`` row at its trace row ``row[k]`` of ``out``, its values added to
    ``sums`` (one worker: batches are put one after the other)."""
    for k in range(row.size):
        for c in range(acc.shape[1]):
            v = acc[k, c]
            out[row[k], c] = v
            sums[c] += v
