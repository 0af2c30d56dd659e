"""A paged KV pool with a prefix cache and offload tiers, as numba pieces of the agentic kernel.

The pool holds ``pool_blocks`` blocks of the trace's block size (vLLM's block manager with
automatic prefix caching). A block is named by its id in ``agentx.kv.blocks`` (trace hashes,
shared system + tool prefixes under one id, SEED-7). State per block: its tier (``loc``) and
how many running sequences pin it (``ref``). Unpinned HBM blocks stay cached on an LRU list
and are evicted from its head when a block is needed; a sequence frees its blocks tail-first
(reverse order, as vLLM does) so a chain's leading blocks, the ones every later call reads,
are evicted last. Evicted blocks are demoted to host DRAM, then SSD, when offload is on
(each an LRU list with its capacity); demotion writes are asynchronous (no call time).
Generated tokens' blocks are anonymous (``anon``): the next call of a session names the
previous answer inside its own new blocks, so they are never read by id.

State is one int64 array ``st`` (counters) plus per-block arrays; lists are doubly linked
through ``prv``/``nxt`` (a block is on at most one list).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NONE, HBM, DRAM, SSD = 0, 1, 2, 3
# Counters in ``st``: pool size, HBM blocks holding an id, anonymous blocks, tier capacities,
# evictions, list heads/tails/lengths per tier (index 1..3).
S_POOL, S_CACHED, S_ANON, S_CAP_DRAM, S_CAP_SSD, S_EVICT = range(6)
S_HEAD, S_TAIL, S_LEN = 6, 10, 14  # + tier
S_IN_ORDER = 18  # 1: free a sequence's blocks in reference order (plain LRU, agentx.kv's stack)
N_ST = 19


def new_state(
    n_blocks: int, pool_blocks: int, dram_blocks: int, ssd_blocks: int, in_order: bool = False
):
    st = np.zeros(N_ST, np.int64)
    st[S_IN_ORDER] = int(in_order)
    st[S_POOL] = pool_blocks
    st[S_CAP_DRAM] = dram_blocks
    st[S_CAP_SSD] = ssd_blocks
    st[S_HEAD : S_HEAD + 4] = -1
    st[S_TAIL : S_TAIL + 4] = -1
    loc = np.zeros(n_blocks, np.int8)
    ref = np.zeros(n_blocks, np.int32)
    prv = np.full(n_blocks, -1, np.int64)
    nxt = np.full(n_blocks, -1, np.int64)
    return st, loc, ref, prv, nxt


@njit(cache=True)
def _unlink(st, prv, nxt, b, tier):
    p, q = prv[b], nxt[b]
    if p >= 0:
        nxt[p] = q
    else:
        st[S_HEAD + tier] = q
    if q >= 0:
        prv[q] = p
    else:
        st[S_TAIL + tier] = p
    prv[b] = -1
    nxt[b] = -1
    st[S_LEN + tier] -= 1


@njit(cache=True)
def _push(st, prv, nxt, b, tier):
    t = st[S_TAIL + tier]
    prv[b] = t
    nxt[b] = -1
    if t >= 0:
        nxt[t] = b
    else:
        st[S_HEAD + tier] = b
    st[S_TAIL + tier] = b
    st[S_LEN + tier] += 1


@njit(cache=True)
def free_blocks(st):
    return st[S_POOL] - st[S_CACHED] - st[S_ANON]


@njit(cache=True)
def used_blocks(st):
    """Blocks held by running sequences (pinned ids and anonymous growth): vLLM's KV usage."""
    return st[S_CACHED] - st[S_LEN + HBM] + st[S_ANON]


@njit(cache=True)
def _demote(st, loc, prv, nxt, b, tier):
    """Block ``b`` leaves ``tier - 1``: keep it in ``tier`` if that tier exists, pushing that
    tier's own LRU block one tier further down when it is full (a loop: numba's cache does
    not reload recursive functions safely)."""
    while True:
        cap = st[S_CAP_DRAM] if tier == DRAM else st[S_CAP_SSD] if tier == SSD else 0
        if cap <= 0:
            loc[b] = NONE
            return
        v = -1
        if st[S_LEN + tier] >= cap:
            v = st[S_HEAD + tier]
            _unlink(st, prv, nxt, v, tier)
        loc[b] = tier
        _push(st, prv, nxt, b, tier)
        if v < 0:
            return
        b = v
        tier += 1


