"""``agentx inspect`` and ``inspect_trace``: figures against SOURCES.md and a hand-made trace;
the README column table against the schema."""

from __future__ import annotations

import json
import runpy

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import REPO

from agentx.cli import cli
from agentx.io import write_parquet_atomic
from agentx.traces import schema as S
from agentx.traces.io import Trace, read_trace, trace_metadata, write_trace
from agentx.traces.stats import inspect_trace, read_for_stats

SAMPLE = REPO / "traces" / "sample" / "weka-sample.parquet"


def invoke(*args):
    return CliRunner().invoke(cli, list(map(str, args)))


def test_whole_weka_set_figures_match_sources(weka_parquet):
    s = inspect_trace(read_for_stats(weka_parquet))
    assert (
        s["sessions"],
        s["calls"],
        s["main_agent_calls"],
        s["subagent_calls"],
        s["subagents"],
    ) == (603, 42_535, 41_909, 626, 59)
    assert s["prefix_reuse_token_weighted"] == pytest.approx(0.963, abs=0.0005)
    assert (s["compaction"]["events"], s["compaction"]["sessions"]) == (190, 108)
    tok = s["tokens"]
    # SOURCES.md §2 (numpy linear percentiles): input p50 104,845 / p90 239,435 / max 894,371
    assert (
        tok["input_tokens"]["p50"],
        round(tok["input_tokens"]["p90"]),
        tok["input_tokens"]["max"],
    ) == (104_845, 239_435, 894_371)
    assert (
        tok["output_tokens"]["p50"],
        tok["output_tokens"]["p90"],
        tok["output_tokens"]["max"],
    ) == (217, 894, 18_195)
    g = s["context_growth"]
    assert (
        g["first_input_tokens"]["p50"],
        round(g["first_input_tokens"]["p90"]),
        g["first_input_tokens"]["max"],
    ) == (24_775, 261_387, 851_858)
    assert (g["last_input_tokens"]["p50"], round(g["last_input_tokens"]["p90"])) == (
        134_608,
        349_755,
    )
    assert (s["time"]["think_time_s"]["p50"], s["time"]["think_time_s"]["p90"]) == (10, 158)
    assert s["time"]["session_duration_s"]["p50"] == pytest.approx(60 * 60, rel=0.01)  # 60 min
    assert s["triggers"]["tool_result"] == 35_815
    assert s["models"]["claude-opus-4-5-20251101"] == 19_789
    assert s["time"]["session_rate_per_s"] == pytest.approx(1 / 6, rel=0.1)


def _hand_trace() -> Trace:
    rows = [
        # session a: 3 main calls (the third compacts) and one sub-agent call
        ("a", 0, None, 0.0, 30_000, 0, 100, 1_000),
        ("a", 1, "sub1", 5.0, 2_000, 0, 10, 500),
        ("a", 2, None, 10.0, 40_000, 29_000, 200, 1_000),
        ("a", 3, None, 20.0, 5_000, 1_000, 300, 1_000),
        # session b: one call
        ("b", 0, None, 30.0, 1_000, 0, 50, 0),
    ]
    df = pl.DataFrame(
        rows,
        schema=[*S.COLUMN_NAMES[:6], "output_tokens", "shared_prefix_tokens"],
        orient="row",
    )
    df = df.with_columns(
        new_tokens=pl.col("input_tokens") - pl.col("reused_prefix_tokens"),
        is_compaction=pl.Series([False, False, False, True, False]),
        block_size_tokens=pl.lit(None, pl.Int64),
        block_hashes=pl.lit(None, pl.List(pl.UInt64)),
        trigger=pl.Series(["user", "subagent", "tool_result", "tool_result", "user"]),
        think_time_s=pl.Series([None, 1.0, 2.0, 4.0, None]),
        model=pl.lit("m"),
        source=pl.lit("synth"),
    )
    return Trace(S.conform(df), trace_metadata("synth", block_size_tokens=None, hash_scope="none"))


