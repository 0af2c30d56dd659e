"""The integer-key geometry (agentx.kv.geometry) equals the polars one it replaced, exactly.

The oracle (tests/_geometry_ref.py) ranks struct-of-strings keys and sorts on the session
strings; the new code ranks only run heads, counts epochs in one pass and sorts one float
column, re-sorting ties. Frames here are drawn wider than valid traces (sessions split into
several runs, repeated call indexes, -0.0 beside 0.0, many equal times), so no shortcut that
relies on validation can hide; valid traces with hashes are checked as well.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
import pytest
from _geometry_ref import old_finish_frame, old_fit_block_size, old_geometry, old_ref_count
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.errors import UsageError
from agentx.kv import budget
from agentx.kv.budget import doublings, fit_block_size, fit_counted, ref_count, ref_counts
from agentx.kv.geometry import batch_geometry, geometry, shared_groups
from agentx.kv.tiers import PER_CALL, finish_frame
from agentx.replay import make_config
from agentx.testing import trace_objects
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata
from agentx.traces.synth import synthesize

CFG = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
ARRAYS = ("row", "n_in", "reused", "n_blk", "n_read", "write_pos", "ref_off", "chain", "agent",
          "spt", "spt_tokens", "sh_base")  # fmt: skip


@st.composite
def loose_frames(draw) -> pl.DataFrame:
    """Rows in any order: sessions may recur, times tie often, agents null or named."""
    n = draw(st.integers(0, 40))
    sessions = draw(
        st.lists(st.sampled_from(["b", "a", "s10", "s9", "é", "ab"]), min_size=n, max_size=n)
    )
    inp = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    frac = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    return pl.DataFrame(
        {
            "session_id": sessions,
            "call_index": draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
            "agent_id": draw(st.lists(st.sampled_from([None, "", "sub1", "sub2"]), min_size=n, max_size=n)),
            "t_start_s": draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.5, 1e6]), min_size=n, max_size=n)),
            "input_tokens": inp,
            "reused_prefix_tokens": [int(i * f) for i, f in zip(inp, frac, strict=True)],
            "is_compaction": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
            "shared_prefix_tokens": draw(st.lists(st.sampled_from([0, 64, 100, 4096]), min_size=n, max_size=n)),
            "block_size_tokens": [None] * n,
            "block_hashes": [None] * n,
        },
        schema={k: S.SCHEMA[k] for k in ("session_id", "call_index", "agent_id", "t_start_s", "input_tokens",
                "reused_prefix_tokens", "is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes")},
    )  # fmt: skip


def assert_same(trace: Trace, bs=None, share=True, max_refs=300_000_000):
    g = geometry(trace, bs, share_prefix=share, max_refs=max_refs)
    df = trace.calls
    asked = bs or g.native or 64
    n_in, reused = (
        df[c].to_numpy().astype(np.int64) for c in ("input_tokens", "reused_prefix_tokens")
    )
    assert (g.bs, g.note) == old_fit_block_size(n_in, reused, asked, g.use_hashes, max_refs)
    old = old_geometry(df, g.bs, g.use_hashes, g.scope, share)
    for name in ARRAYS:
        assert np.array_equal(getattr(g, name), old[name]), name
    assert np.array_equal(g.session, df["session_id"].rank("dense").to_numpy()[g.row] - 1)
    assert g.n_shared == old["n_shared"]
    assert g.n_refs == int(old["ref_off"][-1])


@settings(max_examples=150, deadline=None)
@given(loose_frames(), st.sampled_from([None, 1, 64, 100, 1024]), st.booleans(),
       st.integers(1, 400) | st.just(300_000_000))  # fmt: skip
def test_geometry_equals_the_polars_ranks_on_any_frame(df, bs, share, max_refs):
    try:
        assert_same(Trace(df, {}), bs, share, max_refs)
    except UsageError as e:  # the budget cannot be met: the old search gave up at the same size
        n_in, reused = (
            df[c].to_numpy().astype(np.int64) for c in ("input_tokens", "reused_prefix_tokens")
        )
        old = old_fit_block_size(n_in, reused, bs or 64, False, max_refs)
        assert isinstance(old, str) and old.split()[1] in str(e)


@settings(max_examples=100, deadline=None)
@given(loose_frames(), st.integers(1, 5), st.sampled_from([1, 64, 100]), st.booleans())
def test_geometry_is_the_same_counted_and_tie_checked_in_slices(df, step, bs, hashes):
    """``ref_count`` and the time sort's tie check take a slice of calls at a time
    (``COUNT_ROWS``, ``TIE_STEP``): any slice size gives the whole trace's answer."""
    import agentx.kv.budget as budget
    import agentx.kv.geometry as geo

    saved = budget.COUNT_ROWS, geo.TIE_STEP
    budget.COUNT_ROWS = geo.TIE_STEP = step
    try:
        n_in, reused = (
            df[c].to_numpy().astype(np.int64) for c in ("input_tokens", "reused_prefix_tokens")
        )
        assert ref_count(n_in, reused, bs, hashes) == old_ref_count(n_in, reused, bs, hashes)
        assert_same(Trace(df, {}), bs)
    finally:
        budget.COUNT_ROWS, geo.TIE_STEP = saved