@njit(cache=True)
def make_room(st, loc, prv, nxt, k):
    """Evict LRU unpinned blocks until ``k`` blocks are free; False if pinned blocks prevent it."""
    while free_blocks(st) < k:
        b = st[S_HEAD + HBM]
        if b < 0:
            return False
        _unlink(st, prv, nxt, b, HBM)
        st[S_CACHED] -= 1
        st[S_EVICT] += 1
        _demote(st, loc, prv, nxt, b, DRAM)
    return True


@njit(cache=True)
def lookup(refs, r0, n_read, loc):
    """Leading blocks of a prompt found in HBM, then (contiguously) in DRAM and on SSD."""
    g = d = s = 0
    j = 0
    while j < n_read and loc[refs[r0 + j]] == HBM:
        g += 1
        j += 1
    while j < n_read and loc[refs[r0 + j]] >= DRAM:
        if loc[refs[r0 + j]] == DRAM:
            d += 1
        else:
            s += 1
        j += 1
    return g, d, s


@njit(cache=True)
def _pin_resident(st, loc, ref, prv, nxt, refs, lo, hi):
    """Pin the HBM blocks of refs[lo:hi]; return how many others need a free block."""
    need = 0
    for r in range(lo, hi):
        b = refs[r]
        if loc[b] == HBM:
            if ref[b] == 0:
                _unlink(st, prv, nxt, b, HBM)
            ref[b] += 1
        elif ref[b] == 0:
            ref[b] = -1  # counted once even if named twice
            need += 1
    return need


@njit(cache=True)
def _unpin_range(st, loc, ref, prv, nxt, refs, lo, hi):
    step = 1 if st[S_IN_ORDER] else -1  # tail first: leading blocks stay longest
    r = lo if step == 1 else hi - 1
    for _ in range(hi - lo):
        b = refs[r]
        r += step
        if loc[b] == HBM:
            ref[b] -= 1
            if ref[b] == 0:
                _push(st, prv, nxt, b, HBM)


@njit(cache=True)
def pin_call(st, loc, ref, prv, nxt, refs, spans, extra):
    """Give a sequence all its prompt blocks (``spans``: two [lo, hi) ranges of ``refs``) plus
    ``extra`` anonymous blocks. Blocks in HBM are pinned first so eviction cannot take them;
    the rest (from DRAM/SSD or computed) take free blocks. False (nothing changed) if the
    pinned blocks of running sequences leave too little room."""
    need = extra
    for q in range(2):
        need += _pin_resident(st, loc, ref, prv, nxt, refs, spans[2 * q], spans[2 * q + 1])
    if not make_room(st, loc, prv, nxt, need):
        for q in range(1, -1, -1):
            lo, hi = spans[2 * q], spans[2 * q + 1]
            for r in range(lo, hi):
                if ref[refs[r]] == -1:
                    ref[refs[r]] = 0
            _unpin_range(st, loc, ref, prv, nxt, refs, lo, hi)
        return False
    for q in range(2):
        for r in range(spans[2 * q], spans[2 * q + 1]):
            b = refs[r]
            if ref[b] == -1:
                if loc[b] >= DRAM:
                    _unlink(st, prv, nxt, b, loc[b])
                loc[b] = HBM
                ref[b] = 1
                st[S_CACHED] += 1
    st[S_ANON] += extra
    return True


@njit(cache=True)
def unpin_call(st, loc, ref, prv, nxt, refs, spans, anon):
    """A sequence leaves (done or preempted): its blocks become cached, its growth is freed."""
    for q0 in range(2):
        q = q0 if st[S_IN_ORDER] else 1 - q0
        _unpin_range(st, loc, ref, prv, nxt, refs, spans[2 * q], spans[2 * q + 1])
    st[S_ANON] -= anon