def test_hand_made_trace_exact_figures():
    s = inspect_trace(_hand_trace())
    assert (s["sessions"], s["calls"], s["subagent_calls"], s["subagents"]) == (2, 5, 1, 1)
    assert s["prefix_reuse_token_weighted"] == pytest.approx(30_000 / 78_000)
    assert (
        s["tokens"]["input_tokens"]["sum"] == 78_000 and s["tokens"]["input_tokens"]["p50"] == 5_000
    )
    assert s["tokens"]["new_tokens"]["max"] == 30_000
    assert s["compaction"] == {
        **s["compaction"],
        "events": 1,
        "sessions": 1,
        "prefix_only_events": 1,
    }
    g = s["context_growth"]  # main-agent calls only: a = 30k → 40k → 5k, b = 1k
    assert g["first_input_tokens"]["mean"] == 15_500 and g["last_input_tokens"]["max"] == 5_000
    assert g["max_input_tokens"]["p50"] == pytest.approx(20_500)
    assert g["growth_tokens_per_call"]["n"] == 1 and g["growth_tokens_per_call"]["mean"] == -12_500
    t = s["time"]
    assert t["trace_duration_s"] == 30.0 and t["call_rate_per_s"] == pytest.approx(5 / 30)
    assert t["session_rate_per_s"] == pytest.approx(1 / 30)
    assert t["session_duration_s"]["max"] == 20.0 and t["think_time_s"]["n"] == 3
    assert s["calls_per_session"]["p90"] == pytest.approx(3.7)  # linear between 1 and 4
    assert s["triggers"] == {"subagent": 1, "tool_result": 2, "user": 2}


def test_cli_table_and_json_on_the_bundled_sample():
    r = invoke("inspect", SAMPLE)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["metric", "value"]
    table = {line[:30].strip(): line[30:].strip() for line in lines[2:17]}
    assert table["sessions"] == "5" and table["calls"] == "445"
    assert table["sub-agent calls"] == "23 (3 sub-agents)"
    assert table["prefix reuse, token-weighted"] == "94.7 %"
    assert "quantity" in r.output and "session first_input_tokens" in r.output
    j = invoke("inspect", SAMPLE, "--json")
    assert j.exit_code == 0
    got = json.loads(j.output)
    assert got == json.loads(json.dumps(inspect_trace(read_trace(SAMPLE))))
    assert got["calls"] == 445 and got["compaction"]["events"] == 7


def test_inspect_errors(tmp_path):
    missing = tmp_path / "none.parquet"
    r = invoke("inspect", missing)
    assert (r.exit_code, r.output.splitlines()[0]) == (1, f"Error: {missing}: no such file")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really")
    r = invoke("inspect", junk)
    assert r.exit_code == 1 and r.output.startswith(f"Error: {junk}: not a readable Parquet file (")
    plain = tmp_path / "plain.parquet"
    write_parquet_atomic(pl.DataFrame({"x": [1]}), plain)
    r = invoke("inspect", plain)
    assert (r.exit_code, r.output.splitlines()[0]) == (
        1,
        f"Error: {plain}: not an agentx trace (no 'agentx.schema_version' metadata); convert it with 'agentx import'",
    )
    bad = tmp_path / "bad.parquet"
    trace = _hand_trace()
    write_trace(trace, bad)
    df = read_trace(bad).calls.with_columns(
        pl.when(pl.col("call_index") == 2)
        .then(-5)
        .otherwise(pl.col("output_tokens"))
        .alias("output_tokens")
    )
    write_parquet_atomic(df, bad, trace.meta)
    r = invoke("inspect", bad)
    assert (r.exit_code, r.output.splitlines()[0]) == (
        1,
        f"Error: {bad}: row 2: session 'a' call 2: field 'output_tokens': expected a non-negative token count, got -5",
    )
    assert "Traceback" not in r.output


def test_help_ends_with_an_example():
    for name in ("import", "inspect"):
        r = invoke(name, "--help")
        assert r.exit_code == 0 and r.output.strip().splitlines()[-1].strip().startswith(
            f"Example: agentx {name} "
        )


def test_readme_column_table_is_generated_from_the_schema():
    gen = runpy.run_path(str(REPO / "traces" / "make_sample.py"))["columns_markdown"]()
    readme = (REPO / "traces" / "README.md").read_text()
    assert gen in readme, "traces/README.md column table is stale: run python traces/make_sample.py"
    for c in S.COLUMNS:
        assert f"| `{c.name}` |" in readme
    assert "| `api_time_s` |" in readme  # the one extra column an importer adds
