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
shrink the tree: a plain one-column tree over every time, built as time goes, takes them all.

This module owns the driver (``lru_stack``: inputs, the choice of time axis, the result); the
compiled passes live in ``agentx.kv.stack_passes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentx.kv.blocks import BlockStream

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
    segs, weight, last, kill_pos, kill_w = _segment_pass(
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
        np.zeros(stream.n_blocks, np.bool_) if free is None else free,
    )
    if not point_axis(len(segs), stream.n_refs):
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
        # a node sums live weights, at most one per time: int32 nodes (half the memory
        # walked) when no sum of them can overflow
        small = stream.n_refs * int(np.abs(weight).max(initial=0)) < 1 << 31
        pt = np.zeros(stream.n_refs + 2, np.int32 if small else np.int64)
        final = _point_pass(segs, kill_off, kill_pos, kill_w, last, pt)
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


def point_axis(n_segs: int, n_refs: int) -> bool:
    """Index the tree by every time unless segments are long: compressing the time axis to the
    segments' boundaries pays when few references start one, not for random streams, where
    nearly every reference is its own segment and direct indexing beats a search."""
    return 8 * n_segs >= n_refs


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values by sorting: numpy 2.4's ``np.unique`` (hash based without
    ``return_inverse``) took 12 s on the 21 M boundaries of a 1 M-call trace, a sort 0.6 s."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if x.size else x
