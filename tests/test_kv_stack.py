"""The stack-distance kernel against an obviously correct step-by-step LRU (issue 4)."""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.kv.blocks import BlockStream, build_blocks
from agentx.kv.stack import lru_stack
from agentx.testing import trace_objects
from agentx.traces.io import Trace, trace_metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lru_hits(ref_block: np.ndarray, weight: np.ndarray, cap: float) -> np.ndarray:
    """Plain LRU of ``cap`` tokens: hit when the block is cached; evict oldest until it fits."""
    cache: OrderedDict[int, None] = OrderedDict()
    used = 0
    hits = np.zeros(len(ref_block), bool)
    for r, b in enumerate(ref_block.tolist()):
        if b in cache:
            hits[r] = True
            cache.move_to_end(b)
        else:
            cache[b] = None
            used += int(weight[b])
        while used > cap:
            old, _ = cache.popitem(last=False)
            used -= int(weight[old])
    return hits


@st.composite
def streams(draw):
    hashes = draw(st.booleans())
    tr = draw(
        trace_objects(
            with_hashes=hashes, max_sessions=4, max_calls_per_session=6, max_new_tokens=600
        )
    )
    native = tr.calls["block_size_tokens"].drop_nulls().first() if hashes else None
    factor = draw(st.sampled_from([1, 2, 4]))
    bs = native * factor if native else draw(st.sampled_from([1, 16, 64, 100]))
    return tr, build_blocks(tr, bs, share_prefix=draw(st.booleans()))


@SETTINGS
@given(streams(), st.lists(st.floats(0, 1.0), min_size=1, max_size=6))
def test_stack_distance_equals_step_by_step_lru(data, fractions):
    tr, stream = data
    res = lru_stack(stream)
    dist = res.ref_distances()
    assert len(dist) == stream.n_refs
    total = float(res.block_weight.sum())
    for f in [*fractions, 0.0, 1.0]:
        cap = np.floor(f * total * 1.1)
        expect = lru_hits(stream.ref_block, res.block_weight, cap)
        got = (dist >= 0) & (dist <= cap)
        np.testing.assert_array_equal(got, expect, err_msg=f"capacity {cap} tokens")


@SETTINGS
@given(streams())
def test_segments_cover_every_reference_and_the_reused_prefix(data):
    tr, stream = data
    res = lru_stack(stream)
    assert int(res.n.sum()) == stream.n_refs
    np.testing.assert_array_equal(
        res.ref0, np.concatenate(([0], np.cumsum(res.n)[:-1])) if res.n.size else res.ref0
    )
    assert int(res.read_tokens.sum()) == int(tr.calls["reused_prefix_tokens"].sum())
    # every reference of a segment shares one block size, at most the block size
    assert (res.block_tokens <= stream.block_size_tokens).all()


@SETTINGS
@given(trace_objects(with_hashes=True, max_sessions=3, max_calls_per_session=6))
def test_infinite_capacity_finds_every_reused_block(tr):
    """Reused prefixes are block-aligned runs seen before, so an unbounded cache holds them,
    with or without shared-prefix blocks (named by position and hash across sessions)."""
    for share in (False, True):
        stream = build_blocks(tr, share_prefix=share)
        res = lru_stack(stream)
        reads = np.repeat(res.is_read, res.n)
        assert (res.ref_distances()[reads] >= 0).all()


def _trace(rows: list[dict], hashes: bool) -> Trace:
    base = {
        "agent_id": None,
        "output_tokens": 1,
        "trigger": "user",
        "think_time_s": None,
        "model": None,
        "source": "synth",
    }
    df = pl.DataFrame([{**base, **r} for r in rows])
    df = df.with_columns(
        new_tokens=pl.col("input_tokens") - pl.col("reused_prefix_tokens"),
        block_size_tokens=pl.lit(64 if hashes else None, pl.Int64),
        block_hashes=pl.col("block_hashes") if hashes else pl.lit(None, pl.List(pl.UInt64)),
    )
    from agentx.traces.schema import conform, validate

    df = conform(df)
    validate(df)
    return Trace(
        df,
        trace_metadata(
            "synth",
            block_size_tokens=64 if hashes else None,
            hash_scope="session" if hashes else "none",
        ),
    )


