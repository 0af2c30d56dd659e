"""Agent-log importers (claude-code, codex, otel): exact mappings on the fixtures written from
each format's public documentation, no prompt text in the output, and the CLI around them."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import REPO

from agentx.cli import cli
from agentx.traces.importers import import_trace, load_trace
from agentx.traces.io import read_trace

FIX = REPO / "tests" / "fixtures"
CC = FIX / "claude-code"
S1 = "5f1c2d3e-0000-4000-8000-00000000a001"
S2 = "5f1c2d3e-0000-4000-8000-00000000a002"


def rows(fmt: str, *sources: Path) -> list[dict]:
    df = load_trace(fmt, list(sources)).calls
    return df.drop("block_hashes", "block_size_tokens", "source").to_dicts()


def test_claude_code_mapping_is_exact():
    got = rows("claude-code", CC)
    # (session, agent, t, input, reused, output, compaction, trigger, think, parent, model)
    want = [
        (S1, None, 0.0, 3 + 1200 + 14800, 14800, 240, False, "user", None, None, "sonnet"),
        (S1, None, 12.0, 5 + 900 + 16000, 16000, 310, False, "tool_result", 7.1, None, "sonnet"),
        (S1, "a7e3c21", 16.0, 3 + 9000, 0, 80, False, "subagent", None, 1, "haiku"),
        (S1, "a7e3c21", 19.0, 3 + 400 + 9000, 9000, 150, False, "tool_result", 1.0, 1, "haiku"),
        (S1, None, 70.0, 4 + 2100 + 16900, 16900, 95, False, "tool_result", 54.5, None, "sonnet"),
        (
            S1,
            None,
            1860.0,
            10 + 3600 + 14800,
            14800,
            180,
            True,
            "compaction",
            1787.0,
            None,
            "sonnet",
        ),
        (S2, None, 3600.0, 4 + 15000, 0, 60, False, "user", None, None, "opus"),
        (S2, "sidechain-w-0001", 3606.0, 5003, 0, 40, False, "subagent", None, 0, "opus"),
        (S2, None, 3610.0, 15304, 15000, 120, False, "tool_result", 5.0, None, "opus"),
    ]
    assert len(got) == len(want)
    for r, w in zip(got, want, strict=True):
        assert (r["session_id"], r["agent_id"]) == w[:2]
        assert r["t_start_s"] == pytest.approx(w[2])
        assert (r["input_tokens"], r["reused_prefix_tokens"], r["output_tokens"]) == w[3:6]
        assert r["new_tokens"] == w[3] - w[4]
        assert (r["is_compaction"], r["trigger"]) == w[6:8]
        assert r["think_time_s"] == (None if w[8] is None else pytest.approx(w[8]))
        assert r["parent_call_index"] == w[9] and w[10] in r["model"]
    # the first call's cache read is what other sessions left: the shared tool+system prefix
    assert [r["shared_prefix_tokens"] for r in got[:2]] == [14800, 14800]


def test_claude_code_one_file_or_a_project_folder_or_the_projects_folder():
    one = rows("claude-code", CC / "-home-dev-demo" / f"{S2}.jsonl")
    assert [r["session_id"] for r in one] == [S2] * 3
    assert rows("claude-code", CC / "-home-dev-demo") == rows("claude-code", CC)
    # a sub-agent file alone still joins its parent's session, as that sub-agent
    sub = rows("claude-code", CC / "-home-dev-demo" / S1 / "subagents" / "agent-a7e3c21.jsonl")
    assert [(r["session_id"], r["agent_id"]) for r in sub] == [(S1, "a7e3c21")] * 2


def test_codex_mapping_is_exact():
    got = rows("codex", FIX / "codex")
    assert [r["session_id"] for r in got] == ["0199a3b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b"] * 3
    assert [(r["input_tokens"], r["reused_prefix_tokens"], r["output_tokens"]) for r in got] == [
        (9800, 0, 150),
        (10100, 9728, 220),
        (4200, 3072, 90),
    ]  # the repeated token_count (same totals) is not a second call
    assert [r["trigger"] for r in got] == ["user", "tool_result", "compaction"]
    assert [r["is_compaction"] for r in got] == [False, False, True]
    assert [r["t_start_s"] for r in got] == pytest.approx([0.0, 4.4, 309.9])
    assert [r["think_time_s"] for r in got] == [None, pytest.approx(1.3), pytest.approx(302.9)]
    assert {r["model"] for r in got} == {"gpt-5-codex"}


def test_otel_mapping_is_exact_for_both_layouts():
    got = rows("otel", FIX / "otel" / "agent-run.otlp.json", FIX / "otel" / "spans.jsonl")
    conv = [r for r in got if r["session_id"] == "conv_42"]
    # invoke_agent (with its 99,999 aggregated tokens) and execute_tool spans are not calls
    assert [(r["agent_id"], r["input_tokens"], r["reused_prefix_tokens"]) for r in conv] == [
        (None, 12000, 0),
        ("reviewer", 3000, 0),
        (None, 12700, 11900),
    ]
    assert [r["model"] for r in conv] == ["claude-sonnet-4-5", "gpt-4.1-mini", "claude-sonnet-4-5"]
    assert conv[1]["parent_call_index"] == 0 and conv[2]["think_time_s"] == pytest.approx(12.0)
    by_trace = [r for r in got if r["session_id"] == "0af7651916cd43dd8448eb211c80319c"]
    assert [
        (r["input_tokens"], r["reused_prefix_tokens"], r["output_tokens"]) for r in by_trace
    ] == [
        (800, 0, 64),
        (1400, 768, 90),
        (2100, 1280, 40),
    ]
    assert [r["t_start_s"] for r in by_trace] == pytest.approx([3599.0, 3604.0, 3611.0])


@pytest.mark.parametrize(
    ("fmt", "src"),
    [("claude-code", CC), ("codex", FIX / "codex"), ("otel", FIX / "otel")],
)
def test_no_prompt_or_response_text_reaches_the_parquet(tmp_path, fmt, src):
    texts = "".join(p.read_text() for p in sorted(src.rglob("*.json*")))
    assert texts.count("SECRET-") >= 2  # the fixtures do carry text
    out = tmp_path / "t.parquet"
    import_trace(fmt, src, out)
    table = pq.read_table(out)
    stored = json.dumps(table.to_pylist(), default=str) + repr(table.schema.metadata)
    assert "SECRET" not in stored
    raw = pq.ParquetFile(out)
    assert raw.metadata.num_rows == table.num_rows  # what was searched is the whole file


def test_cli_imports_several_sources_and_the_trace_replays(tmp_path):
    out = tmp_path / "o.parquet"
    r = CliRunner().invoke(
        cli,
        [
            "import",
            "otel",
            str(FIX / "otel" / "agent-run.otlp.json"),
            str(FIX / "otel" / "spans.jsonl"),
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert r.output == f"wrote {out}: 6 calls in 2 sessions (1 sub-agent calls) from otel\n"
    assert read_trace(out).calls["source"].unique().to_list() == ["otel"]


def test_cli_refuses_several_sources_for_a_single_source_format(tmp_path):
    r = CliRunner().invoke(
        cli, ["import", "weka", "a.json", "b.json", "-o", str(tmp_path / "x.parquet")]
    )
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == (
        "Error: format 'weka' reads one file or folder, got 2 (several are read by: claude-code, codex, otel)"
    )


def test_folder_without_session_files_is_one_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    r = CliRunner().invoke(
        cli, ["import", "claude-code", str(logs), "-o", str(tmp_path / "x.parquet")]
    )
    assert r.exit_code == 1
    assert (
        r.output
        == f"Error: {logs}: no Claude Code session files (*.jsonl) in this folder or below\n"
    )


def test_a_file_with_no_model_calls_is_one_line(tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_text('{"type": "summary", "summary": "x", "leafUuid": "u"}\n')
    r = CliRunner().invoke(
        cli, ["import", "claude-code", str(src), "-o", str(tmp_path / "x.parquet")]
    )
    assert r.exit_code == 1
    assert r.output == f"Error: {src}: no model calls with token usage in the input\n"


def test_same_input_same_bytes(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    import_trace("claude-code", CC, a)
    import_trace("claude-code", CC, b)
    assert a.read_bytes() == b.read_bytes()
    assert pl.read_parquet(a)["parent_call_index"].to_list() == [
        None,
        None,
        1,
        1,
        None,
        None,
        None,
        0,
        None,
    ]


def test_readme_three_commands_run_on_claude_code_logs(tmp_path, monkeypatch):
    """The README's 'own Claude Code traffic on GB200' block, with the fixture as ~/.claude."""
    import shlex

    readme = (REPO / "README.md").read_text()
    block = readme.split("## Your own Claude Code traffic on GB200, in three commands")[1]
    cmds = [ln.split("#")[0].strip() for ln in block.split("```sh")[1].split("```")[0].splitlines()]
    cmds = [c for c in cmds if c]
    assert len(cmds) == 3 and cmds[2].startswith("agentx replay mine.parquet --hw gb200")
    monkeypatch.chdir(tmp_path)
    for c in cmds:
        args = [a.replace("~/.claude/projects", str(CC)) for a in shlex.split(c)[1:]]
        r = CliRunner().invoke(cli, [*args, "-q"] if args[0] == "replay" else args)
        assert r.exit_code == 0, (c, r.output)
    summary = json.loads((tmp_path / "runs" / "mine" / "summary.json").read_text())
    assert summary["kv_tiers"]  # KV tiers run on blocks synthesized from the token counts


