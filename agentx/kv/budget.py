"""The reference budget: block references counted in closed form, and the block size that fits.

A stream of more than ``max_refs`` references is re-blocked to the smallest power-of-two
multiple of the asked block size that fits (docs/kv-tiers.md, "Memory budget"). The counts at
every doubling come from one pass and add up over batches of calls, so a streamed caller
(``ref_counts`` per batch, summed, then ``pick_block_size``) fits the budget exactly as
``fit_block_size`` does for the whole trace.
"""

from __future__ import annotations

import numpy as np

from agentx.errors import UsageError
from agentx.kv.geometry_ops import ref_counts

__all__ = [
    "doublings", "fit_block_size", "fit_counted", "pick_block_size", "ref_count", "ref_counts",
]  # fmt: skip


def ref_count(n_in: np.ndarray, reused: np.ndarray, bs: int, use_hashes: bool) -> int:
    """References of the stream at block size ``bs``, in closed form (as ``ref_off`` counts
    them: ``ceil(R/B)`` reads, writes from ``ceil(R/B)`` (hashes) or ``floor(R/B)`` on).
    Plain numpy: a trace that fits at the asked size (the bundled sample) compiles no kernel.
    Counted ``COUNT_ROWS`` calls at a time: whole-trace temporaries would be seven fresh
    8-byte arrays of the trace's length (560 MB of first-touched pages at 10 M calls)."""
    n_in, reused = _i64(n_in), _i64(reused)
    total = 0
    for a in range(0, n_in.size, COUNT_ROWS):
        i, r = n_in[a : a + COUNT_ROWS], reused[a : a + COUNT_ROWS]
        n_read = -(-r // bs)
        write_pos = n_read if use_hashes else r // bs
        total += int((n_read + -(-i // bs) - write_pos).sum())
    return total


COUNT_ROWS = 1 << 16  # calls per step of ref_count: its temporaries stay in cache


def fit_block_size(
    n_in: np.ndarray, reused: np.ndarray, bs: int, use_hashes: bool, max_refs: int
) -> tuple[int, str]:
    """``bs`` doubled until the stream has at most ``max_refs`` references, and why."""
    _check_budget(max_refs)
    n_in, reused = _i64(n_in), _i64(reused)
    # a long trace is counted at every size in one compiled pass (its first count is
    # ref_count's): the numpy count first was 0.09 s of a 10 M-call trace's geometry, spent
    # again whenever it does not fit; a short one (the sample) compiles no kernel
    if n_in.size < COUNT_KERNEL_CALLS and ref_count(n_in, reused, bs, use_hashes) <= max_refs:
        return bs, ""
    k = doublings(bs, max(int(n_in.max(initial=1)), 1))
    return pick_block_size(ref_counts(n_in, reused, bs, k, use_hashes), bs, max_refs)


COUNT_KERNEL_CALLS = 1 << 20  # calls from which fit_block_size counts with ref_counts only


def fit_counted(count, bs: int, top: int, max_refs: int) -> tuple[int, str]:
    """``fit_block_size`` given ``count(b)``, the references at block size ``b``, and ``top``,
    the longest prompt (for a caller that has counted every candidate size already)."""
    _check_budget(max_refs)
    first = int(count(bs))
    if first <= max_refs:
        return bs, ""
    sizes = range(1, doublings(bs, top))
    return pick_block_size(np.array([first, *(int(count(bs << j)) for j in sizes)]), bs, max_refs)


def doublings(bs: int, top_tokens: int) -> int:
    """Sizes ``bs * 2**j`` tried: up to the first past twice the longest prompt (there every
    call has at most 2 references, so doubling further cannot help)."""
    k = 1
    while (bs << (k - 1)) < 2 * top_tokens:
        k += 1
    return k


def pick_block_size(counts: np.ndarray, bs: int, max_refs: int) -> tuple[int, str]:
    """The first size ``bs * 2**j`` whose reference count ``counts[j]`` fits the budget (the
    counts of ``ref_counts``, which add up over batches), and the note saying why."""
    fits = np.flatnonzero(counts <= max_refs)
    j = int(fits[0]) if fits.size else counts.size - 1
    n, first = int(counts[j]), int(counts[0])
    if n > max_refs:
        raise UsageError(
            f"the trace needs {n:,} block references even with one block per prompt; "
            f"raise --max-block-refs above {max_refs:,}"
        )
    if j == 0:
        return bs, ""
    return bs << j, (
        f"re-blocked from {bs} to {bs << j} tokens: {first:,} block references exceed the "
        f"budget of {max_refs:,} (--max-block-refs); {n:,} at {bs << j}"
    )


def _check_budget(max_refs: int) -> None:
    if max_refs <= 0:
        raise UsageError(f"--max-block-refs must be positive, got {max_refs}")


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)
