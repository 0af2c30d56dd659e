"""``agentx export``: Mooncake JSONL and Weka session folders; round trips import → export →
import give the same trace; derived block ids carry exactly the reuse the counts say."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import REPO, shared_path
from hypothesis import given, settings
from polars.testing import assert_frame_equal

from agentx.cli import cli
from agentx.testing import trace_objects
from agentx.traces.derive_blocks import derive_block_ids
from agentx.traces.export import export_mooncake, export_weka
from agentx.traces.importers import import_trace, load_trace
from agentx.traces.importers._common import leading_seen_blocks
from agentx.traces.io import Trace

SAMPLE = REPO / "traces" / "sample"
CC = REPO / "tests" / "fixtures" / "claude-code"
MOONCAKE_FIX = REPO / "tests" / "fixtures" / "mooncake" / "tiny_trace.jsonl"


def test_weka_round_trip_gives_the_same_trace(tmp_path):
    t = load_trace("weka", SAMPLE)
    export_weka(t, tmp_path / "w")
    back = load_trace("weka", tmp_path / "w")
    assert_frame_equal(back.calls, t.calls)  # times too: the Poisson offsets are recomputed
    assert back.meta == t.meta


def test_weka_export_reproduces_the_upstream_request_fields(tmp_path):
    """Checked against the published files themselves (kv-cache-tester traces/)."""
    import gzip

    t = load_trace("weka", SAMPLE / "trace_0291.json.gz")
    export_weka(t, tmp_path / "w")
    orig = json.loads(gzip.decompress((SAMPLE / "trace_0291.json.gz").read_bytes()))
    got = json.loads((tmp_path / "w" / "trace_0291.json").read_text())
    assert got["totals"] == orig["totals"]
    keys = ("t", "in", "out", "hash_ids", "think_time", "api_time", "model")
    for a, b in zip(got["requests"], orig["requests"], strict=True):
        assert a["type"] == "subagent" or b["type"] != "subagent"
        reqs = zip(a["requests"], b["requests"], strict=True) if "requests" in a else [(a, b)]
        for x, y in reqs:
            for k in keys:
                want = y.get(k)
                assert x.get(k) == (pytest.approx(want) if isinstance(want, float) else want), k


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def test_mooncake_round_trip_is_byte_identical_on_the_real_files(tmp_path, name):
    src = shared_path("mooncake-fast25", name)
    t = load_trace("mooncake", src)
    export_mooncake(t, tmp_path / name)
    assert (tmp_path / name).read_bytes() == src.read_bytes()
    assert_frame_equal(load_trace("mooncake", tmp_path / name).calls, t.calls)


def test_mooncake_round_trip_on_the_fixture(tmp_path):
    t = load_trace("mooncake", MOONCAKE_FIX)
    export_mooncake(t, tmp_path / MOONCAKE_FIX.name)
    assert (tmp_path / MOONCAKE_FIX.name).read_bytes() == MOONCAKE_FIX.read_bytes()


def test_claude_code_to_weka_keeps_calls_agents_and_reuse(tmp_path):
    t = load_trace("claude-code", CC)
    export_weka(t, tmp_path / "w")
    back = load_trace("weka", tmp_path / "w").calls
    a = t.calls.sort("session_id", "call_index")
    b = back.sort("session_id", "call_index")
    for col in ("session_id", "agent_id", "input_tokens", "output_tokens", "model"):
        assert a[col].to_list() == b[col].to_list()
    # derived 64-token blocks: the cache read, rounded down to whole blocks of the previous call
    assert (b["reused_prefix_tokens"] <= a["reused_prefix_tokens"]).all()
    later = a.select(pl.int_range(pl.len()).over("session_id", "agent_id") > 0).to_series()
    assert ((a["reused_prefix_tokens"] - b["reused_prefix_tokens"] < 64) | ~later).all()
    # a first call's cache read came from other sessions: it travels as the shared prefix
    assert b["shared_prefix_tokens"].to_list() == a["shared_prefix_tokens"].to_list()
    rel = lambda df: df["t_start_s"] - df["t_start_s"].min()  # noqa: E731
    first = a.filter(pl.col("session_id") == a["session_id"][0])
    again = b.filter(pl.col("session_id") == a["session_id"][0])
    assert rel(again).to_list() == pytest.approx(rel(first).to_list())


def test_claude_code_to_mooncake_blocks_follow_the_cache_reads(tmp_path):
    t = load_trace("claude-code", CC)
    export_mooncake(t, tmp_path / "m.jsonl")
    recs = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["input_length"] for r in recs] == t.calls.sort("t_start_s")["input_tokens"].to_list()
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 512) for r in recs)
    # AIPerf's mooncake_trace schema (docs/benchmark_modes/trace_replay.md): these four keys,
    # integer ms timestamps in order; a timestamp excludes session_id/delay
    assert all(list(r) == ["timestamp", "input_length", "output_length", "hash_ids"] for r in recs)
    assert all(type(v) is int for r in recs for v in (r["timestamp"], *r["hash_ids"]))
    assert [r["timestamp"] for r in recs] == sorted(r["timestamp"] for r in recs)
    # the compaction call keeps exactly the 28 blocks of its 14,800 cached tokens, then new ones
    assert recs[5]["hash_ids"][:28] == recs[0]["hash_ids"][:28]
    assert recs[5]["hash_ids"][28] not in {h for r in recs[:5] for h in r["hash_ids"]}
    back = load_trace("mooncake", tmp_path / "m.jsonl").calls
    assert back["reused_prefix_tokens"].sum() > 0


@settings(max_examples=40)
@given(trace_objects())
def test_derived_ids_reuse_exactly_the_whole_blocks_of_the_agents_previous_call(trace):
    df = trace.calls
    for b in (16, 64, 512):
        offsets, ids = derive_block_ids(df, b)
        n_in = df["input_tokens"].to_numpy()
        assert (np.diff(offsets) == -(-n_in // b)).all()
        session = df["session_id"].rank("dense").to_numpy().astype(np.int64)
        lead = leading_seen_blocks(session, np.arange(df.height), offsets, ids)
        agent = df["agent_id"].fill_null("")
        prev_full = (
            df.select((pl.col("input_tokens") // b).shift(1).over("session_id", agent).fill_null(0))
            .to_series()
            .to_numpy()
        )
        want = np.minimum(
            np.minimum(df["reused_prefix_tokens"].to_numpy() // b, prev_full), -(-n_in // b)
        )
        assert (lead == want).all()


@settings(max_examples=25)
@given(trace_objects(with_hashes=True, block_size_tokens=64))
def test_any_trace_exports_to_weka_and_back_with_its_calls_and_reuse(tmp_path_factory, trace):
    out = tmp_path_factory.mktemp("w") / "w"
    export_weka(trace, out)
    key = ("session_id", "agent_id", "call_index")  # equal times may swap agents' turns
    a = trace.calls.sort(key, nulls_last=False)
    b = load_trace("weka", out).calls.sort(key, nulls_last=False)
    for col in ("session_id", "agent_id", "input_tokens", "output_tokens", "reused_prefix_tokens"):
        assert a[col].to_list() == b[col].to_list(), col


@settings(max_examples=40)
@given(trace_objects(with_hashes=True))  # block sizes 1, 16, 64, 512: merged to 512 or kept
def test_any_trace_exports_to_mooncake_with_whole_512_blocks_of_its_reuse(tmp_path_factory, trace):
    out = tmp_path_factory.mktemp("m") / "m.jsonl"
    export_mooncake(trace, out)
    back = load_trace("mooncake", out).calls.sort("source_line")
    order = np.lexsort((np.arange(trace.calls.height), trace.calls["t_start_s"].to_numpy()))
    a = trace.calls[order]
    assert back["input_tokens"].to_list() == a["input_tokens"].to_list()
    assert back["output_tokens"].to_list() == a["output_tokens"].to_list()
    floor512 = (a["reused_prefix_tokens"] // 512 * 512).to_numpy()
    assert (
        back["reused_prefix_tokens"].to_numpy()
        >= np.minimum(floor512, a["input_tokens"].to_numpy())
    ).all()


def test_cli_export_and_its_errors(tmp_path):
    src = tmp_path / "c.parquet"
    import_trace("claude-code", CC, src)
    run = lambda *a: CliRunner().invoke(cli, ["export", *map(str, a)])  # noqa: E731
    r = run(src, "--format", "mooncake", "-o", tmp_path / "m.jsonl")
    assert (r.exit_code, r.output) == (
        0,
        f"wrote {tmp_path / 'm.jsonl'}: 9 requests (mooncake) from 9 calls\n",
    )
    r = run(src, "--format", "weka", "-o", tmp_path / "w")
    assert (r.exit_code, r.output) == (
        0,
        f"wrote {tmp_path / 'w'}: 2 session files (weka) from 9 calls\n",
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    r = run(src, "--format", "weka", "-o", tmp_path / "w")
    assert (r.exit_code, r.output) == (
        2,
        f"Error: '{tmp_path / 'w'}' exists; weka export writes a new folder, choose another -o\n",
    )
    r = run(src, "--format", "moon", "-o", tmp_path / "x")
    assert (r.exit_code, r.output) == (
        2,
        "Error: unknown export format 'moon'; did you mean 'mooncake'?\n",
    )
    r = run(src, "--format", "mooncake", "-o", src)
    assert (
        r.exit_code == 2
        and r.output == f"Error: output path '{src}' is the input '{src}'; choose another -o\n"
    )
    r = run(tmp_path / "m.jsonl", "--format", "weka", "-o", tmp_path / "w2")
    assert r.exit_code == 1 and "a raw trace, not an agentx trace" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing partial left behind


def test_a_trace_without_hashes_exports_with_derived_blocks(tmp_path):
    src = shared_path("azure-llm-2023", "AzureLLMInferenceTrace_conv.csv")
    t = load_trace("azure", src)
    small = Trace(t.calls.head(200), t.meta)
    export_mooncake(small, tmp_path / "a.jsonl")
    back = load_trace("mooncake", tmp_path / "a.jsonl").calls
    assert back["input_tokens"].to_list() == small.calls["input_tokens"].to_list()
    assert back["reused_prefix_tokens"].sum() == 0  # nothing was reused, nothing is claimed


@pytest.mark.parametrize(("fmt", "name"), [("mooncake", "m.jsonl"), ("weka", "w")])
def test_unwritable_place_is_one_line(tmp_path, fmt, name):
    src = tmp_path / "c.parquet"
    import_trace("claude-code", CC, src)
    (tmp_path / "f").write_text("a file, not a folder")
    out = tmp_path / "f" / name
    r = CliRunner().invoke(cli, ["export", str(src), "--format", fmt, "-o", str(out)])
    assert r.exit_code == 1 and len(r.output.splitlines()) == 1
    assert r.output.startswith(f"Error: {out}: cannot write here (")
