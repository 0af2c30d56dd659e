"""Exact LRU by reuse distance: one pass of Mattson's stack algorithm (the one sequential kernel).

For every block reference the kernel returns its reuse distance: the tokens of distinct blocks
touched since the block's previous reference, plus its own (first touch: -1, infinite). An LRU
cache of C tokens holds the block at that moment iff distance ≤ C, so one pass answers every
capacity, and LRU's inclusion property makes a hierarchy HBM ⊂ DRAM ⊂ SSD a comparison with
three numbers (Mattson et al., "Evaluation techniques for storage hierarchies", 1970).

Distances come from a Fenwick tree over reference times holding, at each block's latest
reference time, that block's tokens. A call re-reads its whole prefix in the order it was last
read, so consecutive references whose previous references were also consecutive all share one
distance (proof in docs/kv-tiers.md). Pass 1 walks the references and cuts them into such
*segments* (this needs only each block's previous time, not distances); pass 2 walks the
segments with a range-update/range-query Fenwick pair over just the segments' boundary times
(coordinate-compressed, so the trees stay in cache): one query and two range moves per segment.
When nearly every reference is its own segment (random-looking streams), compression would not
shrink the tree: a plain one-column tree over every time, built as time goes, takes them all;
then pass 2 of each batch of calls runs beside pass 1 of the next, on the other core
(docs/kv-tiers.md).

This module owns the driver (``lru_stack``: inputs, the choice of time axis, the result); the
compiled passes live in ``agentx.kv.stack_passes``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from agentx.kv.blocks import BlockStream
from agentx.kv.order import sort

# The kernel's segment table columns and the compiled passes: agentx.kv.stack_passes.
from agentx.kv.stack_passes import (
    S_CALL,
    S_DIST,
    S_IS_READ,
    S_N,
    S_OLD,
    S_READ_TOK,
    S_REF0,
    S_SW,
    S_W,
    _distance_pass,
    _point_final,
    _point_pass,
    _segment_pass,
)

__all__ = [
    "S_CALL",
    "S_DIST",
    "S_IS_READ",
    "S_N",
    "S_OLD",
    "S_READ_TOK",
    "S_REF0",
    "S_SW",
    "S_W",
    "StackResult",
    "lru_stack",
    "point_axis",
]


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


def lru_stack(stream: BlockStream, kill_off=None, kill_blocks=None, free=None) -> StackResult:
    """Run the kernel; ``kill_*`` (CSR per call) frees blocks before a call (session-aware)."""
    if kill_off is None:
        kill_off = np.zeros(stream.n_calls + 1, np.int64)
        kill_blocks = np.zeros(0, np.int64)
    p1 = _Pass1(stream, kill_off, kill_blocks, free)
    p1.run(p1.batch_end(0))  # the first batch says which pass 2 fits
    if not point_axis(p1.ns, int(stream.ref_off[p1.k])):
        while p1.k < stream.n_calls:  # in batches: the table grows at the rate so far
            p1.run(p1.batch_end(p1.k))
        segs, last, kill_pos, kill_w = p1.segs[: p1.ns], p1.last, p1.kill_pos, p1.kill_w
        old = segs[segs[:, S_DIST] >= 0]
        live = kill_pos >= 0
        coords = _unique(
            np.concatenate(
                (
                    segs[:, S_REF0] + 1,
                    segs[:, S_REF0] + segs[:, S_N] + 1,
                    old[:, S_OLD] + 1,
                    old[:, S_OLD] + old[:, S_N] + 1,
                    kill_pos[live] + 1,
                    kill_pos[live] + 2,
                )
            )
        )
        final = _distance_pass(
            segs, kill_off, kill_pos, kill_w, coords, last, stream.ref_block.size
        )
    else:
        final = _point_passes(p1, stream, kill_off)
        segs = p1.segs[: p1.ns]
    weight, last = p1.weight, p1.last
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


PASS1_REFS = 1 << 19  # references per batch of pass 1 (beside pass 2 of the batch before)


class _Pass1:
    """Pass 1 (``_segment_pass``) in batches of calls, its state carried between them; the
    segment table grows between batches (never while pass 2 reads it)."""

    def __init__(self, stream: BlockStream, kill_off, kill_blocks, free) -> None:
        self.s, self.kill_off, self.kill_blocks = stream, kill_off, kill_blocks
        self.free = np.zeros(stream.n_blocks, np.bool_) if free is None else free
        self.last = np.full(stream.n_blocks, -1, np.int64)
        self.weight = np.zeros(stream.n_blocks, np.int64)
        self.kill_pos = np.full(kill_blocks.size, -1, np.int64)
        self.kill_w = np.zeros(kill_blocks.size, np.int64)
        self.segs = np.empty((4 * stream.n_calls + 64, 9), np.int64)
        self.k = self.ns = 0

    def batch_end(self, k: int) -> int:
        """The call after a batch of about PASS1_REFS references from call ``k`` (one call
        at least)."""
        off = self.s.ref_off
        return max(k + 1, int(np.searchsorted(off, off[k] + PASS1_REFS, "right")) - 1)

    def make_room(self, k1: int) -> None:
        """Rows for the references of calls self.k..k1: grown once to what the rate so far
        needs (a segment per few references, random ids: a row per reference)."""
        s, need = self.s, self.ns + int(self.s.ref_off[k1] - self.s.ref_off[self.k])
        if need <= self.segs.shape[0]:
            return
        done = max(int(s.ref_off[self.k]), 1)
        if 8 * self.ns >= done:  # random ids: a row per reference
            want = s.n_refs
        else:  # the segments so far, projected to the end
            want = max(2 * self.segs.shape[0], self.ns * s.n_refs // done * 9 // 8)
        grown = np.empty((max(need, min(want, s.n_refs)) + 64, 9), np.int64)
        grown[: self.ns] = self.segs[: self.ns]
        self.segs = grown

    def run(self, k1: int) -> None:
        """Calls self.k..k1 through pass 1."""
        k1 = min(k1, self.s.n_calls)
        if k1 <= self.k:
            return
        self.make_room(k1)
        s = self.s
        self.ns = _segment_pass(
            s.ref_block, s.ref_off, s.n_read, s.write_pos, s.input_tokens, s.reused_tokens,
            s.block_size_tokens, self.kill_off, self.kill_blocks, self.free, self.last,
            self.weight, self.kill_pos, self.kill_w, self.segs, self.k, k1, self.ns,
        )  # fmt: skip
        self.k = k1


def _point_passes(p1: _Pass1, stream: BlockStream, kill_off) -> np.ndarray:
    """Pass 2 over every time (``_point_pass``) batch by batch, each beside pass 1 of the next
    batch on the other core (pass 1 only appends rows; pass 2 reads and fills earlier ones);
    returns each block's final depth."""
    # a node sums live weights, at most one per time: int32 nodes (half the memory walked)
    # when no sum of them can overflow (a block's weight is at most the block size)
    small = stream.n_refs * int(stream.block_size_tokens) < 1 << 31
    pt = np.zeros(stream.n_refs + 2, np.int32 if small else np.int64)
    st = np.zeros(3, np.int64)  # next segment, total weight, times built
    n, done = stream.n_calls, 0  # calls through pass 2
    pool = ThreadPoolExecutor(1) if stream.n_refs >= 2 * PASS1_REFS else None
    try:
        while done < n:
            k0, ns0 = p1.k, p1.ns  # calls before k0 are cut: their rows are before ns0
            k1 = p1.batch_end(k0) if k0 < n else k0
            p1.make_room(k1)  # (while pass 2 is idle)
            later = pool.submit(p1.run, k1) if pool is not None and k1 > k0 else None
            if pool is None:
                p1.run(k1)
            _point_pass(p1.segs, ns0, kill_off, p1.kill_pos, p1.kill_w, pt, st, done, k0)
            if later is not None:
                later.result()
            done = k0
    finally:
        if pool is not None:
            pool.shutdown()
    return _point_final(pt, p1.last, st[1])


def point_axis(n_segs: int, n_refs: int) -> bool:
    """Index the tree by every time unless segments are long: compressing the time axis to the
    segments' boundaries pays when few references start one, not for random streams, where
    nearly every reference is its own segment and direct indexing beats a search."""
    return 8 * n_segs >= n_refs


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values by sorting: numpy 2.4's ``np.unique`` (hash based without
    ``return_inverse``) took 12 s on the 21 M boundaries of a 1 M-call trace, a sort 0.6 s.
    The sort is polars' (``order.sort``: numpy's is microcoded on AMD Zen 4; 21 M random
    int64 there 2.14-2.16 s against 0.50-0.53 s)."""
    if not x.size:
        return x
    x = sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))]
