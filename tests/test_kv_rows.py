"""The streaming replay's KV outcome (agentx/kv/rows.py) gives the whole frame's rows exactly.

``replay_tiers(..., lazy=True)`` keeps the chain kernel's per-call counts in row order and makes
each partition's ``PER_CALL`` rows when asked: any cut of the rows into consecutive slices must
give exactly the rows of the whole frame, and the summary must equal the whole one (integers
exactly; float sums within 1e-9, and bit for bit when one slice holds every row).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.errors import UsageError
from agentx.kv import KV_ONLY_COLUMNS, capacities_for, replay_tiers
from agentx.kv.blocks import geometry
from agentx.kv.chains import ChainState, chain_outcomes
from agentx.kv.rows import RowOutcome
from agentx.replay import make_config
from agentx.traces.synth import synthesize

CFG = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
TRACES = {seed: synthesize(12, seed=seed) for seed in (2, 5)}
CAPS = {
    "default": None,
    "tiny": capacities_for(CFG, hbm_bytes=1e9, dram_bytes=5e9, ssd_bytes=2e10),
    "none": capacities_for(CFG, hbm_bytes=0, dram_bytes=0, ssd_bytes=0),
}


def _copy(trace):  # lazy=True drops columns of the frame it is given, in place
    return dataclasses.replace(trace, calls=trace.calls.clone())


def _close(a, b, path="kv") -> None:
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300), (path, a, b)
    else:
        assert a == b, (path, a, b)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(sorted(TRACES)),
    st.sampled_from(sorted(CAPS)),
    st.lists(st.integers(0, 400), max_size=6),
)
def test_any_row_slices_equal_the_whole_frame(seed, caps, cuts):
    trace = TRACES[seed]
    whole = replay_tiers(trace, CFG, CAPS[caps])
    lazy = replay_tiers(_copy(trace), CFG, CAPS[caps], lazy=True)
    n = trace.calls.height
    assert lazy.per_call.height == n
    bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        got = lazy.per_call.slice(a, b - a)
        want = whole.per_call.slice(a, b - a)
        assert got.schema == want.schema
        for c in want.columns:  # bit for bit (calls.parquet bytes follow)
            assert np.array_equal(got[c].to_numpy(), want[c].to_numpy()), c
    if len(bounds) == 2:  # one slice: the very same sums
        assert lazy.summary == whole.summary
    else:
        _close(lazy.summary, whole.summary)


def test_summary_needs_every_row_sliced():
    lazy = replay_tiers(_copy(TRACES[2]), CFG, lazy=True)
    lazy.per_call.slice(0, 5)
    left = TRACES[2].calls.height - 5
    with pytest.raises(UsageError, match=f"^{left} rows of the KV outcome were not sliced yet$"):
        _ = lazy.summary


def test_lazy_hands_the_kv_only_columns_back():
    trace = _copy(TRACES[5])
    replay_tiers(trace, CFG, lazy=True)
    assert not set(KV_ONLY_COLUMNS) & set(trace.calls.columns)
    assert trace.calls.height == TRACES[5].calls.height


def test_kernel_counts_are_32_bit_unless_a_prompt_reaches_2_31_tokens():
    # two chains of one call each: a 3-block prompt, then (a later call) a prompt of 2^31 tokens
    bs = 1 << 28

    def feed(n_in):  # fmt: skip
        st_ = ChainState((1e12, 1e13, 1e14), bs, pool=16, n_shared=0)
        n_blk = -(-np.asarray(n_in, np.int64) // bs)
        zero = np.zeros(len(n_in), np.int64)
        return st_.feed(np.array([0, 4][: len(n_in)]), n_blk, zero, zero, n_in, zero, zero, zero)

    small = feed([3 * bs - 7])
    assert small.dtype == np.int32
    both = feed([3 * bs - 7, 2**31 + 5])
    assert both.dtype == np.int64
    assert np.array_equal(both[:1], small)  # the same counts, only wider
    assert both[1, 6] == 2**31 + 5  # every token of the big prompt is created, none lost


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(sorted(TRACES)),
    st.integers(1, 70),
    st.lists(st.integers(0, 400), max_size=6),
)
def test_rows_held_in_blocks_of_any_size_give_the_same_rows(seed, block_rows, cuts):
    trace = TRACES[seed]
    whole = replay_tiers(trace, CFG).per_call
    g = geometry(trace)
    acc, _ = chain_outcomes(g, capacities_for(CFG).tokens(CFG.kv_bytes_per_token), by_row=17)
    n = trace.calls.height
    rows = RowOutcome(acc, n, CFG, lambda sums: sums, block_rows=block_rows)
    bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        got = rows.slice(a, b - a)
        for c in whole.columns:
            assert np.array_equal(got[c].to_numpy(), whole[c][a:b].to_numpy()), c
    assert rows._acc is None  # let go once every row was made
    with pytest.raises(UsageError, match=r"^rows 0\.\.0 of the KV outcome were sliced before$"):
        rows.slice(0, 1)
    with pytest.raises(UsageError, match=rf"^rows {n}\.\.{n} are outside 0\.\.{n - 1}$"):
        rows.slice(n, 1)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(TRACES)), st.integers(1, 90))
def test_outcome_by_row_in_any_batches_is_the_time_order_put_at_its_rows(seed, batch):
    """A streaming replay runs the chain kernel in time-ordered batches and puts each batch's
    outcome at its trace rows beside it: the rows hold exactly what one pass in time order
    gives, for any batch size, and the lazy rows made from them are the whole frame's; the
    column sums the worker adds up as it puts the batches are the outcome's."""
    trace = TRACES[seed]
    g = geometry(trace)
    caps = capacities_for(CFG).tokens(CFG.kv_bytes_per_token)
    acc, glob = chain_outcomes(g, caps)
    sums = np.full(7, -1, np.int64)  # every entry is written
    got, glob2 = chain_outcomes(g, caps, by_row=batch, sums=sums)
    want = np.empty_like(acc)
    want[g.row] = acc
    assert got.dtype == acc.dtype and np.array_equal(got, want)
    assert np.array_equal(glob, glob2)
    assert sums.tolist() == [int(acc[:, c].sum()) for c in range(7)]
    rows = RowOutcome(got, trace.calls.height, CFG, lambda sums: sums)
    whole = replay_tiers(trace, CFG).per_call
    assert rows.slice(0, trace.calls.height).equals(whole)