def test_a_sudden_context_drop_without_marker_is_a_compaction(tmp_path):
    def call(i: int, ts: str, read: int) -> str:
        usage = {
            "input_tokens": 5,
            "cache_creation_input_tokens": 500,
            "cache_read_input_tokens": read,
            "output_tokens": 9,
        }
        msg = {"id": f"m{i}", "model": "claude-opus-4-5", "usage": usage, "content": []}
        return json.dumps({"type": "assistant", "timestamp": ts, "uuid": f"u{i}", "message": msg})

    src = tmp_path / "s.jsonl"
    src.write_text(
        "\n".join(
            [call(0, "2026-01-01T00:00:00Z", 90_000), call(1, "2026-01-01T00:01:00Z", 30_000)]
        )
    )
    got = load_trace("claude-code", src).calls
    assert got["is_compaction"].to_list() == [False, True]  # 30,505 < 0.6 × 90,505 (SEED-6)


def test_claude_code_and_codex_mappings_agree_with_tracelab_on_real_steps(tmp_path):
    """TraceLab (uw-syfi) derived its rows from real Claude Code and Codex logs; the raw usage
    fields it keeps, written back as Claude Code entries and Codex token_count events, must
    give what agentx's tracelab importer reads from TraceLab's own totals."""
    from conftest import shared_path

    src = shared_path("tracelab-example", "round_trace.jsonl")
    steps = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    cc, cx = [], []
    for i, r in enumerate(steps):
        ts = r["timing_events"][0]["timestamp"]
        if r["provider"] == "claude":
            usage = {
                "input_tokens": r["claude_uncached_input_tokens"],
                "cache_creation_input_tokens": r["claude_cache_creation_input_tokens"],
                "cache_read_input_tokens": r["claude_cache_read_input_tokens"],
                "output_tokens": r["output_tokens"],
            }
            msg = {"id": f"m{i}", "model": r["model"], "usage": usage}
            cc.append(json.dumps({"type": "assistant", "timestamp": ts, "message": msg}))
        else:
            last = {
                "input_tokens": r["input_tokens_total"],
                "cached_input_tokens": r["prefix_tokens"],
                "output_tokens": r["output_tokens"],
            }
            info = {"total_token_usage": {"n": i}, "last_token_usage": last}
            cx.append(
                json.dumps(
                    {
                        "timestamp": ts,
                        "type": "event_msg",
                        "payload": {"type": "token_count", "info": info},
                    }
                )
            )
    (tmp_path / "cc.jsonl").write_text("\n".join(cc) + "\n")
    (tmp_path / "rollout-x.jsonl").write_text("\n".join(cx) + "\n")
    ref = load_trace("tracelab", src).calls
    cols = ["input_tokens", "reused_prefix_tokens", "new_tokens", "output_tokens"]
    for fmt, name, provider in (
        ("claude-code", "cc.jsonl", "claude"),
        ("codex", "rollout-x.jsonl", "codex"),
    ):
        got = load_trace(fmt, tmp_path / name).calls.select(cols)
        want = [r for r in steps if r["provider"] == provider]
        assert len(want) >= 9 and got.height == len(want)
        assert got["input_tokens"].to_list() == [r["input_tokens_total"] for r in want]
        assert got["reused_prefix_tokens"].to_list() == [r["prefix_tokens"] for r in want]
        assert got["new_tokens"].to_list() == [r["newly_append_tokens"] for r in want]
        tl = ref.filter(pl.col("input_tokens").is_in(got["input_tokens"].implode()))
        assert sorted(tl["reused_prefix_tokens"].to_list()) == sorted(
            got["reused_prefix_tokens"].to_list()
        )


