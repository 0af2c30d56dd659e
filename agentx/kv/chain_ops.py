"""Compiled steps of the chain kernel (agentx.kv.chains): the time window and one call.

The window ``wt`` holds, at each reference time, the tokens of the blocks whose latest
reference it is (one time per section of a call: its blocks, in reference order, until they
move on); a reuse distance is the window's sum from the previous reference's time to now. ``sc`` = (now, total, closed): the next free time, the window's sum
(a running total, so a query needs only the part before the previous reference) and how many
``CHUNK``-time chunks a Fenwick tree ``bf`` sums. Chunks at or after ``closed`` are still
being filled: placing blocks there touches only ``wt``; a chunk joins the tree once ``now``
has passed it. A query sums at most ``CHUNK / 2`` plain times, on the side of its chunk
that is shorter. A block last used after the HBM boundary (``_slot_add``) needs no query.

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
# sc fields of the HBM boundary (``_slot_add``): a window time and the tokens from it to now
B0, S0 = 4, 5
SC_FIELDS = 6
# rec columns, one row per run of a reused block (kv-curve): call, distance, blocks,
# block tokens, read tokens, is a read
R_CALL, R_DIST, R_N, R_TOK, R_RT, R_READ = range(6)
AHEAD = 32  # calls
# a chain's state at its base b, cs[4 b + field] (int32) and ck[2 b + field] (int64): its
# positions from spt on are run A [spt, A_END) last used at window time TA, run B [A_END,
# B_END) at TB, none after B_END (B_END 0: a chain with no call yet); KA, KB: their tokens
B_END, A_END, TA, TB = 0, 1, 2, 3
KA, KB = 0, 1
ROOM = 4  # a compacted window has room for ROOM x its live times: few compactions


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


if nb.config.DISABLE_JIT:  # interpreted (a first run on a cold cache, agentx.warm): no hint

    def _prefetch(arr, idx):  # noqa: F811
        pass


@nb.njit(cache=True, _nrt=False, inline="always")
def _tier(d, caps):  # pragma: no cover (compiled)
    for i in range(3):
        if d <= caps[i]:
            return i
    return NOWHERE


@nb.njit(cache=True, _nrt=False)
def _compact(wt, bf, remap, sc, cap, cs, stime):  # pragma: no cover (compiled)
    """Compact the window in place: times deeper than ``cap`` (before the horizon) become
    DEAD and times with no block left are dropped; the chains' runs and ``stime`` are
    renumbered. Only weights decide a distance, so closing the gaps keeps every distance."""
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
    for q in range(0, cs.size, 4):
        if cs[q + TA] >= 0:
            cs[q + TA] = remap[cs[q + TA]]
        if cs[q + TB] >= 0:
            cs[q + TB] = remap[cs[q + TB]]
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
def _slot_add(bf, wt, sc, s, v, cap0):  # pragma: no cover (compiled)
    """``v`` more tokens at window time ``s`` (and in the tree once its chunk has closed).

    It also keeps the HBM boundary: a time B0 and the exact sum S0 of the tokens at B0..now-1,
    moved on while S0 passes the HBM capacity ``cap0``. A block last used at or after B0 is
    at a distance of at most S0, so in HBM, with no query of the tree: 66 % of the reused
    blocks of a 10 M-call replay, and a quarter of the kernel's time. B0 never moves back (a
    re-reference takes its tokens from the suffix and puts them back at now), so it trails
    the exact boundary only by tokens that left without coming back; those calls ask the tree.
    """
    wt[s] += v
    if s // CHUNK < sc[CLOSED]:
        _fen_add(bf, s // CHUNK, v)
    if s >= sc[B0]:
        sc[S0] += v
        b = sc[B0]
        while sc[S0] > cap0 and b < sc[NOW]:
            sc[S0] -= wt[b]
            b += 1
        sc[B0] = b


@nb.njit(cache=True, _nrt=False)
def _boundary(wt, sc, cap0):  # pragma: no cover (compiled)
    """The HBM boundary anew (the times were renumbered): the earliest time whose suffix holds
    at most ``cap0`` tokens."""
    b, tot = sc[NOW], 0
    while b > 0 and tot + wt[b - 1] <= cap0:
        b -= 1
        tot += wt[b]
    sc[B0], sc[S0] = b, tot


@nb.njit(cache=True, _nrt=False, inline="always")
def _section(
    k, lo, hi, base, tm, tw, s, is_read, self_s, self_tok, nr, reused_k, n_in_k, bs, caps,
    wt, bf, sc, acc, glob, rec,
):  # fmt: skip  # pragma: no cover (compiled)
    """Blocks ``base + lo .. base + hi - 1`` (times ``tm``, tokens ``tw``: the chain's positions
    or the shared blocks) referenced in order, all now at window time ``s``, run by run: the
    consecutive blocks sharing a previous time share one distance, the window's sum from
    that time on (less ``self_tok`` when that time is ``self_s``, this call's shared reads)."""
    sc[NOW] = s + 1  # what earlier runs put at s counts in later runs' distances
    j = lo
    while j < hi:
        q = base + j
        p = tm[q]
        j1 = j + 1
        tok = tw[q]
        tm[q] = s
        if p >= 0:
            while j1 < hi and tm[base + j1] == p:
                tm[base + j1] = s
                tok += tw[base + j1]
                j1 += 1
            if p >= sc[B0] and rec.shape[0] == 0:  # (kv-curve records every distance)
                d = 0  # within the HBM boundary's suffix: an HBM hit
            else:
                d = _dist(bf, wt, sc, p) - (self_tok if p == self_s else 0)
            _slot_add(bf, wt, sc, p, -tok, caps[0])
        else:
            if p == -1:  # never used (or gone from its chain): new
                tok = tw[q] = min(bs, n_in_k - j * bs)
                while j1 < hi and tm[base + j1] == -1:
                    tm[base + j1] = s
                    tok += min(bs, n_in_k - j1 * bs)
                    tw[base + j1] = min(bs, n_in_k - j1 * bs)
                    j1 += 1
                glob[G_DISTINCT] += j1 - j
            else:  # behind the horizon: found nowhere, placed again
                while j1 < hi and tm[base + j1] == DEAD:
                    tm[base + j1] = s
                    tok += tw[base + j1]
                    j1 += 1
            d = -1
            sc[TOTAL] += tok
        _slot_add(bf, wt, sc, s, tok, caps[0])
        rt = (j1 - j) * bs - (nr * bs - reused_k if j1 == nr else 0) if is_read == 1 else 0
        _account(k, d, j1 - j, tok, is_read, rt, caps, acc, glob, rec, sc)
        j = j1


@nb.njit(cache=True, _nrt=False, inline="always")
def _chain_reads(
    k, lo, cb, s, nr, reused_k, n_in_k, bs, caps, pw, cs, ck, wt, bf, sc, acc, glob, rec,
):  # fmt: skip  # pragma: no cover (compiled)
    """The chain's positions ``lo`` (its spt) .. ``nr - 1`` read at window time ``s``, run by
    run as ``_section`` reads them, from the chain's two runs instead of a time per block: a
    call reads its chain's whole prefix, so after it the chain holds at most the run it read
    and the run it wrote (``_call``), and a read costs its runs, not its blocks. A run's
    tokens are its stored sum unless the read ends inside it (then summed from ``pw``).
    Returns the tokens read."""
    sc[NOW] = s + 1
    b_end = cs[4 * cb + B_END]
    a_end = cs[4 * cb + A_END] if b_end > lo else lo
    b_end = max(b_end, lo)
    ta, tb = cs[4 * cb + TA], cs[4 * cb + TB]
    total = 0
    j = lo
    while j < nr:
        if j < a_end:
            p, e = ta, a_end
            if tb == p and b_end > a_end:  # both behind the horizon: one run, as blocks are
                e = b_end
        elif j < b_end:
            p, e = tb, b_end
        else:
            p, e = -1, nr
        j1 = min(e, nr)
        if p == -1:  # never used (or gone from its chain): new
            tok = 0
            for x in range(j, j1):
                v = min(bs, n_in_k - x * bs)
                pw[cb + x] = v
                tok += v
            glob[G_DISTINCT] += j1 - j
        elif j1 < e:  # the read ends inside the run
            tok = 0
            for x in range(j, j1):
                tok += pw[cb + x]
        else:
            tok = (ck[2 * cb + KA] if j < a_end else 0) + (ck[2 * cb + KB] if e == b_end else 0)
        if p >= 0:
            # within the HBM boundary's suffix: an HBM hit (kv-curve records every distance)
            near = p >= sc[B0] and rec.shape[0] == 0
            d = 0 if near else _dist(bf, wt, sc, p)
            _slot_add(bf, wt, sc, p, -tok, caps[0])
        else:  # new, or behind the horizon: found nowhere, placed again
            d = -1
            sc[TOTAL] += tok
        _slot_add(bf, wt, sc, s, tok, caps[0])
        rt = (j1 - j) * bs - (nr * bs - reused_k if j1 == nr else 0)
        _account(k, d, j1 - j, tok, 1, rt, caps, acc, glob, rec, sc)
        total += tok
        j = j1
    return total


@nb.njit(cache=True, _nrt=False, inline="always")
def _call(
    k, t, cb, nr, wp, nb, n_in_k, reused_k, spt_k, sh_base_k, bs, caps, pw, cs, ck, stime, sw,
    wt, bf, sc, acc, glob, rec,
):  # fmt: skip  # pragma: no cover (compiled)
    """One call's references from window time t on, in four sections of one time each;
    returns the next free time: reads of the shared blocks [0, min(nr, spt)), reads of the
    chain's positions [spt, nr), writes of shared blocks [wp, min(nb, spt)), writes of new
    blocks at positions [max(wp, spt), nb).

    A time holds its blocks in the order they were referenced, so a run (consecutive blocks
    sharing a previous time) starts at the first block still there: a call reads from block 0
    of its shared prefix and from position ``spt`` of its chain up (``spt`` is the chain's,
    agentx.kv.geometry), so every block before the run's at that time was read earlier in this
    call and has moved; what stays behind (the read copy of a rewritten partial block,
    positions past a shorter prompt) lies after it. The one exception is this call's own
    shared reads, which its shared writes may use again: their blocks before ``wp`` are still
    there, and leave the distance. The work per run is a few loads (plus, for shared blocks,
    one pass over them): the window holds runs, not blocks.

    Afterwards the chain holds run A, the positions [spt, max(wp, spt)) it read (wp <= nr:
    each is read before it is written), and run B, those it wrote, up to nb; past nb none."""
    n0 = min(nr, spt_k)
    s0 = t if n0 > 0 else -5  # (-5: no time)
    s = t
    if n0 > 0:
        _section(k, 0, n0, sh_base_k, stime, sw, s, 1, -5, 0, nr, reused_k, n_in_k, bs, caps,
                 wt, bf, sc, acc, glob, rec)  # fmt: skip
        s += 1
    b_end = max(nb, spt_k)
    a_end = min(max(wp, spt_k), b_end)
    ta, ka = -1, 0
    if spt_k < nr:
        ka = _chain_reads(k, spt_k, cb, s, nr, reused_k, n_in_k, bs, caps, pw, cs, ck, wt, bf,
                          sc, acc, glob, rec)  # fmt: skip
        for x in range(a_end, nr):  # read, and rewritten below or past the prompt: not in A
            ka -= pw[cb + x]
        ta = s
        s += 1
    else:
        a_end = spt_k
    h1 = min(nb, spt_k)
    if wp < h1:
        before = 0  # this call's shared reads before wp: still at s0, older than the writes
        for j in range(wp if wp < n0 else 0):
            before += sw[sh_base_k + j]
        _section(k, wp, h1, sh_base_k, stime, sw, s, 0, s0, before, nr, reused_k, n_in_k, bs,
                 caps, wt, bf, sc, acc, glob, rec)  # fmt: skip
        s += 1
    cs[4 * cb + B_END], cs[4 * cb + A_END], cs[4 * cb + TA], cs[4 * cb + TB] = b_end, a_end, ta, -1
    ck[2 * cb + KA], ck[2 * cb + KB] = ka, 0
    # writes: private positions [max(wp, spt), nb) are new blocks (full, then maybe one short)
    j0 = max(wp, spt_k)
    if j0 >= nb:
        return s
    full_end = nb if n_in_k - (nb - 1) * bs == bs else nb - 1
    tok = 0
    for x in range(j0, nb):
        v = bs if x < full_end else n_in_k - (nb - 1) * bs
        pw[cb + x] = v
        tok += v
    cs[4 * cb + TB], ck[2 * cb + KB] = s, tok
    glob[G_DISTINCT] += nb - j0
    sc[NOW] = s + 1
    _slot_add(bf, wt, sc, s, tok, caps[0])
    sc[TOTAL] += tok
    _account(k, -1, nb - j0, tok, 0, 0, caps, acc, glob, rec, sc)
    return s + 1


@nb.njit(cache=True, _nrt=False, nogil=True)  # a caller's thread may work beside it
def _feed(
    base, n_blk, n_read, write_pos, n_in, reused, spt, sh_base, last, k0, acc,
    bs, caps, horizon, pw, cs, ck, stime, sw, wt, bf, remap, sc, glob, rec,
):  # fmt: skip  # pragma: no cover (compiled)
    """Calls k0.. of the batch; returns where it stopped: the end, or a call that needs a
    larger window or more ``rec`` rows (the caller grows it and resumes; arrays are never
    rebound in here, which keeps numba from reference-counting them at every step). Blocks
    deeper than ``horizon`` tokens (>= the largest tier) are dropped from the window."""
    for k in range(k0, base.size):
        cb = base[k]
        nref = n_read[k] + n_blk[k] - write_pos[k]
        # a later call's chain state and the window where its blocks were last used are cold:
        # ask for them a few calls ahead (its runs now, its window lines next)
        # (a prefetch never faults; the one real load below stays inside the chain's state)
        if k + 2 * AHEAD < base.size:
            q = base[k + 2 * AHEAD]
            _prefetch(cs, 4 * q)
            _prefetch(ck, 2 * q)
        if k + AHEAD < base.size and spt[k + AHEAD] < n_blk[k + AHEAD]:
            b = base[k + AHEAD]
            p = cs[4 * b + TA] if cs[4 * b + TA] >= 0 else cs[4 * b + TB]
            _prefetch(pw, b + cs[4 * b + A_END])
            if p >= 0:
                _prefetch(wt, p)
                _prefetch(wt, p + 16)
                _prefetch(wt, p - p % CHUNK)
        if rec.shape[0] > 0 and sc[REC] + nref > rec.shape[0]:
            return k
        if sc[NOW] + nref > wt.size:
            _compact(wt, bf, remap, sc, horizon, cs, stime)
            _boundary(wt, sc, caps[0])
            if ROOM * (sc[NOW] + nref) > wt.size:
                return k
        t = sc[NOW]
        sc[NOW] = _call(k, t, cb, n_read[k], write_pos[k], n_blk[k], n_in[k], reused[k], spt[k],
              sh_base[k], bs, caps, pw, cs, ck, stime, sw, wt, bf, sc, acc, glob, rec)  # fmt: skip
        if last[k]:  # a chain's last call frees its slot
            _free(cs, cb)
    return base.size


@nb.njit(cache=True, _nrt=False, inline="always")
def _free(cs, b):  # pragma: no cover (compiled)
    """The chain at base ``b`` holds nothing (its blocks stay in the window and age out)."""
    cs[4 * b + B_END], cs[4 * b + TA], cs[4 * b + TB] = 0, -1, -1


@nb.njit(cache=True)
def release(cs, bases):  # pragma: no cover (compiled)
    """Free the chains at ``bases`` (ended: their slots can be reused)."""
    for i in range(bases.size):
        _free(cs, bases[i])
