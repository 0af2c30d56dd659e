"""Compiled steps of the chain kernel (agentx.kv.chains): the time window and one call.

The window ``wt`` holds, at each reference time, the tokens of the block whose latest
reference it is (0 once the block moved on); a reuse distance is the window's sum from the
previous reference to now. ``sc`` = (now, total, closed): the next free time, the window's sum
(a running total, so a query needs only the part before the previous reference) and how many
``CHUNK``-time chunks a Fenwick tree ``bf`` sums. Chunks at or after ``closed`` are still
being filled: placing blocks there touches only ``wt``; a chunk joins the tree once ``now``
has passed it. A query sums at most ``CHUNK / 2`` plain times, on the side of its chunk
that is shorter.

Every step the kernel inlines lives in this one file: numba caches per file, so a step kept
elsewhere could be compiled into a cached kernel and go stale when only its own file changes.
"""

from __future__ import annotations

import numba as nb
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

NOWHERE = 3
LIVE, NEW, DEAD = 0, 1, -2  # DEAD: a block behind the horizon (its time slot is gone)
# accumulator columns per call (time order)
A_HIT = 0  # 0..3: reused-prefix tokens read from HBM, DRAM, SSD, nowhere (recompute)
A_SSD_LOAD, A_LOWER_LOAD, A_CREATED = 4, 5, 6  # block tokens: SSD reads, DRAM|SSD reads, misses
# global counters
G_BLK = 0  # 0..3: read blocks per tier
G_DISTINCT = 4
CHUNK = 128  # window times per Fenwick leaf: the tree stays in cache
NOW, TOTAL, CLOSED, REC = 0, 1, 2, 3  # sc fields (REC: rows of ``rec`` filled)
# rec columns, one row per run of a reused block (kv-curve): call, distance, blocks,
# block tokens, read tokens, is a read
R_CALL, R_DIST, R_N, R_TOK, R_RT, R_READ = range(6)
AHEAD = 32  # calls
ROOM = 4  # a compacted window has room for ROOM x its live blocks: few compactions


@intrinsic
def _prefetch(typingctx, arr, idx):  # pragma: no cover (compiled)
    """Ask for the cache line of arr[idx] without waiting for it (llvm.prefetch)."""

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]], wraparound=False)  # fmt: skip
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")  # fmt: skip
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@nb.njit(cache=True, _nrt=False, inline="always")
def _tier(d, caps):  # pragma: no cover (compiled)
    for i in range(3):
        if d <= caps[i]:
            return i
    return NOWHERE


@nb.njit(cache=True, _nrt=False)
def _compact(wt, bf, remap, sc, cap, ptime, stime):  # pragma: no cover (compiled)
    """Compact the window in place: times deeper than ``cap`` (before the horizon) become
    DEAD and times with no block left are dropped; ``ptime``/``stime`` are renumbered. Only
    weights decide a distance, so closing the gaps keeps every distance."""
    used, total = sc[NOW], sc[TOTAL]
    h = 0
    while h < used and total > cap:
        total -= wt[h]
        remap[h] = DEAD
        h += 1
    live = 0
    for i in range(h, used):  # branch-free (live <= i: a slot already read is overwritten)
        v = wt[i]
        remap[i] = live
        wt[live] = v
        live += v != 0
    for q in range(ptime.size):
        if ptime[q] >= 0:
            ptime[q] = remap[ptime[q]]
    for q in range(stime.size):
        if stime[q] >= 0:
            stime[q] = remap[stime[q]]
    for i in range(live, used):
        wt[i] = 0
    sc[NOW], sc[TOTAL] = live, total
    fenwick(wt, bf, sc)


