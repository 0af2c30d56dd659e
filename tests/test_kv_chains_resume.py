"""The chain kernel resumes: batches of calls, recycled chain slots and grown pools change nothing.

A streaming caller (out-of-core replay) feeds ``ChainState`` consecutive time-ordered batches,
hands back the slots of chains that have ended and grows the pools as chains appear; every
call's outcome and the global counters must equal one whole ``chain_outcomes`` pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.errors import UsageError
from agentx.kv.blocks import geometry
from agentx.kv.chains import ChainState, chain_outcomes
from agentx.testing import trace_objects
from agentx.traces.synth import synthesize

CAPS = st.sampled_from([(1e3, 1e4, 1e5), (0, 0, 3e4), (1e5, 1e6, 1e15), (0, 0, 0)])
SYNTH = {seed: synthesize(15, seed=seed) for seed in (1, 4)}


def cols(g, sel=slice(None)):
    return [a[sel] for a in (g.n_blk, g.n_read, g.write_pos, g.n_in, g.reused, g.spt, g.sh_base)]


def streamed(g, caps, cuts, window):
    """Feed the calls in batches cut at ``cuts``; chains get slots when first seen (reusing
    released ones first-fit) and give them back after their last call."""
    n = g.chain.size
    width = np.zeros(int(g.chain.max(initial=-1)) + 1, np.int64)
    np.maximum.at(width, g.chain, g.n_blk)
    last = np.zeros(width.size, np.int64)
    last[g.chain] = np.arange(n)  # the last write wins: each chain's last call
    st_ = ChainState(caps, g.bs, window=window)
    slot, free, top, out = {}, [], 0, []
    bounds = [0, *sorted(set(cuts)), n]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        if lo >= hi:
            continue
        for c in dict.fromkeys(g.chain[lo:hi].tolist()):
            if c not in slot:
                fit = next((f for f in free if f[1] >= width[c]), None)
                if fit is not None:
                    free.remove(fit)
                    slot[c] = fit[0]
                else:
                    slot[c], top = top, top + int(width[c])
        st_.grow(pool=top, n_shared=int((g.sh_base + g.spt)[lo:hi].max(initial=0)))
        base = np.array([slot[c] for c in g.chain[lo:hi].tolist()], np.int64)
        out.append(st_.feed(base, *cols(g, slice(lo, hi))))
        ended = [c for c in dict.fromkeys(g.chain[lo:hi].tolist()) if last[c] < hi]
        st_.release([slot[c] for c in ended])
        free += [(slot.pop(c), int(width[c])) for c in ended]
    return np.concatenate(out) if out else np.zeros((0, 7), np.int64), st_.glob


@settings(max_examples=60, deadline=None)
@given(
    trace_objects(max_sessions=5, max_calls_per_session=8),
    CAPS,
    st.lists(st.integers(0, 40), max_size=6),
    st.sampled_from([4, 50, 1 << 20]),
    st.sampled_from([None, 128]),
)
def test_any_batches_and_recycled_slots_equal_one_pass(trace, caps, cuts, window, bs):
    g = geometry(trace, bs)
    acc, glob = chain_outcomes(g, caps)
    acc2, glob2 = streamed(g, caps, cuts, window)
    assert np.array_equal(acc, acc2) and np.array_equal(glob, glob2)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([1, 4]), CAPS, st.lists(st.integers(0, 400), max_size=8))
def test_synthetic_sessions_any_batches(seed, caps, cuts):
    g = geometry(SYNTH[seed], 256)
    acc, glob = chain_outcomes(g, caps)
    acc2, glob2 = streamed(g, caps, cuts, 64)
    assert np.array_equal(acc, acc2) and np.array_equal(glob, glob2)


def test_positions_outside_the_pool_are_refused():
    st_ = ChainState((1, 2, 3), 64, pool=4)
    one = np.ones(1, np.int64)
    with pytest.raises(UsageError, match=r"^chain positions outside the pool of 4 \(grow it\)$"):
        st_.feed(one * 2, one * 3, one, one, one * 150, one * 64, one * 0, one * 0)
    with pytest.raises(UsageError, match=r"^shared blocks outside the pool of 0 \(grow it\)$"):
        st_.feed(one * 0, one * 3, one, one, one * 150, one * 64, one * 2, one * 0)
