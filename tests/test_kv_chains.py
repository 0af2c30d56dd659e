"""The chain kernel (agentx.kv.chains) equals the block-stream LRU path exactly.

``replay_tiers`` takes the chain kernel for traces without hashes under lru + write-through;
the block stream (build_blocks → stack → outcome → per_call_frame) stays the reference. Small
capacities move the horizon, tiny windows force many compactions: neither may change a number.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.kv import TierCapacities, capacities_for, replay_tiers, summarize
from agentx.kv.blocks import build_blocks, geometry
from agentx.kv.chains import chain_outcomes
from agentx.kv.policies import outcome
from agentx.kv.tiers import per_call_frame
from agentx.replay import make_config
from agentx.testing import trace_objects
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata
from agentx.traces.synth import synthesize

CFG = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
BPT = CFG.kv_bytes_per_token


def stream_path(trace, caps, bs=None):
    s = build_blocks(trace, bs)
    out = outcome("lru", s, caps.tokens(BPT))
    pc = per_call_frame(out, s, trace.calls.height, BPT, CFG)
    return pc, summarize(out, pc, s, caps, "lru", "write-through", CFG)


caps_st = st.builds(
    TierCapacities,
    st.sampled_from([0.0, 1e6, 3e7, 1e9, 1e12]),
    st.sampled_from([0.0, 1e7, 1e8, 1e10]),
    st.sampled_from([0.0, 1e8, 1e9, 1e11, 1e15]),
)


@settings(max_examples=60)
@given(trace_objects(max_sessions=5, max_calls_per_session=8), caps_st, st.booleans())
def test_chain_kernel_equals_block_stream(trace, caps, share):
    pc, summary = stream_path(trace, caps)
    got = replay_tiers(trace, CFG, caps, share_prefix=share)
    if not share:
        s = build_blocks(trace, share_prefix=False)
        out = outcome("lru", s, caps.tokens(BPT))
        pc = per_call_frame(out, s, trace.calls.height, BPT, CFG)
        summary = summarize(out, pc, s, caps, "lru", "write-through", CFG)
    assert got.per_call.equals(pc)
    assert got.summary == summary


@pytest.mark.parametrize(
    "caps",
    [None, TierCapacities(1e9, 5e10, 2e11), TierCapacities(0, 0, 1e10), TierCapacities(0, 0, 0)],
)
@pytest.mark.parametrize("bs", [None, 4096])
def test_synthetic_sessions_equal_block_stream(caps, bs):
    tr = synthesize(40, seed=5)
    caps = caps or capacities_for(CFG)
    pc, summary = stream_path(tr, caps, bs)
    got = replay_tiers(tr, CFG, caps, block_size_tokens=bs)
    assert got.per_call.equals(pc)
    assert got.summary == summary


@settings(max_examples=15)
@given(st.integers(4, 5000), st.sampled_from([1e8, 1e10, 1e15]))
def test_any_window_gives_the_same_outcomes(window, ssd):
    tr = synthesize(12, seed=2)
    g = geometry(tr, 256)
    caps = np.array([1e5, 1e6, ssd / BPT])
    acc, glob = chain_outcomes(g, caps, window=1 << 20)
    acc2, glob2 = chain_outcomes(g, caps, window=window)
    assert np.array_equal(acc, acc2) and np.array_equal(glob, glob2)


@settings(max_examples=40)
@given(
    st.integers(0, 40),
    st.sampled_from([64, 256, 4096]),
    st.integers(4, 3000),
    st.sampled_from([0.0, 1.0, 1e4, 1e5, 3e5, 1e6, 1e8]),
    st.sampled_from([0.0, 1e5, 1e6, 1e9]),
)
def test_hbm_boundary_shortcut_equals_the_trees_distances(seed, bs, window, hbm, more):
    """A block used again after the HBM boundary is called an HBM hit without a query of the
    tree (chain_ops._slot_add); with records on (kv-curve) every run asks the tree. Both must
    give every call the same outcome, through compactions (small windows) and at HBM
    capacities from none to the whole trace."""
    from agentx.kv.chains import ChainState, chain_pass

    g = geometry(synthesize(10, seed=seed), bs)
    caps = np.array([hbm, hbm + more, hbm + 2 * more + 1e6])
    st_fast, acc = chain_pass(g, caps, window=window)
    st_tree, acc_tree = chain_pass(g, caps, window=window, record=True)
    assert isinstance(st_fast, ChainState) and st_tree.records().shape[0] > 0
    assert np.array_equal(acc, acc_tree) and np.array_equal(st_fast.glob, st_tree.glob)


@settings(max_examples=20)
@given(trace_objects(max_sessions=5, max_calls_per_session=8), caps_st)
def test_curve_point_sums_equal_the_per_call_frame(trace, caps):
    """kv-curve's per-point totals (agentx.kv.curve._link_sums) are the per-call frame's sums."""
    from agentx.kv.curve import _link_sums

    s = build_blocks(trace)
    out = outcome("lru", s, caps.tokens(BPT))
    pc = per_call_frame(out, s, trace.calls.height, BPT, CFG)
    got = _link_sums(out, s.n_calls, BPT, CFG)
    for link in ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd"):
        assert got[f"{link}_bytes"] == pytest.approx(pc[f"kv_{link}_bytes"].sum(), rel=1e-12)
    assert got["transfer_time_s"] == pytest.approx(pc["kv_transfer_time_s"].sum(), rel=1e-12)
    assert got["transfer_energy_j"] == pytest.approx(pc["kv_transfer_energy_j"].sum(), rel=1e-12)


def _rows_trace(rows) -> Trace:
    base = {"agent_id": None, "output_tokens": 10, "is_compaction": False, "block_size_tokens": None,
            "block_hashes": None, "trigger": "user", "think_time_s": None, "model": None, "source": "test"}  # fmt: skip
    full = [
        {**base, **r, "new_tokens": r["input_tokens"] - r["reused_prefix_tokens"]} for r in rows
    ]
    return Trace(
        pl.DataFrame(full, schema=S.SCHEMA),
        trace_metadata("synth", block_size_tokens=None, hash_scope="none"),
    )


@pytest.mark.parametrize("ssd_tokens", [0, 64, 100, 200, 320, 400, 10_000])
def test_shared_writes_reusing_the_same_calls_shared_reads(ssd_tokens):
    """A reused prefix that ends inside a block of the shared prefix: the call reads shared
    blocks 0..4 and writes 4..9 again, so block 4's write is a reuse within the call. Its
    distance is block 4 alone (64 tokens), not the call's five shared reads (320): the blocks
    read before it (0..3) stay behind it (chain_ops._call's one exception). SSD capacities
    around both distances decide whether the write counts as created."""
    bs = 64
    rows = [
        {"session_id": "a", "call_index": 0, "t_start_s": 0.0, "input_tokens": 1000,
         "reused_prefix_tokens": 0, "shared_prefix_tokens": 640},
        {"session_id": "b", "call_index": 0, "t_start_s": 5.0, "input_tokens": 1000,
         "reused_prefix_tokens": 300, "shared_prefix_tokens": 640},
        {"session_id": "b", "call_index": 1, "t_start_s": 9.0, "input_tokens": 1200,
         "reused_prefix_tokens": 1000, "shared_prefix_tokens": 640},
    ]  # fmt: skip
    trace = _rows_trace(rows)
    caps = TierCapacities(0.0, 0.0, ssd_tokens * BPT)
    pc, summary = stream_path(trace, caps, bs)
    got = replay_tiers(trace, CFG, caps, block_size_tokens=bs)
    assert got.per_call.equals(pc)
    assert got.summary == summary


@settings(max_examples=60)
@given(
    trace_objects(max_sessions=4, max_calls_per_session=6),
    st.lists(st.integers(0, 63), min_size=24, max_size=24),
    st.sampled_from([64, 192, 640]),
    caps_st,
)
def test_unaligned_reuse_inside_long_shared_prefixes_equals_block_stream(trace, cut, spt, caps):
    """Reused prefixes that end inside a block (a shared one too) and shared prefixes of
    several blocks, which block-aligned traces never reach: every outcome still equals the
    block stream. (Whether such a run's distance crosses a tier depends on the capacities;
    test_shared_writes_reusing_the_same_calls_shared_reads pins that case exactly.)"""
    df = trace.calls
    if df.height == 0:
        return
    back = pl.Series([cut[i % len(cut)] for i in range(df.height)])
    reused = (df["reused_prefix_tokens"] - back).clip(lower_bound=0)
    df = df.with_columns(
        reused_prefix_tokens=reused,
        new_tokens=df["input_tokens"] - reused,
        shared_prefix_tokens=pl.min_horizontal(pl.lit(spt), df["input_tokens"]),
    )
    trace = Trace(df, trace.meta)
    pc, summary = stream_path(trace, caps, 64)
    got = replay_tiers(trace, CFG, caps, block_size_tokens=64)
    assert got.per_call.equals(pc)
    assert got.summary == summary
