"""The compiled passes of agentx.kv.geometry: one walk over the rows each, no sort."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def keys_kernel(run, h_agent, comp, spt, n_agent, chain):  # pragma: no cover (compiled)
    """Chain id per row (into ``chain``) and, per agent, its first chain's id and smallest ``spt``.

    An agent's compaction epoch (compactions so far, this row included) rises by 0 or 1 per
    call, so its epochs are one consecutive range: numbering agents in rank order and each
    agent's epochs in order gives the dense rank of (session, agent, epoch) with no sort."""
    n = run.size
    cnt = np.zeros(n_agent, np.int64)
    first = np.full(n_agent, -1, np.int64)
    amin = np.full(n_agent, 9223372036854775807, np.int64)
    for i in range(n):
        a = h_agent[run[i]]
        e = cnt[a] + comp[i]
        cnt[a] = e
        chain[i] = e
        if first[a] < 0:
            first[a] = e
        if spt[i] < amin[a]:
            amin[a] = spt[i]
    base = np.empty(n_agent, np.int64)
    total = 0
    for a in range(n_agent):
        base[a] = total - first[a]
        total += cnt[a] - first[a] + 1
    agent_of_chain = np.empty(total, np.int64)
    for a in range(n_agent):
        for e in range(first[a], cnt[a] + 1):
            agent_of_chain[base[a] + e] = a
    for i in range(n):
        chain[i] += base[h_agent[run[i]]]
    return chain, agent_of_chain, amin


@nb.njit(cache=True)
def ref_counts(n_in, reused, bs, k, use_hashes):  # pragma: no cover (compiled)
    """References at block sizes ``bs * 2**j``, j < k, in one pass: ceil(ceil(x/a)/b) =
    ceil(x/ab) and floor(floor(x/a)/b) = floor(x/ab), so each size is a shift of the first."""
    out = np.zeros(k, np.int64)
    sh = _log2(bs)
    for i in range(n_in.size):
        qn = _ceil_div(n_in[i], bs, sh)
        qr = _ceil_div(reused[i], bs, sh)
        fr = _floor_div(reused[i], bs, sh)
        for j in range(k):
            cr = -((-qr) >> j)  # an arithmetic shift floors, so this is ceil(qr / 2**j)
            out[j] += cr - ((-qn) >> j) - (cr if use_hashes else fr >> j)
    return out


def _assemble(row, n_in, reused, chain, spt_c, shb_c, bs, use_hashes, like):  # pragma: no cover
    """Per call in time order: tokens, blocks, read/write positions, chain, shared prefix;
    the token and block columns of ``like``'s dtype (int32 where every value fits)."""
    n = row.size
    o_in = np.empty(n, like.dtype)
    o_re = np.empty(n, like.dtype)
    o_blk = np.empty(n, like.dtype)
    o_rd = np.empty(n, like.dtype)
    o_wp = np.empty(n, like.dtype)
    o_ch = np.empty_like(chain)
    o_spt = np.empty(n, like.dtype)
    o_shb = np.empty(n, like.dtype)
    refs = 0
    sh = _log2(bs)
    for k in nb.prange(n):
        r = row[k]
        x = n_in[r]
        y = reused[r]
        c = chain[r]
        nb_ = _ceil_div(x, bs, sh)
        nr = _ceil_div(y, bs, sh)
        wp = nr if use_hashes else _floor_div(y, bs, sh)
        o_in[k] = x
        o_re[k] = y
        o_blk[k] = nb_
        o_rd[k] = nr
        o_wp[k] = wp
        o_ch[k] = c
        o_spt[k] = spt_c[c]
        o_shb[k] = shb_c[c]
        refs += nr + nb_ - wp
    return o_in, o_re, o_blk, o_rd, o_wp, o_ch, o_spt, o_shb, refs


_assemble_serial = nb.njit(cache=True)(_assemble)
_assemble_parallel = nb.njit(cache=True, parallel=True)(_assemble)
PARALLEL_FROM_CALLS = 200_000  # a gather by row on both cores; a small trace compiles no threads


def assemble(row, n_in, reused, chain, spt_c, shb_c, bs, use_hashes, like):
    """``_assemble`` (the same columns either way)."""
    fn = _assemble_parallel if row.size >= PARALLEL_FROM_CALLS else _assemble_serial
    return fn(row, n_in, reused, chain, spt_c, shb_c, bs, use_hashes, like)


@nb.njit(cache=True, inline="always")
def _log2(bs):  # pragma: no cover (compiled)
    """log2(bs) for a power of two, else -1: 64-bit division costs ~40 cycles, a shift one."""
    if bs <= 0 or bs & (bs - 1):
        return -1
    s = 0
    while (1 << s) < bs:
        s += 1
    return s


@nb.njit(cache=True, inline="always")
def _floor_div(x, bs, sh):  # pragma: no cover (compiled)
    return x >> sh if sh >= 0 else x // bs  # an arithmetic shift floors, as // does


@nb.njit(cache=True, inline="always")
def _ceil_div(x, bs, sh):  # pragma: no cover (compiled)
    return -((-x) >> sh) if sh >= 0 else -(-x // bs)