def test_a_resumed_session_repeating_history_counts_each_message_once(tmp_path):
    orig = CC / "-home-dev-demo" / f"{S2}.jsonl"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / f"{S2}.jsonl").write_text(orig.read_text())
    extra = {
        "type": "assistant",
        "timestamp": "2026-01-10T11:00:00.000Z",
        "message": {
            "id": "msg_05A",
            "model": "claude-opus-4-1",
            "usage": {"input_tokens": 7, "cache_read_input_tokens": 15400, "output_tokens": 30},
        },
    }
    resumed = orig.read_text() + json.dumps(extra) + "\n"
    (tmp_path / "a" / "resumed-0000.jsonl").write_text(resumed)
    got = load_trace("claude-code", tmp_path).calls
    assert got.height == 4  # 3 calls of the original + the one new call of the resumed file
    assert got.filter(pl.col("session_id") == "resumed-0000")["input_tokens"].to_list() == [15407]


def test_otel_older_spellings_and_session_attributes(tmp_path):
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "startTimeUnixNano": 1_700_000_000_000_000_000,
        "endTimeUnixNano": 1_700_000_001_000_000_000,
        "attributes": {
            "llm.request.type": "chat",
            "gen_ai.usage.prompt_tokens": 900,
            "gen_ai.usage.completion_tokens": 33,
            "session.id": "oi-session-7",
        },
    }
    src = tmp_path / "s.jsonl"
    src.write_text(json.dumps(span) + "\n")
    got = rows("otel", src)
    assert [(r["session_id"], r["input_tokens"], r["output_tokens"]) for r in got] == [
        ("oi-session-7", 900, 33)
    ]


def test_otel_collector_file_exporter_layout_one_envelope_a_line(tmp_path):
    doc = json.loads((FIX / "otel" / "agent-run.otlp.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    lines = []
    for half in (spans[:3], spans[3:]):  # the exporter writes one batch per line
        batch = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": half}]}]}
        lines.append(json.dumps(batch))
    src = tmp_path / "collector.jsonl"
    src.write_text("\n".join(lines) + "\n")
    assert rows("otel", src) == rows("otel", FIX / "otel" / "agent-run.otlp.json")