@settings(max_examples=60, deadline=None)
@given(trace_objects(max_sessions=6, max_calls_per_session=10, with_hashes=True), st.booleans(),
       st.sampled_from(["session", "global"]))  # fmt: skip
def test_geometry_equals_on_hashed_traces(trace, share, scope):
    native = trace.calls["block_size_tokens"].drop_nulls().first() if trace.calls.height else None
    meta = trace_metadata("synth", block_size_tokens=native, hash_scope=scope)
    assert_same(Trace(trace.calls, meta), None, share)


@pytest.mark.parametrize("bs", [None, 256, 4096])
def test_geometry_equals_on_synthetic_sessions(bs):
    tr = synthesize(60, seed=3)  # sub-agents, compactions, two shared-prefix sizes
    assert_same(tr, bs)
    assert_same(tr, bs, share=False, max_refs=12_000)  # re-blocks


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**7), st.floats(0, 1)), max_size=30),
       st.sampled_from([1, 3, 64, 1000]), st.booleans(), st.integers(1, 10**6))  # fmt: skip
def test_fit_block_size_equals_the_doubling_loop(calls, bs, hashes, max_refs):
    n_in = np.array([c[0] for c in calls], np.int64)
    reused = np.array([int(c[0] * c[1]) for c in calls], np.int64)
    assert ref_count(n_in, reused, bs, hashes) == old_ref_count(n_in, reused, bs, hashes)
    k = doublings(bs, max(int(n_in.max(initial=1)), 1))
    every = ref_counts(n_in, reused, bs, k, hashes)  # the compiled pass, all sizes at once
    assert list(every) == [old_ref_count(n_in, reused, bs << j, hashes) for j in range(k)]
    top = max(int(n_in.max(initial=1)), 1)
    count = lambda b: old_ref_count(n_in, reused, b, hashes)  # noqa: E731
    old = old_fit_block_size(n_in, reused, bs, hashes, max_refs)
    # a short trace's numpy count first, and a long one's compiled count of every size only
    for kernel_from in (budget.COUNT_KERNEL_CALLS, 0):
        with mock.patch.object(budget, "COUNT_KERNEL_CALLS", kernel_from):
            if isinstance(old, str):
                with pytest.raises(
                    UsageError, match=f"the trace {old} block references even with one block"
                ):
                    fit_block_size(n_in, reused, bs, hashes, max_refs)
            else:
                assert fit_block_size(n_in, reused, bs, hashes, max_refs) == old
    if isinstance(old, str):
        with pytest.raises(
            UsageError, match=f"the trace {old} block references even with one block"
        ):
            fit_counted(count, bs, top, max_refs)
    else:
        assert fit_counted(count, bs, top, max_refs) == old


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**16), st.sampled_from([64, 1024, 8192]), st.booleans())
def test_batches_of_whole_sessions_concatenate_to_the_whole_geometry(n_parts, seed, bs, share):
    """Running offsets + a merge by (time, session, call) rebuild the whole trace's geometry
    (synthetic session ids sort in file order, so session ranks add up across batches)."""
    tr = synthesize(30, seed=seed % 7)
    df = tr.calls
    whole = geometry(tr, bs, share_prefix=share)
    starts = np.flatnonzero(df["session_id"].ne_missing(df["session_id"].shift(1)).to_numpy())
    cuts = sorted(
        {0, df.height, *np.random.default_rng(seed).choice(starts, min(n_parts, starts.size))}
    )
    parts = [df.slice(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    groups = np.unique(np.concatenate([shared_groups(p, bs, share) for p in parts]))
    geos, chain0, agent0, row0, session0 = [], 0, 0, 0, 0
    for p in parts:
        g, keys = batch_geometry(
            p, bs, groups, share_prefix=share,
            chain0=chain0, agent0=agent0, row0=row0, session0=session0,
        )  # fmt: skip
        geos.append(g)
        chain0 += keys.agent_of_chain.size
        agent0 += keys.session_of_agent.size
        row0 += p.height
        session0 += keys.n_sessions
    cat = {
        k: np.concatenate([getattr(g, k) for g in geos])
        for k in (*ARRAYS, "session")
        if k != "ref_off"
    }
    key = pl.DataFrame({"t": df["t_start_s"].to_numpy()[cat["row"]], "r": cat["row"]})
    order = key.select(pl.arg_sort_by(["t", "r"], maintain_order=True)).to_series().to_numpy()
    for k, v in cat.items():
        assert np.array_equal(v[order], getattr(whole, k)), k
    assert {g.n_shared for g in geos} == {whole.n_shared}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 50), st.integers(0, 2**16), st.booleans())
