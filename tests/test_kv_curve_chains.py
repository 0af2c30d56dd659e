"""kv-curve from one chain pass (agentx.kv.curve_chains) equals the block-stream curve exactly.

``curve`` takes the chain path for lru + write-through on traces without hashes; the block
stream (build_blocks → stack → a tier pass per point) stays the reference: every row (floats
bit for bit) and the summary must match, for the default grid and explicit ones.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.kv import TierCapacities, capacities_for, kv_curve
from agentx.kv.curve import _curve, curve
from agentx.kv.curve_chains import chain_curve
from agentx.replay import make_config
from agentx.testing import trace_objects
from agentx.traces.io import Trace, read_trace
from agentx.traces.synth import synthesize

CFG = make_config(load_catalog(), "gb200", "kimi-k2", gpus=32)
SAMPLE = Path(__file__).resolve().parent.parent / "traces" / "sample" / "weka-sample.parquet"
caps_st = st.builds(
    TierCapacities,
    st.sampled_from([0.0, 1e6, 3e7, 1e9]),
    st.sampled_from([0.0, 1e7, 1e8, 1e10]),
    st.sampled_from([0.0, 1e8, 1e11, 1e15]),
)
grid_st = st.one_of(
    st.none(), st.lists(st.sampled_from([0.0, 1e5, 2e6, 3e7, 1e9, 5e11]), min_size=1, max_size=4)
)


def both(trace, caps, grid=None, bs=None):
    old = _curve(trace, CFG, grid, caps, bs, "lru", "write-through", 300_000_000)
    new = chain_curve(trace, CFG, grid, caps, bs, 300_000_000)
    return old, new


def assert_same(old, new):
    assert new[0].equals(old[0])  # bit-identical floats, same columns and dtypes
    assert new[1] == old[1]


@settings(max_examples=50, deadline=None)
@given(trace_objects(max_sessions=5, max_calls_per_session=8), caps_st, grid_st)
def test_chain_curve_equals_block_stream_curve(trace, caps, grid):
    assert_same(*both(trace, caps, grid))


@pytest.mark.parametrize("caps", [None, TierCapacities(1e9, 5e10, 2e11), TierCapacities(0, 0, 0)])
@pytest.mark.parametrize("bs", [None, 1024])
def test_synthetic_sessions_curve(caps, bs):
    tr = synthesize(40, seed=3)
    assert_same(*both(tr, caps or capacities_for(CFG), None, bs))
    assert_same(*both(tr, caps or capacities_for(CFG), [0.0, 3e8, 2e9, 4e10], bs))


def test_bundled_sample_without_hashes_curve():
    tr = read_trace(SAMPLE)
    tr = Trace(tr.calls.with_columns(pl.lit(None).alias("block_hashes")), tr.meta)
    assert_same(*both(tr, capacities_for(CFG)))


def test_curve_routes_unhashed_lru_to_the_chain_path(monkeypatch):
    """The public entry points take the chain path (the block stream is never built)."""
    import agentx.kv.curve as mod

    def no_stream(*a, **k):
        raise AssertionError("block stream built")

    monkeypatch.setattr(mod, "build_blocks", no_stream)
    tr = synthesize(6, seed=1)
    rows, summary = curve(tr, CFG)
    assert rows.height == 3 * summary["curve"]["points"]
    assert kv_curve(tr, CFG).equals(rows)
