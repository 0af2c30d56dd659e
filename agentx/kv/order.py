"""Stable orders of long float columns at the cost of an unstable sort: one fast sort, then
only the runs of equal values put back in order (``resort_ties``).

The fast sort is polars', not ``np.argsort``: numpy's quicksort of floats and integers is
x86-simd-sort's AVX-512 code wherever the CPU has AVX-512, and that code writes each partition
through ``vpcompressq`` to memory, microcoded at about 140 cycles on AMD Zen 4 (numpy/x86-simd-sort
issue 6; numpy/numpy pull request 32690). On a Zen 4 EPYC (benchmarks/bench_geometry.py), a
10 M-call trace's start times: ``np.argsort`` 1.11-1.19 s, ``kind="stable"`` 0.83 s, polars
0.46 s wall (0.87 CPU s on two cores, and half the output: uint32); half of them 0.59 s against
0.22 s. In a 10 M-call replay numpy's sorts were 17 % of the CPU samples there (perf).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def argsort(values: np.ndarray) -> np.ndarray:
    """A permutation that sorts ``values`` (NaN last; equal values in any order), as unsigned
    row numbers (polars' index type, uint32 or uint64), writable; ``values`` is not copied."""
    return pl.Series(values, nan_to_null=False).arg_sort().to_numpy(writable=True)


def resort_ties(order: np.ndarray, ts: np.ndarray, keys=lambda r: ()) -> None:
    """Put each run of equal sorted values ``ts`` of ``order`` back in order of ``keys(rows)``
    (np.lexsort's order: last key most significant), then of row, in place: after one fast
    sort (``argsort``), a stable multi-key sort."""
    resort_runs(order, ts[1:] == ts[:-1], keys)


def resort_runs(order: np.ndarray, eq: np.ndarray, keys) -> None:
    """``resort_ties`` given ``eq`` (sorted value i+1 equals value i). Only the tied rows get
    arrays of their own: a whole-length one would be pages touched once."""
    if not eq.any():
        return
    member = np.zeros(eq.size + 1, bool)
    member[1:] = eq
    member[:-1] |= eq
    pos = np.flatnonzero(member)
    # a tied row opens its group unless it equals the row before it
    opens = np.ones(pos.size, bool)
    inner = pos > 0
    opens[inner] = ~eq[pos[inner] - 1]
    group = np.cumsum(opens)
    r = order[pos]
    order[pos] = r[np.lexsort((r, *keys(r), group))]