def test_finish_frame_equals_the_time_order_computation(n, seed, float_tokens):
    rng = np.random.default_rng(seed)
    row = rng.permutation(n + 3)[:n]  # some rows without a call stay zero
    acc = rng.integers(0, 10**9, (n, 7))
    cols = {
        name: (acc[:, i].astype(float) if float_tokens else acc[:, i])
        for i, name in enumerate(PER_CALL[:4])
    }
    for i, link in zip(
        (4, 5, 6, 6), ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd"), strict=True
    ):
        cols[f"kv_{link}_bytes"] = acc[:, i]
    bpt = CFG.kv_bytes_per_token
    old_cols = {
        k: (v.astype(np.float64) * bpt if k.endswith("_bytes") else v) for k, v in cols.items()
    }
    want = old_finish_frame(old_cols, row, n + 3, CFG)
    assert finish_frame(cols, row, n + 3, CFG, bpt).equals(want)
    assert finish_frame(old_cols, row, n + 3, CFG).equals(want)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([256, 4096]))
def test_chain_outcomes_do_not_depend_on_how_chains_are_numbered(seed, bs):
    """Batches of a trace whose session ids do not sort in file order number chains otherwise
    than the whole trace; the tier outcomes must not see the difference."""
    from dataclasses import replace

    from agentx.kv.chains import chain_outcomes

    g = geometry(synthesize(12, seed=seed % 5), bs)
    perm = np.random.default_rng(seed).permutation(int(g.chain.max()) + 1).astype(np.int32)
    caps = np.array([1e5, 1e6, 1e8])
    acc, glob = chain_outcomes(g, caps)
    acc2, glob2 = chain_outcomes(replace(g, chain=perm[g.chain]), caps)
    assert np.array_equal(acc, acc2) and np.array_equal(glob, glob2)


@pytest.mark.parametrize("like", [np.int32, np.int64])
def test_assemble_on_both_cores_equals_one(like):
    # traces from PARALLEL_FROM_CALLS calls up assemble their geometry with a parallel loop
    from agentx.kv.geometry_ops import _assemble_parallel, _assemble_serial

    rng = np.random.default_rng(5)
    n, chains = 50_000, 700
    row = rng.permutation(n).astype(np.int32)
    n_in = rng.integers(0, 200_000, n)
    reused = (n_in * rng.random(n)).astype(np.int64)
    chain = rng.integers(0, chains, n).astype(np.int32)
    spt_c, shb_c = rng.integers(0, 9, chains), rng.integers(0, 99, chains)
    for bs, hashes in ((64, False), (100, True)):
        args = (row, n_in, reused, chain, spt_c, shb_c, bs, hashes, np.empty(0, like))
        one, both = _assemble_serial(*args), _assemble_parallel(*args)
        assert one[8] == both[8]
        for a, b in zip(one[:8], both[:8], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
