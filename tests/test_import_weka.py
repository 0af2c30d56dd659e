"""The Weka importer against the real shared sessions (SOURCES.md §2) and its own invariants."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.traces import schema as S
from agentx.traces.importers import import_trace, load_trace, load_weka
from agentx.traces.importers._common import leading_seen_blocks
from agentx.traces.importers.weka import session_offsets_s
from agentx.traces.io import read_trace

SAMPLE_DIR = REPO / "traces" / "sample"


@pytest.fixture(scope="module")
def weka(weka_parquet) -> pl.DataFrame:
    return read_trace(weka_parquet).calls


def _totals(path: Path) -> dict:
    """The file's own ``totals`` object, read without parsing its 10^5 block ids."""
    raw = gzip.decompress(path.read_bytes())
    i = raw.rindex(b'"totals"')
    obj, _ = json.JSONDecoder().raw_decode(raw[raw.index(b"{", i) :].decode())
    return obj


def test_whole_set_counts_match_sources(weka):
    # SOURCES.md §2: 603 sessions, 42,535 calls of which 41,909 main-agent; 59 sub-agents
    assert weka.height == 42_535
    assert weka["session_id"].n_unique() == 603
    assert int(weka["agent_id"].is_null().sum()) == 41_909
    assert (
        weka.filter(pl.col("agent_id").is_not_null()).select("session_id", "agent_id").n_unique()
        == 59
    )
    assert weka.filter(pl.col("trigger") == "subagent").height == 59
    assert weka.filter(pl.col("trigger") == "tool_result").height == 35_815


def test_token_sums_equal_each_files_totals(weka, weka_dir):
    sums = (
        weka.group_by("session_id", pl.col("agent_id").is_null().alias("main"))
        .agg(pl.col("input_tokens").sum(), pl.col("output_tokens").sum())
        .rows()
    )
    got = {(s, main): (i, o) for s, main, i, o in sums}
    files = sorted(weka_dir.glob("*.json.gz"))
    assert len(files) == 603
    for f in files:
        sid = f.name.removesuffix(".json.gz")
        tot = _totals(f)
        parent = tot["parent_tokens"]
        sub = tot["subagent_tokens"]
        assert got[(sid, True)] == (parent["input"], parent["output"]), f.name
        assert got.get((sid, False), (0, 0)) == (sub["input"], sub["output"]), f.name
        combined = tot["combined_tokens"]
        assert combined["input"] == parent["input"] + sub["input"], f.name


def test_prefix_reuse_and_compaction_match_sources(weka):
    reuse = weka["reused_prefix_tokens"].sum() / weka["input_tokens"].sum()
    assert reuse == pytest.approx(0.963, abs=0.0005)  # SOURCES.md §2: 96.3 %
    comp = weka.filter(pl.col("is_compaction"))
    assert comp.height == 190 and comp["session_id"].n_unique() == 108
    # appended tokens per call p50 733, p90 4,868 (SOURCES.md §2)
    assert weka["new_tokens"].quantile(0.5, "linear") == 733
    assert weka["new_tokens"].quantile(0.9, "linear") == pytest.approx(4868, abs=1)


