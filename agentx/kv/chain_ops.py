"""Compiled steps of the chain kernel (agentx.kv.chains): the Fenwick window and one call.

The window holds, at each reference time, the tokens of the block whose latest reference it
is (0 once the block moved on); a reuse distance is the window's sum between two times. The
tree sums ``CHUNK`` times per leaf so it stays in cache; a query adds fewer than ``CHUNK``
plain times.
"""

from __future__ import annotations

import numba as nb
import numpy as np

NOWHERE = 3
LIVE, NEW, DEAD = 0, 1, -2  # DEAD: a block behind the horizon (its time slot is gone)
# accumulator columns per call (time order)
A_HIT = 0  # 0..3: reused-prefix tokens read from HBM, DRAM, SSD, nowhere (recompute)
A_SSD_LOAD, A_LOWER_LOAD, A_CREATED = 4, 5, 6  # block tokens: SSD reads, DRAM|SSD reads, misses
# global counters
G_BLK = 0  # 0..3: read blocks per tier
G_DISTINCT = 4
CHUNK = 64  # window times per Fenwick leaf: the tree stays in cache, a query adds < 64 more


@nb.njit(cache=True)
def _tier(d, caps):  # pragma: no cover (compiled)
    for i in range(3):
        if d <= caps[i]:
            return i
    return NOWHERE


