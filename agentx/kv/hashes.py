"""Dense block ids from a trace's ``block_hashes`` (the hashed half of ``agentx.kv.blocks``).

Hashes are mostly small counters (Weka numbers blocks 1, 2, … per session): offsetting each
namespace by its largest value needs no sort; the few large values (importers' ids for
partial blocks, or arbitrary 64-bit hashes) are ranked exactly.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import polars as pl

from agentx.kv.jit import bisect

SMALL = 1 << 32  # hash values below this are offset per namespace; larger ones are ranked


def hash_ids(df, row, scope, m, geo, spt_tokens, out) -> tuple[int, int]:
    """Dense ids from the (namespaced) hash of each block's last trace block.

    Hashes are mostly small counters (Weka numbers blocks 1, 2, … per session): offsetting each
    namespace by the running maximum needs no sort; the few large values are ranked exactly.
    Shared-prefix positions are named by (the session's shared-prefix size, position, hash):
    sessions with the same tool + system prefix share them, and a sub-agent's own blocks (other
    hashes at the same positions) stay apart. Returns (ids, private ids).
    """
    id0 = 0
    lens = df["block_hashes"].list.len().to_numpy().astype(np.int64)
    hoff = np.cumsum(lens) - lens
    flat = df["block_hashes"].explode().to_numpy().view(np.int64)  # ≥ 2^63 reads negative: big
    if scope == "global":
        ns = np.zeros(df.height, np.int64)
    else:  # "session" (or unknown): ids mean nothing across sessions
        ns = df["session_id"].rank("dense").to_numpy().astype(np.int64) - 1
    n_ns = int(ns.max()) + 1 if ns.size else 1
    top = ns_top(flat, lens, ns, n_ns)
    small = flat.size - int(((flat >= SMALL) | (flat < 0)).sum())
    if int(top.sum()) > 4 * small + 1024:  # sparse values: rank every (namespace, hash) exactly
        top[:] = 0
    base = id0 + np.cumsum(top) - top
    n = id0 + int(top.sum())
    big = (flat >= SMALL) | (flat < 0)
    if not top.any():
        big[:] = True
    big_pos = np.flatnonzero(big)
    big_key = np.zeros(0, np.int64)
    if big_pos.size:
        big_ns = ns[np.searchsorted(hoff, big_pos, side="right") - 1]
        pairs = pl.DataFrame({"ns": big_ns, "h": flat[big_pos]})
        big_key = n + pairs.select(pl.struct("ns", "h").rank("dense")).to_series().to_numpy() - 1
        n = int(big_key.max()) + 1
    hm = int(top.max()) if top.size else 0
    # shared blocks are keyed (session's shared size, position, hash) packed in one int64
    spt = geo[-1]
    grp = np.unique(spt_tokens, return_inverse=True)[1].astype(np.int64)
    if (int(grp.max(initial=0)) + 1) * (int(spt.max(initial=0)) + 1) * (hm + 1) >= 1 << 62:
        spt[:] = 0  # hash values too large to pack: no cross-session sharing
    # small traces: numpy's whole-array ops (no kernel to compile on a fresh install, and an
    # interpreted first run, agentx.warm, does not walk the references one by one)
    kernel = _hash_numpy if out.size < NUMPY_BELOW else _hash_kernel
    kernel(
        flat,
        hoff[row],
        lens[row],
        ns[row],
        base,
        big_pos,
        big_key.astype(np.int64),
        m,
        hm,
        grp,
        *geo,
        out,
    )
    neg = np.flatnonzero(out < 0)  # shared-prefix blocks (negative keys)
    if neg.size:
        uniq, inv = np.unique(out[neg], return_inverse=True)
        out[neg] = n + (uniq.size - 1 - inv)  # ascending key order
        return n + uniq.size, n
    return n, n


NUMPY_BELOW = 1 << 20  # hashes: numpy's group max is as fast as compiling the kernel


def ns_top(flat, lens, ns, n_ns) -> np.ndarray:
    """Per namespace, 1 + the largest small hash (0 where none). Small traces use numpy, so a
    fresh install's first replay of the sample compiles one kernel less."""
    if flat.size >= NUMPY_BELOW:
        return _ns_top(flat, np.cumsum(lens) - lens, lens, ns, n_ns)
    small = (flat >= 0) & (flat < SMALL)
    top = np.zeros(n_ns, np.int64)
    np.maximum.at(top, np.repeat(ns, lens)[small], flat[small] + 1)
    return top


@nb.njit(cache=True)
def _ns_top(flat, hoff, lens, ns, n_ns):  # pragma: no cover (compiled)
    top = np.zeros(n_ns, np.int64)
    for k in range(hoff.size):
        for i in range(hoff[k], hoff[k] + lens[k]):
            h = flat[i]
            if 0 <= h < SMALL and h + 1 > top[ns[k]]:
                top[ns[k]] = h + 1
    return top


def _hash_numpy(flat, hoff, lens, ns, base, big_pos, big_key, m, hm, grp, n_blk, n_read,
                write_pos, ref_off, spt, out) -> None:  # fmt: skip
    """``_hash_kernel`` in whole-array numpy, the same ids (tests/test_kv_stack.py)."""
    reads = np.maximum(n_read, 0)
    cnt = reads + np.maximum(n_blk - write_pos, 0)
    k = np.repeat(np.arange(cnt.size), cnt)  # each reference's call
    t = np.arange(k.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)  # its rank in the call
    nr = reads[k]
    j = np.where(t < nr, t, write_pos[k] + (t - nr))  # the block: reads, then writes
    i = hoff[k] + np.minimum(j * m + m - 1, lens[k] - 1)  # its last trace block's hash
    r = ref_off[k] + t
    if big_pos.size == flat.size:
        out[r] = big_key[i]
        return
    h = flat[i]
    small = (h >= 0) & (h < SMALL)
    smax = int(spt.max()) + 1 if spt.size else 1
    shared = -(1 + (grp[k] * smax + j) * hm + h)
    out[r] = np.where(small, np.where(j < spt[k], shared, base[ns[k]] + h), 0)
    big = ~small
    out[r[big]] = big_key[np.searchsorted(big_pos, i[big])]


@nb.njit(cache=True)
def _hash_kernel(
    flat,
    hoff,
    lens,
    ns,
    base,
    big_pos,
    big_key,
    m,
    hm,
    grp,
    n_blk,
    n_read,
    write_pos,
    ref_off,
    spt,
    out,
):  # pragma: no cover (compiled)
    all_big = big_pos.size == flat.size
    smax = spt[0] + 1 if spt.size else 1  # spt.max() + 1 as a loop: numba's max compiles 0.4 s
    for k in range(1, spt.size):
        smax = max(smax, spt[k] + 1)
    for k in range(n_blk.size):
        r = ref_off[k]
        sp, h0, hl, bk, g = spt[k], hoff[k], lens[k] - 1, base[ns[k]], grp[k]
        for part in range(2):
            lo, hi = (0, n_read[k]) if part == 0 else (write_pos[k], n_blk[k])
            for j in range(lo, hi):
                i = h0 + min(j * m + m - 1, hl)
                h = flat[i]
                if all_big:
                    out[r] = big_key[i]
                elif 0 <= h < SMALL:
                    out[r] = -(1 + (g * smax + j) * hm + h) if j < sp else bk + h
                else:
                    out[r] = big_key[bisect(big_pos, i)]
                r += 1