@nb.njit(cache=True, _nrt=False)
def fenwick(wt, bf, sc):  # pragma: no cover (compiled)
    """The tree over the window's whole chunks before now, built in linear time."""
    closed = sc[NOW] // CHUNK
    bf[:] = 0
    for y in range(closed * CHUNK):
        bf[y // CHUNK + 1] += wt[y]
    n = bf.size - 1
    for i in range(1, n + 1):  # every node passes its sum up
        j = i + (i & -i)
        if j <= n:
            bf[j] += bf[i]
    sc[CLOSED] = closed


@nb.njit(cache=True, _nrt=False, inline="always")
def _fen_add(bf, c, v):  # pragma: no cover (compiled)
    i = c + 1
    while i < bf.size:
        bf[i] += v
        i += i & -i


@nb.njit(cache=True, _nrt=False, inline="always")
def _dist(bf, wt, sc, p):  # pragma: no cover (compiled)
    """Tokens at window times p..now-1 (the reuse distance of a block last used at p)."""
    t0 = sc[NOW]
    closed = sc[CLOSED]
    while closed < t0 // CHUNK:  # chunks now has passed join the tree
        s = 0
        for y in range(closed * CHUNK, closed * CHUNK + CHUNK):
            s += wt[y]
        _fen_add(bf, closed, s)
        closed += 1
    sc[CLOSED] = closed
    c = p // CHUNK
    s = 0
    if c >= closed:
        for y in range(p, t0):
            s += wt[y]
        return s
    lo = p - c * CHUNK
    if lo < CHUNK // 2:  # sum the chunk's head: tree prefix up to c, then c*CHUNK..p-1
        x = c
        for y in range(c * CHUNK, p):
            s += wt[y]
    else:  # sum its tail p..end of chunk on top of the tree's suffix after c
        x = c + 1
        for y in range(p, c * CHUNK + CHUNK):
            s -= wt[y]
    while x > 0:
        s += bf[x]
        x -= x & -x
    return sc[TOTAL] - s


@nb.njit(cache=True, _nrt=False, inline="always")
def _take(bf, wt, sc, p0, t0, n, w):  # pragma: no cover (compiled)
    """The blocks at times p0..p0+n-1 move to t0.. (p0 + n <= t0), or when ``w`` >= 0 blocks
    of ``w`` tokens each; returns their tokens. Only closed chunks update the tree."""
    tok = 0
    closed = sc[CLOSED]
    x = 0
    while x < n:
        c = (p0 + x) // CHUNK
        end = min(n, c * CHUNK + CHUNK - p0)
        d = 0
        for y in range(x, end):
            v = wt[p0 + y] if w < 0 else w
            wt[p0 + y] = 0
            wt[t0 + y] = v
            d += v
        if c < closed:
            _fen_add(bf, c, -d)
        tok += d
        x = end
    return tok


@nb.njit(cache=True, _nrt=False, inline="always")
def _close(
    k, kind, p0, t0, n, w, is_read, rt, caps, bf, wt, sc, acc, glob, rec
):  # pragma: no cover
    """A run of ``n`` references at times t0.. sharing one distance: query, move, account."""
    if n == 0:
        return
    d = -1
    if kind == LIVE:
        d = _dist(bf, wt, sc, p0)
        _take(bf, wt, sc, p0, t0, n, w)
    else:
        wt[t0 : t0 + n] = w
        sc[TOTAL] += n * w
    _account(k, d, n, n * w, is_read, rt, caps, acc, glob, rec, sc)


@nb.njit(cache=True, _nrt=False, inline="always")
def _account(k, d, n, tok, is_read, rt, caps, acc, glob, rec, sc):  # pragma: no cover
    """A run of ``n`` blocks (``tok`` tokens) at reuse distance ``d`` (-1: found nowhere)."""
    tier = _tier(d, caps) if d >= 0 else NOWHERE
    if d >= 0 and rec.shape[0] > 0:
        i = sc[REC]
        rec[i, R_CALL], rec[i, R_DIST], rec[i, R_N] = k, d, n
        rec[i, R_TOK], rec[i, R_RT], rec[i, R_READ] = tok, rt, is_read
        sc[REC] = i + 1
    if is_read == 1:
        acc[k, A_HIT + tier] += rt
        glob[G_BLK + tier] += n
        if tier == 2:
            acc[k, A_SSD_LOAD] += tok
        if tier == 1 or tier == 2:
            acc[k, A_LOWER_LOAD] += tok
    if tier == NOWHERE:
        acc[k, A_CREATED] += tok


@nb.njit(cache=True, _nrt=False, inline="always")
def _place(wt, sc, t0, pw, q0, n):  # pragma: no cover (compiled)
    """Put blocks of tokens pw[q0..q0+n) at times t0.. (open chunks); returns their tokens."""
    tok = 0
    for x in range(n):
        v = pw[q0 + x]
        wt[t0 + x] = v
        tok += v
    sc[TOTAL] += tok
    return tok


@nb.njit(cache=True, _nrt=False, inline="always")
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
    sc,
    acc,
    glob,
    rec,
):  # pragma: no cover (compiled)
    """One call's references at window times t..: reads of positions [0, nr), then writes of
    [wp, nb). Shared positions (< spt_k) go one by one, merged into runs where their previous
    uses were consecutive; private ones are scanned run by run (tight loops over the chain).
    ``sc[NOW]`` is the next time to fill while the call runs."""
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
                sc[NOW] = r_t0
                _close(k, r_kind, r_p0, r_t0, r_n, r_w, is_read, r_rt, caps, bf, wt, sc, acc, glob, rec)  # fmt: skip
                r_n, r_t0, r_p0, r_w, r_kind, r_rt = 1, ti, p, w, kind, rt
            last_p = p
        sc[NOW] = r_t0
        _close(k, r_kind, r_p0, r_t0, r_n, r_w, is_read, r_rt, caps, bf, wt, sc, acc, glob, rec)
        r_n = 0
        if part == 1:
            break
        # reads: private positions [spt, nr), run by run; a run's blocks may differ in size
        # (a distance is shared whatever the sizes), so old short blocks do not cut runs
        j = spt_k
        while j < nr:
            q = cb + j
            p = ptime[q]
            ptime[q] = t + j
            j1 = j + 1
            sc[NOW] = t + j
            if p >= 0:
                while j1 < nr and ptime[cb + j1] == p + (j1 - j):
                    ptime[cb + j1] = t + j1
                    j1 += 1
                d = _dist(bf, wt, sc, p)
                tok = _take(bf, wt, sc, p, t + j, j1 - j, -1)
            else:
                if p == -1:  # reused per the trace but never written in this chain: new
                    pw[q] = min(bs, n_in_k - j * bs)
                    while j1 < nr and ptime[cb + j1] == -1:
                        pw[cb + j1] = min(bs, n_in_k - j1 * bs)
                        ptime[cb + j1] = t + j1
                        j1 += 1
                    glob[G_DISTINCT] += j1 - j
                else:
                    while j1 < nr and ptime[cb + j1] == DEAD:
                        ptime[cb + j1] = t + j1
                        j1 += 1
                d = -1
                tok = _place(wt, sc, t + j, pw, q, j1 - j)
            rt = (j1 - j) * bs - (nr * bs - reused_k if j1 == nr else 0)
            _account(k, d, j1 - j, tok, 1, rt, caps, acc, glob, rec, sc)
            j = j1
    # writes: private positions [max(wp, spt), nb) are new blocks (full, then maybe one short)
    j0 = max(wp, spt_k)
    if j0 < nb:
        full_end = nb if n_in_k - (nb - 1) * bs == bs else nb - 1
        for x in range(j0, nb):
            ptime[cb + x] = t + nr + x - wp
            pw[cb + x] = bs if x < full_end else n_in_k - (nb - 1) * bs
        glob[G_DISTINCT] += nb - j0
        tok = _place(wt, sc, t + nr + j0 - wp, pw, cb + j0, nb - j0)
        _account(k, -1, nb - j0, tok, 0, 0, caps, acc, glob, rec, sc)