@nb.njit(cache=True)
def _rebuild(wt, used, cap, need, ptime, stime, floor):  # pragma: no cover (compiled)
    """Compact the window: times deeper than ``cap`` (before the horizon) become DEAD and
    times with no block left are dropped; ``ptime``/``stime`` are renumbered in place. Only
    weights decide a distance, so closing the gaps keeps every distance. Returns the live
    count, the new weights and a Fenwick tree (point column) built in linear time."""
    total = 0
    for i in range(used):
        total += wt[i]
    h = 0
    while h < used and total > cap:
        total -= wt[h]
        h += 1
    new = np.full(used, DEAD, np.int64)
    live = 0
    for i in range(h, used):
        if wt[i] != 0:
            new[i] = live
            live += 1
    size = max(floor, 4)
    while size < 4 * (live + need):
        size *= 2
    nwt = np.zeros(size, np.int64)
    for i in range(h, used):
        if wt[i] != 0:
            nwt[new[i]] = wt[i]
    for arr in (ptime, stime):
        for q in range(arr.size):
            if arr[q] >= 0:
                arr[q] = new[arr[q]]
    bf = np.zeros(size // CHUNK + 2, np.int64)  # Fenwick tree over chunk sums
    for y in range(live):
        bf[y // CHUNK + 1] += nwt[y]
    n = bf.size - 1
    for i in range(1, n + 1):  # linear build: every node passes its sum up
        j = i + (i & -i)
        if j <= n:
            bf[j] += bf[i]
    return live, nwt, bf


@nb.njit(cache=True, inline="always")
def _fen_add(bf, c, v):  # pragma: no cover (compiled)
    i = c + 1
    while i < bf.size:
        bf[i] += v
        i += i & -i


@nb.njit(cache=True, inline="always")
def _pfx(bf, wt, i):  # pragma: no cover (compiled)
    """Tokens at window times 0..i-1: whole chunks from the Fenwick tree, the rest summed."""
    c = i // CHUNK
    s = 0
    x = c
    while x > 0:
        s += bf[x]
        x -= x & -x
    for y in range(c * CHUNK, i):
        s += wt[y]
    return s


@nb.njit(cache=True, inline="always")
def _set(bf, wt, lo, n, v, d):  # pragma: no cover (compiled)
    """Times lo..lo+n-1 now hold v tokens each (they changed by d each)."""
    wt[lo : lo + n] = v
    hi = lo + n
    c = lo // CHUNK
    while c * CHUNK < hi:
        a = max(lo, c * CHUNK)
        z = min(hi, (c + 1) * CHUNK)
        _fen_add(bf, c, d * (z - a))
        c += 1


@nb.njit(cache=True, inline="always")
def _close(k, kind, p0, t0, n, w, is_read, rt, caps, bf, wt, acc, glob):  # pragma: no cover
    """A run of ``n`` references at times t0.. sharing one distance: query, move, account."""
    if n == 0:
        return
    tier = NOWHERE
    if kind == LIVE:
        tier = _tier(_pfx(bf, wt, t0) - _pfx(bf, wt, p0), caps)
        _set(bf, wt, p0, n, 0, -w)  # a time holds one block: it has moved on
    _set(bf, wt, t0, n, w, w)
    _account(k, tier, n, n * w, is_read, rt, acc, glob)


@nb.njit(cache=True, inline="always")
def _account(k, tier, n, tok, is_read, rt, acc, glob):  # pragma: no cover (compiled)
    if is_read == 1:
        acc[k, A_HIT + tier] += rt
        glob[G_BLK + tier] += n
        if tier == 2:
            acc[k, A_SSD_LOAD] += tok
        if tier == 1 or tier == 2:
            acc[k, A_LOWER_LOAD] += tok
    if tier == NOWHERE:
        acc[k, A_CREATED] += tok


@nb.njit(cache=True, inline="always")
def _shift(bf, wt, p0, t0, n):  # pragma: no cover (compiled)
    """Move the blocks at times p0.. to t0.. (p0 + n <= t0); returns their tokens."""
    tok = 0
    c_old = c_new = -1
    d_old = d_new = 0
    for x in range(n):
        v = wt[p0 + x]
        wt[p0 + x] = 0
        wt[t0 + x] = v
        tok += v
        c = (p0 + x) // CHUNK
        if c != c_old:
            if c_old >= 0:
                _fen_add(bf, c_old, -d_old)
            c_old, d_old = c, 0
        d_old += v
        c = (t0 + x) // CHUNK
        if c != c_new:
            if c_new >= 0:
                _fen_add(bf, c_new, d_new)
            c_new, d_new = c, 0
        d_new += v
    if c_old >= 0:
        _fen_add(bf, c_old, -d_old)
        _fen_add(bf, c_new, d_new)
    return tok


@nb.njit(cache=True, inline="always")
def _place(bf, wt, t0, pw, q0, n):  # pragma: no cover (compiled)
    """Put blocks of tokens pw[q0..q0+n) at times t0..; returns their tokens."""
    tok = 0
    c_new = -1
    d_new = 0
    for x in range(n):
        v = pw[q0 + x]
        wt[t0 + x] = v
        tok += v
        c = (t0 + x) // CHUNK
        if c != c_new:
            if c_new >= 0:
                _fen_add(bf, c_new, d_new)
            c_new, d_new = c, 0
        d_new += v
    if c_new >= 0:
        _fen_add(bf, c_new, d_new)
    return tok


@nb.njit(cache=True)
def _call(
    k,
    t,
    cb,
    nr,
    wp,
    nb,
    n_in_k,
    reused_k,
    spt_k,
    sh_base_k,
    bs,
    caps,
    ptime,
    pw,
    stime,
    sw,
    wt,
    bf,
    acc,
    glob,
):  # pragma: no cover (compiled)
    """One call's references at window times t..: reads of positions [0, nr), then writes of
    [wp, nb). Shared positions (< spt_k) go one by one, merged into runs where their previous
    uses were consecutive; private ones are scanned run by run (tight loops over the chain)."""
    # reads: shared positions
    r_n = r_t0 = r_p0 = r_w = r_kind = r_rt = 0
    last_p = -3
    for part in range(2):
        lo, hi = (0, min(nr, spt_k)) if part == 0 else (wp, min(nb, spt_k))
        is_read = 1 - part
        for j in range(lo, hi):
            ti = t + j if part == 0 else t + nr + j - wp
            b = sh_base_k + j
            p = stime[b]
            if p == -1:
                sw[b] = min(bs, n_in_k - j * bs)
                glob[G_DISTINCT] += 1
            w = sw[b]
            stime[b] = ti
            rt = min(bs, reused_k - j * bs) if is_read == 1 else 0
            kind = LIVE if p >= 0 else (NEW if p == -1 else DEAD)
            # (a block used twice in one call has its previous use inside the run: p < r_t0)
            if (
                r_n > 0
                and r_w == w
                and r_kind == kind
                and (kind != LIVE or (p == last_p + 1 and p < r_t0))
            ):
                r_n += 1
                r_rt += rt
            else:
                _close(k, r_kind, r_p0, r_t0, r_n, r_w, is_read, r_rt, caps, bf, wt, acc, glob)
                r_n, r_t0, r_p0, r_w, r_kind, r_rt = 1, ti, p, w, kind, rt
            last_p = p
        _close(k, r_kind, r_p0, r_t0, r_n, r_w, is_read, r_rt, caps, bf, wt, acc, glob)
        r_n = 0
        if part == 1:
            break
        # reads: private positions [spt, nr), run by run; a run's blocks may differ in size
        # (a distance is shared whatever the sizes), so old short blocks do not cut runs
        j = spt_k
        while j < nr:
            q = cb + j
            p = ptime[q]
            j1 = j + 1
            if p >= 0:
                while j1 < nr and ptime[cb + j1] == p + (j1 - j):
                    j1 += 1
                tier = _tier(_pfx(bf, wt, t + j) - _pfx(bf, wt, p), caps)
                tok = _shift(bf, wt, p, t + j, j1 - j)
            else:
                if p == -1:  # reused per the trace but never written in this chain: new
                    while j1 < nr and ptime[cb + j1] == -1:
                        j1 += 1
                    for x in range(j, j1):
                        pw[cb + x] = min(bs, n_in_k - x * bs)
                    glob[G_DISTINCT] += j1 - j
                else:
                    while j1 < nr and ptime[cb + j1] == DEAD:
                        j1 += 1
                tier = NOWHERE
                tok = _place(bf, wt, t + j, pw, q, j1 - j)
            for x in range(j, j1):
                ptime[cb + x] = t + x
            rt = (j1 - j) * bs - (nr * bs - reused_k if j1 == nr else 0)
            _account(k, tier, j1 - j, tok, 1, rt, acc, glob)
            j = j1
    # writes: private positions [max(wp, spt), nb) are new blocks (full, then maybe one short)
    j0 = max(wp, spt_k)
    if j0 < nb:
        full_end = nb if n_in_k - (nb - 1) * bs == bs else nb - 1
        for x in range(j0, nb):
            ptime[cb + x] = t + nr + x - wp
            pw[cb + x] = bs if x < full_end else n_in_k - (nb - 1) * bs
        glob[G_DISTINCT] += nb - j0
        tok = _place(bf, wt, t + nr + j0 - wp, pw, cb + j0, nb - j0)
        _account(k, NOWHERE, nb - j0, tok, 0, 0, acc, glob)
