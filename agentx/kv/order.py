"""Stable orders of long columns at the cost of an unstable sort: one fast sort, then only the
runs of equal values put back in order (``resort_ties``), and the sort that is fast where.

numpy's quicksort (``np.argsort``, ``np.sort``) is x86-simd-sort's AVX-512 code wherever the
CPU has AVX-512, and that code writes each partition through ``vpcompressq`` to memory, which is
microcoded at about 140 cycles on AMD Zen 4 (numpy/x86-simd-sort issue 6; numpy/numpy pull
request 32690), the usual cloud EPYC (Genoa). Measured on one (benchmarks/bench_geometry.py,
10 M start times of a synthetic trace, whose sessions are runs already in time order):
``np.argsort`` 1.09-1.19 s, ``kind="stable"`` (timsort, which takes the runs as they are)
0.81-0.83 s, polars' sort 0.46-0.48 s wall but 0.87-0.91 CPU s on two cores and 240 MB of
pairs and buffers (a 10 M-call replay, five alternating runs each: median 11.33 s with
numpy's stable sort against 11.74 s with polars'). On the VM of an earlier round (not Zen 4)
the AVX-512 quicksort was the fast one: about a third of the stable sort's time on the same
start times.

So ``argsort_times`` (columns made of sorted runs) takes numpy's stable sort on Zen 4 and its
quicksort elsewhere, and ``argsort`` / ``sort`` (values in no order: reuse distances, segment
boundaries) take polars' (21 M random int64: ``np.sort`` 2.14 s, polars 0.50 s).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def _microcoded_compress() -> bool:
    """Whether this CPU is AMD family 25 (Zen 3 and 4; only Zen 4 has AVX-512) with AVX-512:
    read from the first processor of /proc/cpuinfo (False where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            head = f.read(8192).split("\n\n", 1)[0]
    except OSError:
        return False
    info = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
    info = {k.strip(): v.strip() for k, v in info.items()}
    return (
        info.get("vendor_id") == "AuthenticAMD"
        and info.get("cpu family") == "25"
        and "avx512f" in info.get("flags", "").split()
    )


TIME_SORT = "stable" if _microcoded_compress() else "quicksort"


def argsort_times(t: np.ndarray) -> np.ndarray:
    """A permutation that sorts ``t`` (NaN last; ties in any order), for columns made of
    sorted runs (a trace's start or finish times): numpy's sort, of the kind fast here."""
    return np.argsort(t, kind=TIME_SORT)


def argsort(values: np.ndarray) -> np.ndarray:
    """A permutation that sorts ``values`` (NaN last; ties in any order) by polars' sort, as
    unsigned row numbers (polars' index type, uint32 or uint64), writable."""
    return pl.Series(values, nan_to_null=False).arg_sort().to_numpy(writable=True)


def sort(values: np.ndarray) -> np.ndarray:
    """``values`` sorted (a new array, read-only) by polars' sort."""
    return pl.Series(values, nan_to_null=False).sort().to_numpy()


def resort_ties(order: np.ndarray, ts: np.ndarray, keys=lambda r: ()) -> None:
    """Put each run of equal sorted values ``ts`` of ``order`` back in order of ``keys(rows)``
    (np.lexsort's order: last key most significant), then of row, in place: after one fast
    sort, a stable multi-key sort."""
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