@nb.njit(cache=True, _nrt=False)
def _feed(
    base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base, last, k0, acc,
    bs, caps, horizon, ptime, pw, phi, stime, sw, wt, bf, remap, sc, glob, rec,
):  # fmt: skip  # pragma: no cover (compiled)
    """Calls k0.. of the batch; returns where it stopped: the end, or a call that needs a
    larger window or more ``rec`` rows (the caller grows it and resumes; arrays are never
    rebound in here, which keeps numba from reference-counting them at every step). Blocks
    deeper than ``horizon`` tokens (>= the largest tier) are dropped from the window."""
    for k in range(k0, base.size):
        cb = base[k]
        nref = n_read[k] + n_blk[k] - write_pos[k]
        # a later call's chain state and the window where its blocks were last used are cold:
        # ask for them a few calls ahead (its positions now, its window lines next)
        # (a prefetch never faults; the one real load below stays inside the chain's slot)
        if k + 2 * AHEAD < base.size:
            q = base[k + 2 * AHEAD] + spt[k + 2 * AHEAD]
            _prefetch(ptime, q)
            _prefetch(ptime, q + 16)
        if k + AHEAD < base.size and spt[k + AHEAD] < n_blk[k + AHEAD]:
            p = ptime[base[k + AHEAD] + spt[k + AHEAD]]
            if p >= 0:
                _prefetch(wt, p)
                _prefetch(wt, p + 16)
                _prefetch(wt, p - p % CHUNK)
        if rec.shape[0] > 0 and sc[REC] + nref > rec.shape[0]:
            return k
        if sc[NOW] + nref > wt.size:
            _compact(wt, bf, remap, sc, horizon, ptime, stime)
            if ROOM * (sc[NOW] + nref) > wt.size:
                return k
        t = sc[NOW]
        _call(k, t, cb, n_read[k], write_pos[k], n_blk[k], n_in[k], reused[k], spt[k],
              sh_base[k], bs, caps, ptime, pw, stime, sw, wt, bf, sc, acc, glob, rec)  # fmt: skip
        sc[NOW] = t + nref
        # positions past this prompt are gone from the chain (their blocks age out)
        hi = max(phi[cb], n_blk[k]) if last[k] else phi[cb]
        for j in range(0 if last[k] else n_blk[k], hi):
            ptime[cb + j] = -1
        phi[cb] = 0 if last[k] else n_blk[k]  # a chain's last call frees its slot
    return base.size
