"""Damaged agent logs (Hypothesis): one ``Error:`` line naming the file, the line and the
field, exit 1, no traceback and nothing written; or a clean import when the damage is harmless."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.cli import cli

FIX = REPO / "tests" / "fixtures"
CASES = {
    "claude-code": FIX
    / "claude-code"
    / "-home-dev-demo"
    / "5f1c2d3e-0000-4000-8000-00000000a001.jsonl",
    "codex": next((FIX / "codex").rglob("rollout-*.jsonl")),
    "otel": FIX / "otel" / "spans.jsonl",
}
# dotted paths of the fields each reader checks
FIELDS = {
    "claude-code": [
        "type",
        "timestamp",
        "isSidechain",
        "message",
        "message.id",
        "message.usage",
        "message.usage.input_tokens",
        "message.usage.cache_creation_input_tokens",
        "message.usage.cache_read_input_tokens",
        "message.usage.output_tokens",
        "subtype",
    ],
    "codex": [
        "type",
        "timestamp",
        "payload",
        "payload.info",
        "payload.info.last_token_usage",
        "payload.info.last_token_usage.input_tokens",
        "payload.info.last_token_usage.cached_input_tokens",
        "payload.info.last_token_usage.output_tokens",
    ],
    "otel": [
        "traceId",
        "spanId",
        "startTimeUnixNano",
        "endTimeUnixNano",
        "attributes",
        "attributes.gen_ai.usage.input_tokens",
        "attributes.gen_ai.usage.output_tokens",
        "attributes.gen_ai.usage.cache_read.input_tokens",
        "attributes.gen_ai.operation.name",
    ],
}
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _set(obj: dict, dotted: str, value: object, fmt: str) -> bool:
    if fmt == "otel" and dotted.startswith("attributes."):
        attrs = obj.get("attributes")
        if not isinstance(attrs, dict):
            return False
        attrs[dotted.removeprefix("attributes.")] = value
        return True
    *head, last = dotted.split(".")
    for k in head:
        obj = obj.get(k) if isinstance(obj, dict) else None
    if not isinstance(obj, dict):
        return False
    obj[last] = value
    return True


def _run(fmt: str, src: Path, out: Path):
    r = CliRunner().invoke(cli, ["import", fmt, str(src), "-o", str(out)])
    assert (
        "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    )
    return r


@pytest.mark.parametrize("fmt", sorted(CASES))
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_field_is_one_line_naming_file_line_and_field(tmp_path, fmt, data):
    lines = CASES[fmt].read_text().splitlines()
    k = data.draw(st.integers(0, len(lines) - 1), label="line index")
    field = data.draw(st.sampled_from(FIELDS[fmt]), label="field")
    value = data.draw(JUNK, label="value")
    rec = json.loads(lines[k])
    if not _set(rec, field, value, fmt):
        return
    lines[k] = json.dumps(rec)
    src = tmp_path / f"d{k}.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.parquet"
    if out.exists():
        out.unlink()
    r = _run(fmt, src, out)
    assert r.exit_code in (0, 1), r.output
    if r.exit_code == 0:
        assert out.exists()
        return
    assert len(r.output.splitlines()) == 1, r.output
    line = r.output.rstrip("\n")
    assert line.startswith(f"Error: {src}: line {k + 1}: field '") or line.startswith(
        f"Error: {src}: no model calls"
    ), line
    assert (
        not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    )


@pytest.mark.parametrize("fmt", sorted(CASES))
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_broken_json_line_is_one_line_naming_file_and_line(tmp_path, fmt, data):
    lines = CASES[fmt].read_text().splitlines()
    k = data.draw(st.integers(0, len(lines) - 1), label="line index")
    cut = data.draw(st.integers(1, len(lines[k]) - 1), label="cut")
    lines[k] = lines[k][:cut]
    src = tmp_path / "broken.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.parquet"
    r = _run(fmt, src, out)
    assert r.exit_code == 1
    assert r.output.startswith(f"Error: {src}: line {k + 1}: not valid JSON: ")
    assert len(r.output.splitlines()) == 1 and not out.exists()


def test_exact_messages_for_common_mistakes(tmp_path):
    src = CASES["claude-code"]
    lines = src.read_text().splitlines()
    rec = json.loads(lines[3])
    rec["message"]["usage"]["cache_read_input_tokens"] = -5
    lines[3] = json.dumps(rec)
    bad = tmp_path / "s.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = _run("claude-code", bad, tmp_path / "o.parquet")
    assert (r.exit_code, r.output) == (
        1,
        f"Error: {bad}: line 4: field 'message.usage.cache_read_input_tokens': "
        "expected a non-negative integer, got -5\n",
    )
    rec["message"]["usage"]["cache_read_input_tokens"] = 1
    rec["timestamp"] = "yesterday"
    lines[3] = json.dumps(rec)
    bad.write_text("\n".join(lines) + "\n")
    r = _run("claude-code", bad, tmp_path / "o.parquet")
    assert (
        r.output
        == f"Error: {bad}: line 4: field 'timestamp': expected an ISO-8601 time, got 'yesterday'\n"
    )


def test_token_sum_past_int64_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTX_MAX_CALL_TOKENS", str(2**63 - 1))  # reach the int64 guard
    lines = CASES["claude-code"].read_text().splitlines()
    rec = json.loads(lines[3])
    rec["message"]["usage"].update(
        input_tokens=2**62, cache_creation_input_tokens=2**62, cache_read_input_tokens=2**62
    )
    lines[3] = json.dumps(rec)
    bad = tmp_path / "s.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = _run("claude-code", bad, tmp_path / "o.parquet")
    assert (r.exit_code, r.output) == (
        1,
        f"Error: {bad}: line 4: field 'message.usage': expected a prompt below 2^63 tokens, "
        f"got {3 * 2**62} (input + cache creation + cache read)\n",
    )


@pytest.mark.parametrize("huge", ["input_tokens", "all three"])
def test_prompt_past_the_call_token_limit_names_line_and_field(tmp_path, huge):
    lines = CASES["claude-code"].read_text().splitlines()
    rec = json.loads(lines[3])
    usage = rec["message"]["usage"]
    if huge == "input_tokens":  # one field alone is past the limit: that field is named
        usage["input_tokens"] = 2**32 + 1
        field, n = "message.usage.input_tokens", 2**32 + 1
    else:  # each field below it, their sum (the call's prompt) past it: the usage is named
        usage.update(
            input_tokens=2**31, cache_creation_input_tokens=2**31, cache_read_input_tokens=1
        )
        field, n = "message.usage", 2**32 + 1
    lines[3] = json.dumps(rec)
    bad = tmp_path / "s.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = _run("claude-code", bad, tmp_path / "o.parquet")
    assert (r.exit_code, r.output) == (
        1,
        f"Error: {bad}: line 4: field '{field}': {n:,} tokens in one call is past the limit "
        "of 4,294,967,296 (set AGENTX_MAX_CALL_TOKENS to raise it, if the machine has the memory)\n",
    )
    assert not (tmp_path / "o.parquet").exists()


def test_broken_otlp_document_names_its_own_line(tmp_path):
    text = (FIX / "otel" / "agent-run.otlp.json").read_text()
    bad = tmp_path / "run.json"
    bad.write_text(text.replace('"spanId"', '"spanId" "', 1))
    r = _run("otel", bad, tmp_path / "o.parquet")
    line_no = text[: text.index('"spanId"')].count("\n") + 1
    assert r.exit_code == 1
    assert r.output.startswith(
        f"Error: {bad}: not valid JSON: Expecting ':' delimiter (line {line_no}, "
    )


def test_deeply_nested_json_is_one_line(tmp_path):
    bad = tmp_path / "deep.jsonl"
    bad.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    r = _run("claude-code", bad, tmp_path / "o.parquet")
    assert (r.exit_code, r.output) == (
        1,
        f"Error: {bad}: line 1: not readable JSON: nested too deeply\n",
    )


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_span_in_an_otlp_document_names_its_place_and_field(tmp_path, data):
    """A pretty-printed OTLP document has no useful line numbers: the span's path stands in."""
    doc = json.loads((FIX / "otel" / "agent-run.otlp.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    k = data.draw(st.integers(0, len(spans) - 1), label="span")
    field = data.draw(
        st.sampled_from(["traceId", "spanId", "startTimeUnixNano", "attributes"]), label="field"
    )
    spans[k][field] = data.draw(JUNK, label="value")
    src = tmp_path / "run.json"
    src.write_text(json.dumps(doc, indent=1))
    out = tmp_path / "out.parquet"
    out.unlink(missing_ok=True)  # tmp_path is shared by the examples
    r = _run("otel", src, out)
    assert r.exit_code in (0, 1)
    if r.exit_code == 0:
        assert out.exists()
        return
    assert len(r.output.splitlines()) == 1 and not out.exists()
    assert r.output.startswith(
        f"Error: {src}: resourceSpans[0].scopeSpans[0].spans[{k}]: field '{field}': "
    )