def test_block_ids_are_the_source_ids_plus_one_partial_block(weka, weka_dir):
    # every row carries ceil(in/64) ids; the source gave floor(in/64) full blocks
    lens = weka["block_hashes"].list.len()
    assert (lens == (weka["input_tokens"] + 63) // 64).all()
    partial = weka["input_tokens"] % 64 != 0
    last = weka["block_hashes"].list.last()
    assert ((last >= 2**63) == partial).all()
    assert (
        last.filter(partial) == (2**63 + weka["call_index"].filter(partial).cast(pl.UInt64))
    ).all()
    # one file with sub-agents checked id by id against its JSON, in the order the spec fixes:
    # time = sub-agent entry t + nested t, ties in file order
    path = weka_dir / "trace_0291.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    calls = []
    for r in doc["requests"]:
        if r.get("type") == "subagent":
            calls += [(r["t"] + q["t"], r["agent_id"], q) for q in r["requests"]]
        else:
            calls.append((r["t"], None, r))
    calls.sort(key=lambda c: c[0])  # stable: ties keep file order
    rows = weka.filter(pl.col("session_id") == "trace_0291").to_dicts()
    t0 = rows[0]["t_start_s"]
    seen: set[int] = set()
    for row, (t, agent, q) in zip(rows, calls, strict=True):
        assert row["agent_id"] == agent
        assert row["t_start_s"] - t0 == pytest.approx(t)
        assert row["block_hashes"][: len(q["hash_ids"])] == q["hash_ids"]
        run = next((k for k, x in enumerate(q["hash_ids"]) if x not in seen), len(q["hash_ids"]))
        assert row["reused_prefix_tokens"] == min(64 * run, q["in"])
        seen.update(q["hash_ids"])


def test_shared_prefix_is_each_agents_tool_and_system_tokens(weka_dir):
    path = weka_dir / "trace_0291.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    calls = load_weka(path).calls
    main = calls.filter(pl.col("agent_id").is_null())["shared_prefix_tokens"].unique().to_list()
    assert main == [doc["tool_tokens"] + doc["system_tokens"]]
    for entry in (r for r in doc["requests"] if r.get("type") == "subagent"):
        sub = calls.filter(pl.col("agent_id") == entry["agent_id"])["shared_prefix_tokens"]
        assert sub.unique().to_list() == [entry["tool_tokens"] + entry["system_tokens"]]


def test_session_arrivals_are_a_seeded_poisson_process(weka, tmp_path):
    starts = weka.group_by("session_id").agg(pl.col("t_start_s").min()).sort("session_id")
    t = starts["t_start_s"].to_numpy()
    assert t[0] == 0.0 and (np.diff(t) > 0).all()  # file-name order, first at 0
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(6.0, rel=0.1)  # default rate 1/6 per s, 602 gaps
    assert np.std(gaps) / gaps.mean() == pytest.approx(1.0, abs=0.15)  # exponential: CV = 1
    a = load_weka(SAMPLE_DIR, seed=1).calls
    b = load_weka(SAMPLE_DIR, seed=1, session_rate_per_s=0.01).calls
    assert not a["t_start_s"].equals(load_weka(SAMPLE_DIR).calls["t_start_s"])
    first = a.group_by("session_id").agg(pl.col("t_start_s").min()).sort("session_id")["t_start_s"]
    slow = b.group_by("session_id").agg(pl.col("t_start_s").min()).sort("session_id")["t_start_s"]
    ratio = (slow / first).to_numpy()[1:]
    assert ratio == pytest.approx(np.full(len(ratio), 1 / 6 / 0.01))  # same seed, scaled gaps
    assert session_offsets_s(5, 0.5, 3).tolist() == session_offsets_s(5, 0.5, 3).tolist()


def test_metadata_and_byte_identical_output(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    import_trace("weka", SAMPLE_DIR, a, progress_bar=False)
    import_trace("weka", SAMPLE_DIR, b, progress_bar=False)
    assert a.read_bytes() == b.read_bytes() == (SAMPLE_DIR / "weka-sample.parquet").read_bytes()
    meta = read_trace(a).meta
    assert meta[S.META_SOURCE] == "weka" and meta[S.META_HASH_SCOPE] == "session"
    assert meta[S.META_BLOCK_SIZE] == "64"
    opts = json.loads(meta[S.META_OPTIONS])
    assert opts["seed"] == 0 and opts["session_rate_per_s"] == pytest.approx(1 / 6)
    assert opts["arrival"] == "poisson"


def test_single_file_and_extra_column(tmp_path):
    calls = load_trace("weka", SAMPLE_DIR / "trace_0026.json.gz").calls
    assert calls.height == 3 and calls.columns[: len(S.COLUMN_NAMES)] == list(S.COLUMN_NAMES)
    assert calls.columns[len(S.COLUMN_NAMES) :] == ["api_time_s"]
    assert calls["api_time_s"].to_list() == [46.25, 48.05, 4.34]
    assert calls["t_start_s"].to_list() == [0.0, 94.0, 146.0]


def _naive_leading(groups, ranks, lists):
    order = sorted(range(len(lists)), key=lambda i: (groups[i], ranks[i]))
    seen: dict[int, set] = {}
    out = [0] * len(lists)
    for i in order:
        s = seen.setdefault(groups[i], set())
        out[i] = next((k for k, x in enumerate(lists[i]) if x not in s), len(lists[i]))
        s.update(lists[i])
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, 12), max_size=8)),
        max_size=25,
    ),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_leading_seen_blocks_equals_a_plain_walk(calls, rnd, huge_ids):
    groups = [g for g, _ in calls]
    lists = [[x + (2**50 if huge_ids else 0) for x in ids] for _, ids in calls]
    ranks = list(range(len(calls)))
    rnd.shuffle(ranks)  # rank order need not be row order (sub-agent calls interleave)
    lens = np.array([len(h) for h in lists], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    ids = np.array([x for h in lists for x in h], dtype=np.uint64)
    got = leading_seen_blocks(np.array(groups), np.array(ranks), offsets, ids)
    assert got.tolist() == _naive_leading(groups, ranks, lists)