def test_shared_prefix_is_stored_once_across_sessions():
    rows = [
        {
            "session_id": s,
            "call_index": 0,
            "t_start_s": float(i),
            "input_tokens": 300,
            "reused_prefix_tokens": 0,
            "is_compaction": False,
            "shared_prefix_tokens": 150,
            "block_hashes": [1, 2, 3, 4, 5],
        }
        for i, s in enumerate(["a", "b"])
    ]
    tr = _trace([{k: v for k, v in r.items() if k != "block_hashes"} for r in rows], hashes=False)
    s = build_blocks(tr, 64)
    a, b = s.ref_block[: s.ref_off[1]], s.ref_block[s.ref_off[1] :]
    # 150 shared tokens = 2 full 64-token blocks shared; the other 3 blocks are each session's own
    np.testing.assert_array_equal(a[:2], b[:2])
    assert not set(a[2:].tolist()) & set(b[2:].tolist())
    assert s.shared[a[:2]].all() and not s.shared[a[2:]].any()
    private = build_blocks(tr, 64, share_prefix=False)
    assert not set(private.ref_block[:5].tolist()) & set(private.ref_block[5:].tolist())


def test_hashed_shared_prefix_is_named_by_size_position_and_hash():
    def call(sid, t, ids, spt=150):
        return {"session_id": sid, "call_index": 0, "t_start_s": t, "input_tokens": 64 * len(ids),
                "reused_prefix_tokens": 0, "is_compaction": False, "shared_prefix_tokens": spt,
                "block_hashes": ids}  # fmt: skip

    calls = [call("a", 0.0, [1, 2, 3]), call("b", 1.0, [1, 2, 9]), call("c", 2.0, [5, 6, 7])]
    tr = _trace([*calls, call("d", 3.0, [1, 2, 3], spt=200)], True)
    s = build_blocks(tr)
    a, b, c, d = (s.ref_block[s.ref_off[k] : s.ref_off[k + 1]] for k in range(4))
    np.testing.assert_array_equal(a[:2], b[:2])  # same prefix size, ids and positions
    assert s.shared[a[:2]].all() and not s.shared[a[2]]
    assert a[2] != b[2] and not set(c.tolist()) & set(a.tolist())
    assert not set(d.tolist()) & set(a.tolist())  # another tool + system prefix


def test_synthesized_chain_reads_prefix_and_compaction_starts_new_blocks():
    rows = [
        {
            "session_id": "s",
            "call_index": 0,
            "t_start_s": 0.0,
            "input_tokens": 200,
            "reused_prefix_tokens": 0,
            "is_compaction": False,
        },
        {
            "session_id": "s",
            "call_index": 1,
            "t_start_s": 1.0,
            "input_tokens": 300,
            "reused_prefix_tokens": 200,
            "is_compaction": False,
        },
        {
            "session_id": "s",
            "call_index": 2,
            "t_start_s": 2.0,
            "input_tokens": 100,
            "reused_prefix_tokens": 0,
            "is_compaction": True,
        },
    ]
    tr = _trace([{**r, "shared_prefix_tokens": 0} for r in rows], hashes=False)
    s = build_blocks(tr, 64)
    c0, c1, c2 = (s.ref_block[s.ref_off[k] : s.ref_off[k + 1]] for k in range(3))
    # call 1 reads ceil(200/64) = 4 blocks: 3 full ones and the old partial one, then rewrites
    # the partial position 3 as a new block and writes position 4 (300 tokens = 5 blocks)
    assert s.n_read.tolist() == [0, 4, 0]
    np.testing.assert_array_equal(c1[:4], c0)
    assert len(c1) == 4 + 2 and not set(c1[4:].tolist()) & set(c0.tolist())
    assert not set(c2.tolist()) & (set(c0.tolist()) | set(c1.tolist()))
    assert s.chain[2] != s.chain[1]


def test_reblocking_names_merged_blocks_by_their_last_hash():
    ids = list(range(10, 18))  # 8 blocks of 64 = 512 tokens
    rows = [
        {
            "session_id": "s",
            "call_index": 0,
            "t_start_s": 0.0,
            "input_tokens": 512,
            "reused_prefix_tokens": 0,
            "is_compaction": False,
            "shared_prefix_tokens": 0,
            "block_hashes": ids,
        },
        {
            "session_id": "s",
            "call_index": 1,
            "t_start_s": 1.0,
            "input_tokens": 576,
            "reused_prefix_tokens": 384,
            "is_compaction": False,
            "shared_prefix_tokens": 0,
            "block_hashes": ids[:6] + [90, 91, 92],
        },
    ]
    tr = _trace(rows, hashes=True)
    s = build_blocks(tr, 256)
    res = lru_stack(s)
    d = res.ref_distances()
    # call 1 reuses 384 tokens: merged block 0 (hashes 10-13) is found; merged block 1 now ends
    # in a new hash (14, 15, 90, 91), so its 128 reused tokens are lost at 256-token blocks
    assert s.n_read.tolist() == [0, 2]
    assert d[s.ref_off[1]] >= 0 and d[s.ref_off[1] + 1] < 0


