"""Huge reference streams are counted before they are built, and re-blocked to fit a budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.errors import CapacityError, UsageError
from agentx.kv import TierCapacities, replay_tiers
from agentx.kv.blocks import build_blocks, ref_count
from agentx.replay.config import make_config
from agentx.testing import trace_objects
from agentx.traces.synth import synthesize

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CFG = make_config(load_catalog(), "h200", "deepseek-v3", gpus=8)
BPT = CFG.kv_bytes_per_token
HITS = ["kv_hbm_hit_tokens", "kv_dram_hit_tokens", "kv_ssd_hit_tokens", "kv_recompute_tokens"]


def counts(tr, bs: int) -> int:
    df = tr.calls
    hashes = bool(df["block_hashes"].is_not_null().all())
    return ref_count(
        df["input_tokens"].to_numpy(), df["reused_prefix_tokens"].to_numpy(), bs, hashes
    )


def small_traces():
    return st.booleans().flatmap(
        lambda hashes: trace_objects(
            with_hashes=hashes,
            block_size_tokens=16,
            max_sessions=4,
            max_calls_per_session=6,
            max_new_tokens=2000,
        )
    )


@SETTINGS
@given(small_traces(), st.sampled_from([16, 32, 64]))
def test_closed_form_count_equals_the_materialized_stream(tr, bs):
    assert counts(tr, bs) == build_blocks(tr, bs).n_refs


@SETTINGS
@given(
    small_traces(),
    st.integers(2, 8),
    st.lists(st.integers(0, 400_000), min_size=3, max_size=3).map(sorted),
)
def test_small_budget_reblocks_to_the_smallest_power_of_two_that_fits(tr, shrink, caps):
    full = counts(tr, 16)
    budget = max(full // shrink, 2 * tr.calls.height)  # two refs per call always fit
    stream = build_blocks(tr, 16, max_refs=budget)
    bs = stream.block_size_tokens
    assert stream.n_refs == counts(tr, bs) <= budget
    assert bs // 16 & (bs // 16 - 1) == 0  # a power-of-two multiple
    event(f"hashes={tr.hash_scope} reblocked={bs > 16}")
    if bs == 16:
        assert stream.block_size_note == "" and full <= budget
    else:
        assert counts(tr, bs // 2) > budget  # the smallest that fits
        assert stream.block_size_note.startswith(f"re-blocked from 16 to {bs} tokens: {full:,}")
    # same result as asking for that block size; hit + recompute = reused prefix per call
    cap = TierCapacities(*(c * BPT for c in caps))
    got = replay_tiers(tr, CFG, cap, block_size_tokens=16, max_refs=budget)
    want = replay_tiers(tr, CFG, cap, block_size_tokens=bs)
    assert got.per_call.equals(want.per_call)
    assert got.summary["block_size_tokens"] == bs
    assert got.summary["block_size_note"] == stream.block_size_note
    found = got.per_call.select(HITS).sum_horizontal().to_numpy()
    np.testing.assert_array_equal(found, tr.calls["reused_prefix_tokens"].to_numpy())


def test_synthetic_trace_over_budget_is_reblocked_not_crashed():
    tr = synthesize(4, seed=1)  # no block hashes: synthesized chains
    full = counts(tr, 64)
    res = replay_tiers(tr, CFG, max_refs=full // 10)
    s = res.summary
    assert s["block_size_tokens"] == 64 * 16  # the smallest power of two that fits here
    assert s["block_references"] == counts(tr, 1024) <= full // 10 < counts(tr, 512)
    assert s["hits"]["hbm"]["tokens"] + s["recompute"]["tokens"] + sum(
        s["hits"][t]["tokens"] for t in ("dram", "ssd")
    ) == int(tr.calls["reused_prefix_tokens"].sum())


def test_budget_below_two_refs_per_call_is_a_usage_error():
    tr = synthesize(2, seed=1)
    n = counts(tr, 1 << 30)
    with pytest.raises(UsageError) as e:
        build_blocks(tr, max_refs=n - 1)
    assert str(e.value) == (
        f"the trace needs {n:,} block references even with one block per prompt; "
        f"raise --max-block-refs above {n - 1:,}"
    )
    with pytest.raises(UsageError, match="^--max-block-refs must be positive, got 0$"):
        build_blocks(tr, max_refs=0)


def test_running_out_of_memory_is_one_line_not_a_traceback(monkeypatch):
    import agentx.kv
    import agentx.kv.chains
    import agentx.kv.curve

    def oom(*args, **kw):
        raise MemoryError

    tr = synthesize(2, seed=1)
    want = (
        "out of memory replaying up to 1,000 KV block references; "
        "lower --max-block-refs (or raise --block-size-tokens)"
    )
    monkeypatch.setattr(agentx.kv, "outcome", oom)
    monkeypatch.setattr(agentx.kv.chains, "chain_outcomes", oom)  # the no-hash lru path
    monkeypatch.setattr(agentx.kv.curve, "prepare", oom)
    monkeypatch.setattr(agentx.kv.chains, "chain_pass", oom)  # kv-curve's no-hash lru path
    with pytest.raises(CapacityError) as e:
        replay_tiers(tr, CFG, max_refs=1000 + counts(tr, 1 << 30))
    assert str(e.value).startswith("out of memory replaying up to ")
    with pytest.raises(CapacityError) as e:
        agentx.kv.curve.curve(tr, CFG, [0.0], max_refs=1000)
    assert str(e.value) == want and e.value.exit_code == 1
