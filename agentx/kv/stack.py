"""Exact LRU by reuse distance: one pass of Mattson's stack algorithm (the one sequential kernel).

For every block reference the kernel returns its reuse distance: the tokens of distinct blocks
touched since the block's previous reference, plus its own (first touch: -1, infinite). An LRU
cache of C tokens holds the block at that moment iff distance ≤ C, so one pass answers every
capacity, and LRU's inclusion property makes a hierarchy HBM ⊂ DRAM ⊂ SSD a comparison with
three numbers (Mattson et al., "Evaluation techniques for storage hierarchies", 1970).

Distances come from a Fenwick tree over reference times holding, at each block's latest
reference time, that block's tokens. A call re-reads its whole prefix in the order it was last
read, so consecutive references whose previous references were also consecutive all share one
distance (proof in docs/kv-tiers.md); the kernel keeps such runs as *segments* and moves a whole
segment with range updates, one query and four tree updates per segment instead of per block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from agentx.kv.blocks import BlockStream

# Columns of the kernel's segment table.
S_CALL, S_REF0, S_N, S_W, S_READ_TOK, S_IS_READ, S_DIST = range(7)


@dataclass(frozen=True)
class StackResult:
    """Segments of references sharing one call, kind (read/write), block size and distance."""

    call: np.ndarray  # call index in reference (time) order
    ref0: np.ndarray  # first reference of the segment
    n: np.ndarray  # references (blocks) in the segment
    block_tokens: np.ndarray  # tokens of each block of the segment
    read_tokens: np.ndarray  # reused-prefix tokens the segment covers (0 for writes)
    is_read: np.ndarray
    dist_tokens: np.ndarray  # reuse distance of each reference; -1 = first touch (infinite)
    block_weight: np.ndarray  # tokens per block id
    final_dist_tokens: np.ndarray  # per block: stack depth after the last reference (-1: freed)
    last_ref: np.ndarray  # per block: its last reference (-1: freed or never referenced)

    def ref_distances(self) -> np.ndarray:
        """Distance of every reference, in stream order (tests and small traces)."""
        return np.repeat(self.dist_tokens, self.n)


def lru_stack(stream: BlockStream, kill_off=None, kill_blocks=None) -> StackResult:
    """Run the kernel; ``kill_*`` (CSR per call) frees blocks before a call (session-aware)."""
    if kill_off is None:
        kill_off = np.zeros(stream.n_calls + 1, np.int64)
        kill_blocks = np.zeros(0, np.int64)
    segs, weight, final, last = _stack_kernel(
        stream.ref_block,
        stream.ref_off,
        stream.n_read,
        stream.write_pos,
        stream.input_tokens,
        stream.reused_tokens,
        stream.block_size_tokens,
        stream.n_blocks,
        kill_off,
        kill_blocks,
    )
    return StackResult(
        call=segs[:, S_CALL],
        ref0=segs[:, S_REF0],
        n=segs[:, S_N],
        block_tokens=segs[:, S_W],
        read_tokens=segs[:, S_READ_TOK],
        is_read=segs[:, S_IS_READ].astype(bool),
        dist_tokens=segs[:, S_DIST],
        block_weight=weight,
        final_dist_tokens=final,
        last_ref=last,
    )


@nb.njit(cache=True, inline="always")
def _add(tree, i, v):  # pragma: no cover (compiled)
    n = tree.size
    while i < n:
        tree[i] += v
        i += i & -i


@nb.njit(cache=True, inline="always")
def _sum(tree, i):  # pragma: no cover (compiled)
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & -i
    return s


@nb.njit(cache=True, inline="always")
def _range_add(b1, b2, lo, hi, v):  # pragma: no cover (compiled)
    """Add v at 0-based times lo..hi (range-update / range-query Fenwick pair)."""
    _add(b1, lo + 1, v)
    _add(b1, hi + 2, -v)
    _add(b2, lo + 1, v * lo)
    _add(b2, hi + 2, -v * (hi + 1))


@nb.njit(cache=True, inline="always")
def _prefix(b1, b2, i):  # pragma: no cover (compiled)
    """Sum of weights at 0-based times 0..i-1."""
    return _sum(b1, i) * i - _sum(b2, i)


@nb.njit(cache=True)
def _stack_kernel(
    ref_block, ref_off, n_read, write_pos, n_in, reused, bs, n_blocks, kill_off, kill_blocks
):  # pragma: no cover
    t_all = ref_block.size
    b1 = np.zeros(t_all + 2, np.int64)
    b2 = np.zeros(t_all + 2, np.int64)
    last = np.full(n_blocks, -1, np.int64)
    weight = np.zeros(n_blocks, np.int64)
    cap = 4 * ref_off.size + 64
    segs = np.empty((cap, 7), np.int64)
    ns = 0
    for k in range(ref_off.size - 1):
        for q in range(kill_off[k], kill_off[k + 1]):
            b = kill_blocks[q]
            if last[b] >= 0:
                _range_add(b1, b2, last[b], last[b], -weight[b])
                last[b] = -1
        open_ = False
        s_old = 0  # previous time of the segment's first block
        prev_b = -1
        prev_p = -1
        for r in range(ref_off[k], ref_off[k + 1]):
            i = r - ref_off[k]
            is_read = i < n_read[k]
            j = i if is_read else write_pos[k] + i - n_read[k]
            b = ref_block[r]
            p = last[b]
            if p < 0:
                weight[b] = min(bs, n_in[k] - j * bs)
            w = weight[b]
            rt = min(bs, reused[k] - j * bs) if is_read else 0
            seg = segs[ns - 1] if open_ else segs[0]
            extend = (
                open_
                and seg[S_IS_READ] == is_read
                and seg[S_W] == w
                and b != prev_b
                and (
                    (p < 0 and seg[S_DIST] < 0)
                    or (p >= 0 and seg[S_DIST] >= 0 and p == prev_p + 1 and p < seg[S_REF0])
                )
            )
            if extend:
                seg[S_N] += 1
                seg[S_READ_TOK] += rt
            else:
                if open_:
                    _close(b1, b2, segs[ns - 1], s_old)
                if ns == cap:
                    grown = np.empty((cap * 2, 7), np.int64)
                    grown[:cap] = segs
                    segs = grown
                    cap *= 2
                dist = _prefix(b1, b2, r) - _prefix(b1, b2, p) if p >= 0 else -1
                row = segs[ns]
                row[S_CALL], row[S_REF0], row[S_N], row[S_W] = k, r, 1, w
                row[S_READ_TOK], row[S_IS_READ], row[S_DIST] = rt, is_read, dist
                ns += 1
                open_ = True
                s_old = p
            last[b] = r
            prev_b = b
            prev_p = p
        if open_:
            _close(b1, b2, segs[ns - 1], s_old)
    final = np.full(n_blocks, -1, np.int64)
    total = _prefix(b1, b2, t_all)
    for b in range(n_blocks):
        if last[b] >= 0:
            final[b] = total - _prefix(b1, b2, last[b])
    return segs[:ns].copy(), weight, final, last


@nb.njit(cache=True, inline="always")
def _close(b1, b2, seg, s_old):  # pragma: no cover (compiled)
    """Move the segment's blocks from their previous times to the segment's times."""
    n, w = seg[S_N], seg[S_W]
    if seg[S_DIST] >= 0:
        _range_add(b1, b2, s_old, s_old + n - 1, -w)
    _range_add(b1, b2, seg[S_REF0], seg[S_REF0] + n - 1, w)
