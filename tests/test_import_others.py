"""Mooncake, Azure and TraceLab importers against the real shared files (SOURCES.md §1, §3, §4)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import shared_path
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.errors import UnknownNameError, UsageError
from agentx.traces import schema as S
from agentx.traces.importers import import_trace, load_trace
from agentx.traces.importers.mooncake import chain_roots
from agentx.traces.io import read_trace


@pytest.fixture(scope="module")
def conversation():
    return load_trace("mooncake", shared_path("mooncake-fast25", "conversation_trace.jsonl"))


def _chains(calls: pl.DataFrame) -> tuple[int, int, int]:
    """(links, chains of ≥ 2 requests, longest chain)."""
    sizes = calls.group_by("session_id").len()["len"]
    return calls.height - sizes.len(), int((sizes >= 2).sum()), int(sizes.max())


def test_mooncake_conversation_matches_sources(conversation):
    calls = conversation.calls
    assert calls.height == 12_031
    reuse = calls["reused_prefix_tokens"].sum() / calls["input_tokens"].sum()
    assert reuse == pytest.approx(0.374, abs=0.0005)  # SOURCES.md §1: 37.4 %
    assert _chains(calls) == (3_963, 2_011, 43)  # links, chains ≥ 2, longest (SOURCES.md §1)
    assert calls.filter(pl.col("call_index") > 0).height == 3_963
    assert calls["t_start_s"].max() == pytest.approx(3_536.999)
    assert (calls["block_hashes"].list.len() == (calls["input_tokens"] + 511) // 512).all()
    assert conversation.meta[S.META_HASH_SCOPE] == "global"
    assert conversation.meta[S.META_BLOCK_SIZE] == "512"
    # prefill left after the cached prefix: p50 2,470 tokens (SOURCES.md §1)
    assert calls["new_tokens"].quantile(0.5, "linear") == pytest.approx(2_470, abs=1)


def test_mooncake_synthetic_matches_sources():
    calls = load_trace("mooncake", shared_path("mooncake-fast25", "synthetic_trace.jsonl")).calls
    assert calls.height == 3_993
    reuse = calls["reused_prefix_tokens"].sum() / calls["input_tokens"].sum()
    assert reuse == pytest.approx(0.651, abs=0.0005)
    assert _chains(calls) == (1_341, 269, 24)


def test_mooncake_session_rows_continue_their_parent(conversation):
    # inside a recovered session every later call begins with the session's first full blocks
    calls = conversation.calls.filter(
        pl.col("session_id").is_in(
            conversation.calls.filter(pl.col("call_index") >= 3)["session_id"]
            .unique()
            .head(50)
            .implode()
        )
    )
    for _, group in calls.group_by("session_id"):
        hashes = group.sort("call_index")["block_hashes"].to_list()
        root_full = hashes[0][:-1]
        assert all(h[: len(root_full)] == root_full for h in hashes[1:])


def _naive_roots(hashes):
    roots = []
    for j, h in enumerate(hashes):
        parent = None
        best = 0
        for i in range(j):
            full = hashes[i][:-1]
            introduced = any(x not in set().union(*hashes[:i]) for x in full)
            if full and introduced and h[: len(full)] == full and len(full) >= best:
                parent, best = i, len(full)
        roots.append(j if parent is None else roots[parent])
    return roots


def _prefix_hashes(draw_paths):
    """Ids that depend on the whole prefix, as in Mooncake: one id per distinct prefix."""
    ids: dict[tuple, int] = {}
    out = []
    for path in draw_paths:
        h = []
        for k in range(1, len(path) + 1):
            h.append(ids.setdefault(tuple(path[:k]), len(ids)))
        out.append(h)
    return out


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=6), min_size=1, max_size=14))
def test_chain_roots_equal_a_quadratic_search(paths):
    hashes = _prefix_hashes(paths)
    assert chain_roots(hashes).tolist() == _naive_roots(hashes)


def test_azure_matches_sources(tmp_path):
    out = tmp_path / "a.parquet"
    trace = import_trace(
        "azure", shared_path("azure-llm-2023", "AzureLLMInferenceTrace_conv.csv"), out
    )
    calls = read_trace(out).calls
    assert calls.height == 19_366 and calls["session_id"].n_unique() == 19_366
    assert calls["t_start_s"].min() == 0.0
    assert calls["t_start_s"].max() == pytest.approx(3_501.72, abs=0.01)  # SOURCES.md §3
    assert calls["input_tokens"].quantile(0.5, "linear") == 1_020
    assert calls["output_tokens"].mean() == pytest.approx(211, abs=0.5)
    assert (calls["reused_prefix_tokens"] == 0).all() and calls["block_hashes"].is_null().all()
    assert trace.meta[S.META_HASH_SCOPE] == "none" and trace.meta[S.META_BLOCK_SIZE] == ""


def test_tracelab_rows_and_fields():
    path = shared_path("tracelab-example", "round_trace.jsonl")
    calls = load_trace("tracelab", path).calls
    assert calls.height == 19 and calls["session_id"].n_unique() == 2
    src = [json.loads(line) for line in path.read_text().splitlines()]
    by_key = {(r["session_id"], r["round_index"]): r for r in src}
    for row in calls.to_dicts():
        r = by_key[(row["session_id"], row["call_index"])]
        assert row["reused_prefix_tokens"] == r["prefix_tokens"]
        assert row["new_tokens"] == r["newly_append_tokens"]
        assert row["output_tokens"] == r["output_tokens"]
        assert (
            row["trigger"]
            == {"user_message": "user", "tool_result": "tool_result"}[r["first_input_event_type"]]
        )
    codex = calls.filter(pl.col("session_id").str.starts_with("codex"))
    assert codex["t_start_s"].to_list()[:2] == pytest.approx([0.0, 6.219])  # 10:05:59.328 → :05.547
    assert calls["think_time_s"].is_null().sum() == 2  # first step of each session


def test_unknown_format_and_stray_options(tmp_path):
    with pytest.raises(UnknownNameError, match=r"unknown format 'wekka'; did you mean 'weka'\?"):
        load_trace("wekka", tmp_path)
    path = shared_path("tracelab-example", "round_trace.jsonl")
    with pytest.raises(UsageError, match="format 'tracelab' takes no option 'seed'"):
        load_trace("tracelab", path, seed=3)