@pytest.mark.parametrize("shape", ["random", "chains", "striped"])
def test_both_time_axes_agree_with_step_by_step_lru(shape):
    """Random ids make nearly every reference its own segment (direct time axis); long
    re-read prefixes make few segments (compressed time axis). Striped calls read eight
    10-block regions each: more segments than the kernel's first table holds (four per
    call), each long, so the table grows by its estimate rather than to a row per reference."""
    rng = np.random.default_rng(7)
    if shape == "random":
        ids = rng.integers(0, 300, 4000)
    elif shape == "striped":  # each call reads 8 regions of 10 blocks, in an order of its own
        order = [rng.permutation(8) for _ in range(40)]
        ids = np.concatenate([np.arange(10 * g, 10 * g + 10) for o in order for g in o])
    else:  # 40 calls, each re-reading one of 4 growing chains
        ids = np.concatenate(
            [np.arange(c * 1000, c * 1000 + 20 + 5 * k) for k in range(40) for c in [k % 4]]
        )
    n_calls = 40
    cuts = np.linspace(0, ids.size, n_calls + 1).astype(np.int64)
    per = np.diff(cuts)
    z = np.zeros(n_calls, np.int64)
    stream = BlockStream(
        block_size_tokens=16, row=np.arange(n_calls), ref_off=cuts, n_read=per, write_pos=per,
        input_tokens=per * 16, reused_tokens=per * 16, ref_block=ids, n_blocks=int(ids.max()) + 1,
        shared=np.zeros(int(ids.max()) + 1, bool), chain=z, agent=z, compaction=z.astype(bool),
    )  # fmt: skip
    res = lru_stack(stream)
    assert (8 * len(res.n) < ids.size) == (shape != "random")
    assert shape != "striped" or len(res.n) > 4 * n_calls + 64  # past the first table
    dist = res.ref_distances()
    for cap in (0, 160, 1600, 4000, 16000):
        np.testing.assert_array_equal(
            (dist >= 0) & (dist <= cap), lru_hits(ids, res.block_weight, cap)
        )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=400),
    st.integers(1, 12),
    st.lists(st.integers(0, 40), max_size=12),
    st.sampled_from([16, 1 << 26]),
)
def test_point_and_compressed_time_axes_give_the_same_stack(ids, n_calls, freed, bs):
    """Both distance passes (plain point tree over every time, or the range pair over the
    segments' boundaries) on the same stream, with some blocks freed from the LRU: equal.
    Huge blocks make the point tree int64 (its int32 nodes could overflow)."""
    from agentx.kv import stack

    stream, kill_off, kill_blocks, free = _calls_of(ids, n_calls, freed, bs)
    got = {}
    for points in (True, False):
        original = stack.point_axis
        stack.point_axis = lambda n_segs, n_refs, p=points: p
        try:
            got[points] = stack.lru_stack(stream, kill_off, kill_blocks, free)
        finally:
            stack.point_axis = original
    for field in ("dist_tokens", "final_dist_tokens", "n", "last_ref"):
        np.testing.assert_array_equal(getattr(got[True], field), getattr(got[False], field))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.lists(st.sampled_from([-3, 0, 1, 7, 40, 1 << 40]))),
        min_size=1,
        max_size=20,
    )
)
def test_namespace_top_hash_numpy_equals_the_kernel(calls):
    """Small traces take numpy's group max (no kernel to compile), large ones the kernel: equal."""
    from agentx.kv import hashes

    ns = np.array(sorted(c[0] for c in calls), np.int64)
    lens = np.array([len(c[1]) for c in calls], np.int64)
    flat = np.array([h for c in calls for h in c[1]], np.int64)
    n_ns = int(ns.max()) + 1
    kernel = hashes._ns_top(flat, np.cumsum(lens) - lens, lens, ns, n_ns)
    np.testing.assert_array_equal(hashes.ns_top(flat, lens, ns, n_ns), kernel)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([-5, 0, 1, 2, 9, 300, 1 << 33]), min_size=1, max_size=6),
            st.integers(0, 7),  # blocks
            st.integers(0, 7),  # read blocks (at most the blocks)
            st.integers(0, 7),  # first written block (at least the read ones)
            st.integers(0, 7),  # shared-prefix blocks
            st.integers(0, 2),  # namespace
            st.integers(0, 2),  # shared-prefix group
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 3),
    st.booleans(),
)
def test_block_ids_from_hashes_numpy_equals_the_kernel(calls, m, all_big):
    """Small traces take whole-array numpy for their block ids (no kernel to compile, nothing
    walked one reference at a time when interpreted), large ones the kernel: equal."""
    from agentx.kv import hashes

    lens = np.array([len(c[0]) for c in calls], np.int64)
    flat = np.array([h for c in calls for h in c[0]], np.int64)
    hoff = np.cumsum(lens) - lens
    n_blk = np.array([c[1] for c in calls], np.int64)
    n_read = np.minimum([c[2] for c in calls], n_blk)
    write_pos = np.minimum(np.maximum([c[3] for c in calls], n_read), n_blk)
    spt = np.array([c[4] for c in calls], np.int64)
    ns, grp = (np.array([c[i] for c in calls], np.int64) for i in (5, 6))
    cnt = n_read + n_blk - write_pos
    ref_off = np.concatenate(([0], np.cumsum(cnt)))
    small = (flat >= 0) & (flat < hashes.SMALL)
    big_pos = np.arange(flat.size) if all_big else np.flatnonzero(~small)
    big_key = 1000 + np.arange(big_pos.size, dtype=np.int64)[::-1].copy()
    hm = int(flat[small].max(initial=0)) + 1
    base = np.array([0, 50, 400], np.int64)
    args = (flat, hoff, lens, ns, base, big_pos, big_key, m, hm, grp, n_blk, n_read, write_pos, ref_off, spt)  # fmt: skip
    want, got = np.full(int(ref_off[-1]), -7), np.full(int(ref_off[-1]), -7)
    hashes._hash_kernel(*args, want)
    hashes._hash_numpy(*args, got)
    np.testing.assert_array_equal(got, want)


def test_block_ids_of_the_sample_are_the_same_by_numpy_and_by_the_kernel(monkeypatch):
    from agentx.kv import hashes
    from agentx.traces.io import read_trace

    sample = read_trace(os.path.join(REPO, "traces", "sample", "weka-sample.parquet"))
    streams = {}
    for below in (0, 1 << 62):  # the kernel always, numpy always
        monkeypatch.setattr(hashes, "NUMPY_BELOW", below)
        streams[below] = build_blocks(sample)
    np.testing.assert_array_equal(streams[0].ref_block, streams[1 << 62].ref_block)
    np.testing.assert_array_equal(streams[0].shared, streams[1 << 62].shared)
    assert streams[0].n_blocks == streams[1 << 62].n_blocks


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=600),
    st.integers(1, 40),
    st.lists(st.integers(0, 60), max_size=12),
    st.integers(1, 50),
)
def test_the_passes_in_batches_on_two_threads_give_the_one_batch_stack(ids, n_calls, freed, batch):
    """Pass 1 in batches of calls beside pass 2 of the batch before (PASS1_REFS references a
    batch, on two threads from 2 x PASS1_REFS references on; the segment table grown between
    batches), with kills and freed blocks, gives the stack of one batch on one thread; and a
    first batch that says "segments are long" takes the range pair, batch by batch, alike."""
    from agentx.kv import stack

    stream, kill_off, kill_blocks, free = _calls_of(ids, n_calls, freed, 16)
    whole = stack.lru_stack(stream, kill_off, kill_blocks, free)
    original = stack.PASS1_REFS, stack.point_axis
    try:
        stack.PASS1_REFS = batch
        for points in (True, False):
            stack.point_axis = lambda n_segs, n_refs, p=points: p
            got = stack.lru_stack(stream, kill_off, kill_blocks, free)
            for field in ("call", "ref0", "n", "dist_tokens", "final_dist_tokens", "last_ref"):
                np.testing.assert_array_equal(getattr(got, field), getattr(whole, field))
    finally:
        stack.PASS1_REFS, stack.point_axis = original


def _calls_of(ids, n_calls, freed, bs):
    """A stream of ``ids`` cut into up to ``n_calls`` calls (half reads, half writes), the
    ``freed`` blocks outside the LRU, and call 1 killing the first two ids: (stream,
    kill_off, kill_blocks, free) for ``lru_stack``."""
    ids = np.array(ids, np.int64)
    n_calls = min(n_calls, ids.size)
    cuts = np.linspace(0, ids.size, n_calls + 1).astype(np.int64)
    per = np.diff(cuts)
    z = np.zeros(n_calls, np.int64)
    n_blocks = int(ids.max()) + 1
    free = np.zeros(n_blocks, bool)
    free[[f for f in freed if f < n_blocks]] = True
    stream = BlockStream(
        block_size_tokens=bs, row=np.arange(n_calls), ref_off=cuts, n_read=per // 2, write_pos=per // 2,
        input_tokens=per * bs - 3, reused_tokens=(per // 2) * bs, ref_block=ids, n_blocks=n_blocks,
        shared=np.zeros(n_blocks, bool), chain=z, agent=z, compaction=z.astype(bool),
    )  # fmt: skip
    kill_off = np.concatenate(([0, 0], np.full(n_calls - 1, 2))).astype(np.int64)[: n_calls + 1]
    return stream, kill_off, ids[:2].copy(), free
