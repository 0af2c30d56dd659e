"""Small compiled helpers shared by the KV kernels, written to compile fast on a fresh install."""

from __future__ import annotations

import numba as nb


@nb.njit(cache=True)
def bisect(a, x):  # pragma: no cover (compiled)
    """``np.searchsorted(a, x)`` (side left) for sorted ``a``: numba's own searchsorted adds
    0.2-0.3 s of compile to each kernel that uses it on a fresh install."""
    lo, hi = 0, a.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo
