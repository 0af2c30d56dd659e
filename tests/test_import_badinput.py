"""Bad input to the importers: one line naming file, row and field; exit 1 (2 for usage);
no traceback; no partial output. Real records from the bundled sample, mutated."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.cli import cli
from agentx.errors import InputError
from agentx.traces.importers import import_trace, load_trace

SAMPLE = REPO / "traces" / "sample"
SMALL = json.loads(gzip.decompress((SAMPLE / "trace_0026.json.gz").read_bytes()))
WITH_SUB = json.loads(gzip.decompress((SAMPLE / "trace_0291.json.gz").read_bytes()))


def write_session(folder: Path, doc: object, name: str = "trace_0001.json.gz") -> Path:
    path = folder / name
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    return path


def first_line(fmt: str, src: Path, out: Path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["import", fmt, str(src), "-o", str(out)])
    assert "Traceback" not in r.output
    return r.exit_code, r.output.splitlines()[0]


def mutated(doc: dict, i: int, field: str, value: object) -> dict:
    doc = copy.deepcopy(doc)
    doc["requests"][i][field] = value
    return doc


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("in", -3, "request 1: field 'in': expected a non-negative integer, got -3"),
        ("out", 3.5, "request 1: field 'out': expected a non-negative integer, got 3.5"),
        ("in", "17401", "request 1: field 'in': expected a non-negative integer, got '17401'"),
        ("out", True, "request 1: field 'out': expected a non-negative integer, got True"),
        ("in", None, "request 1: field 'in': expected a non-negative integer, got nothing"),
        ("t", -1, "request 1: field 't': expected a non-negative number of seconds, got -1"),
        (
            "t",
            50.0,
            "request 2: field 't': expected times sorted within the agent's requests, got 50.0 after 94.0",
        ),
        (
            "hash_ids",
            [1, 2],
            "request 1: field 'hash_ids': expected floor(in/64) = 271 block ids for 17401 tokens, got 2",
        ),
        ("hash_ids", "x", "request 1: field 'hash_ids': expected a list of block ids, got 'x'"),
        (
            "think_time",
            "5",
            "request 1: field 'think_time': expected a non-negative number of seconds, got '5'",
        ),
    ],
)
def test_weka_field_errors_name_file_request_and_field(tmp_path, field, value, message):
    index = 2 if value == 50.0 else 1
    src = write_session(tmp_path, mutated(SMALL, index, field, value))
    out = tmp_path / "out.parquet"
    code, line = first_line("weka", src, out)
    assert (code, line) == (1, f"Error: {src}: {message}")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_weka_block_id_elements_and_totals(tmp_path):
    doc = mutated(SMALL, 0, "hash_ids", SMALL["requests"][0]["hash_ids"][:-1] + ["7"])
    with pytest.raises(InputError) as err:
        load_trace("weka", write_session(tmp_path, doc))
    assert str(err.value).endswith(
        "request 0: field 'hash_ids': expected non-negative integer block ids below 2^63, element 237 is '7'"
    )
    doc = mutated(SMALL, 0, "hash_ids", SMALL["requests"][0]["hash_ids"][:-1] + [-4])
    with pytest.raises(InputError, match="element 237 is -4$"):
        load_trace("weka", write_session(tmp_path, doc))
    doc = mutated(SMALL, 0, "hash_ids", SMALL["requests"][0]["hash_ids"][:-1] + [2**64])
    with pytest.raises(InputError, match="element 237 is 18446744073709551616$"):
        load_trace("weka", write_session(tmp_path, doc))
    doc = copy.deepcopy(SMALL)
    doc["totals"]["parent_tokens"]["output"] += 1
    with pytest.raises(InputError) as err:
        load_trace("weka", write_session(tmp_path, doc))
    assert (
        "field 'totals.parent_tokens': expected {'input': 52760, 'output': 5294} (the sum of its requests)"
        in str(err.value)
    )


def test_weka_subagent_errors_name_the_nested_request(tmp_path):
    doc = copy.deepcopy(WITH_SUB)
    i = next(k for k, r in enumerate(doc["requests"]) if r.get("type") == "subagent")
    doc["requests"][i]["requests"][2]["out"] = -1
    with pytest.raises(InputError) as err:
        load_trace("weka", write_session(tmp_path, doc))
    agent = doc["requests"][i]["agent_id"]
    assert str(err.value) == (
        f"{tmp_path / 'trace_0001.json.gz'}: request {i} (sub-agent '{agent}') request 2: "
        "field 'out': expected a non-negative integer, got -1"
    )


def test_damaged_files_one_line_each(tmp_path):
    raw = gzip.compress(json.dumps(SMALL).encode(), mtime=0)
    trunc = tmp_path / "trace_0002.json.gz"
    trunc.write_bytes(raw[: len(raw) // 2])
    code, line = first_line("weka", trunc, tmp_path / "o.parquet")
    assert (code, line) == (
        1,
        f"Error: {trunc}: truncated or corrupt gzip (Compressed file ended before the end-of-stream marker was reached)",
    )
    bad_json = tmp_path / "trace_0003.json"
    bad_json.write_text(json.dumps(SMALL)[:-40])
    code, line = first_line("weka", bad_json, tmp_path / "o.parquet")
    assert (
        code == 1 and line.startswith(f"Error: {bad_json}: not valid JSON: ") and line.endswith(")")
    )
    not_object = write_session(tmp_path, [1, 2], "trace_0004.json")
    assert first_line("weka", not_object, tmp_path / "o.parquet") == (
        1,
        f"Error: {not_object}: expected a JSON object (one Weka session)",
    )
    no_req = write_session(
        tmp_path, {k: v for k, v in SMALL.items() if k != "requests"}, "trace_0005.json"
    )
    assert first_line("weka", no_req, tmp_path / "o.parquet") == (
        1,
        f"Error: {no_req}: field 'requests': expected a list of requests, got None",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert first_line("weka", empty, tmp_path / "o.parquet") == (
        1,
        f"Error: {empty}: no Weka session files (*.json or *.json.gz) in this folder",
    )
    twice = tmp_path / "twice"
    twice.mkdir()
    write_session(twice, SMALL, "trace_0001.json")
    write_session(twice, SMALL, "trace_0001.json.gz")
    assert first_line("weka", twice, tmp_path / "o.parquet") == (
        1,
        f"Error: {twice}: two files hold session 'trace_0001' (trace_0001.json and trace_0001.json.gz)",
    )
    missing = tmp_path / "nope"
    assert first_line("weka", missing, tmp_path / "o.parquet") == (
        1,
        f"Error: {missing}: no such file or folder",
    )
    assert not (tmp_path / "o.parquet").exists()


def test_failed_import_keeps_an_existing_output(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    write_session(good, SMALL)
    out = tmp_path / "w.parquet"
    import_trace("weka", good, out)
    before = out.read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    write_session(bad, mutated(SMALL, 0, "in", -1))
    with pytest.raises(InputError):
        import_trace("weka", bad, out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "good", "w.parquet"]


def test_unwritable_output_is_one_line(tmp_path):
    src = write_session(tmp_path, SMALL, "trace_0001.json")
    out = src / "x.parquet"  # below a file: no folder can be made there
    assert first_line("weka", src, out) == (
        1,
        f"Error: {out}: cannot write here (File exists)",
    )


def test_usage_errors_exit_2(tmp_path):
    src = write_session(tmp_path, SMALL, "trace_0001.json")
    r = CliRunner().invoke(cli, ["import", "weka", str(src), "-o", str(src)])
    assert (r.exit_code, r.output.splitlines()[0]) == (
        2,
        f"Error: output path '{src}' is the input '{src}'; choose another -o",
    )
    assert json.loads(src.read_text()) == SMALL  # the input is untouched
    r = CliRunner().invoke(cli, ["import", "wekka", str(src), "-o", str(tmp_path / "o.parquet")])
    assert (r.exit_code, r.output.splitlines()[0]) == (
        2,
        "Error: unknown format 'wekka'; did you mean 'weka'?",
    )
    r = CliRunner().invoke(
        cli, ["import", "azure", str(src), "-o", str(tmp_path / "o.parquet"), "--seed", "3"]
    )
    assert (r.exit_code, r.output.splitlines()[0]) == (
        2,
        "Error: --session-rate and --seed apply to the weka format only, not 'azure'",
    )
    r = CliRunner().invoke(
        cli, ["import", "weka", str(src), "-o", str(tmp_path / "o.parquet"), "--session-rate", "0"]
    )
    assert (r.exit_code, r.output.splitlines()[0]) == (
        2,
        "Error: session rate must be a positive number of sessions per second, got 0.0",
    )


def test_other_formats_name_line_and_field(tmp_path):
    mc = tmp_path / "mc.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}] * 2
    rows.append({"timestamp": 10, "input_length": -1, "output_length": 5, "hash_ids": []})
    mc.write_text("\n".join(map(json.dumps, rows)))
    assert first_line("mooncake", mc, tmp_path / "o.parquet") == (
        1,
        f"Error: {mc}: line 3: field 'input_length': expected a non-negative integer, got -1",
    )
    mc.write_text(
        json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0]})
    )
    assert first_line("mooncake", mc, tmp_path / "o.parquet") == (
        1,
        f"Error: {mc}: line 1: field 'hash_ids': expected ceil(input_length/512) = 2 block ids for 600 tokens, got 1",
    )
    mc.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[0] | {"timestamp": -0.5}))
    assert first_line("mooncake", mc, tmp_path / "o.parquet")[1].endswith(
        "line 2: field 'timestamp': expected a non-negative time in milliseconds, got -0.5"
    )
    mc.write_text(json.dumps(rows[0] | {"timestamp": 9}) + "\n" + json.dumps(rows[0]))
    assert first_line("mooncake", mc, tmp_path / "o.parquet")[1].endswith(
        "line 2: field 'timestamp': expected times sorted through the file, got 0 after 9"
    )
    mc.write_text('{"timestamp": 0, "input_length": 6')
    assert first_line("mooncake", mc, tmp_path / "o.parquet") == (
        1,
        f"Error: {mc}: line 1: not valid JSON: Expecting ',' delimiter (column 35)",
    )

    az = tmp_path / "az.csv"
    az.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.99,12.5,109\n"
    )
    assert first_line("azure", az, tmp_path / "o.parquet") == (
        1,
        f"Error: {az}: line 3: field 'ContextTokens': expected a non-negative integer token count, got '12.5'",
    )
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,374,44\n")
    assert first_line("azure", az, tmp_path / "o.parquet") == (
        1,
        f"Error: {az}: line 2: field 'TIMESTAMP': expected a time like 2023-11-16 18:15:46.6805900, got 'yesterday'",
    )
    az.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n")
    assert first_line("azure", az, tmp_path / "o.parquet") == (
        1,
        f"Error: {az}: field 'GeneratedTokens': missing column (expected TIMESTAMP, ContextTokens, GeneratedTokens; found TIMESTAMP, ContextTokens)",
    )

    tl = tmp_path / "tl.jsonl"
    row = {
        "session_id": "s",
        "round_index": 0,
        "input_tokens_total": 10,
        "prefix_tokens": 4,
        "newly_append_tokens": 5,
        "output_tokens": 1,
        "timing_events": [{"timestamp": "2026-01-01T00:00:00Z"}],
    }
    tl.write_text(json.dumps(row))
    assert first_line("tracelab", tl, tmp_path / "o.parquet") == (
        1,
        f"Error: {tl}: line 1: field 'newly_append_tokens': expected input_tokens_total − prefix_tokens = 6, got 5",
    )
    tl.write_text(
        json.dumps(row | {"newly_append_tokens": 6, "timing_events": [{"timestamp": "noon"}]})
    )
    assert first_line("tracelab", tl, tmp_path / "o.parquet") == (
        1,
        f"Error: {tl}: line 1: field 'timing_events.timestamp': expected an ISO-8601 time, got 'noon'",
    )
    assert not (tmp_path / "o.parquet").exists()


# --- fuzz: mutated real records never give a traceback, only InputError naming file and field

BAD_VALUES = st.sampled_from([-3, 3.5, "7", None, True, [], {}, 2**70, float("nan"), -0.0, ""])
FIELDS = ["t", "in", "out", "hash_ids", "think_time", "api_time", "model", "input_types", "type"]
TOP = ["requests", "tool_tokens", "system_tokens", "totals", "block_size", "hash_id_scope"]


@st.composite
def field_mutation(draw):
    doc = copy.deepcopy(draw(st.sampled_from([SMALL, WITH_SUB])))
    if draw(st.booleans()):
        target = doc
        field = draw(st.sampled_from(TOP))
    else:
        reqs = doc["requests"]
        r = draw(st.sampled_from(reqs))
        if r.get("type") == "subagent" and draw(st.booleans()):
            r = draw(st.sampled_from(r["requests"]))
        target, field = r, draw(st.sampled_from(FIELDS + ["agent_id", "requests"]))
    if draw(st.booleans()):
        target.pop(field, None)
    else:
        target[field] = draw(BAD_VALUES)
    return doc, field


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(field_mutation())
def test_fuzz_field_mutations(tmp_path, case):
    doc, field = case
    path = write_session(tmp_path, doc)
    try:
        trace = load_trace("weka", path)
    except InputError as err:
        msg = str(err)
        assert msg.startswith(f"{path}: ") and "\n" not in msg
        assert "field '" in msg, msg
    else:
        assert trace.calls.height > 0  # a harmless mutation (e.g. a dropped optional field)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_fuzz_damaged_bytes(tmp_path, data):
    raw = json.dumps(data.draw(st.sampled_from([SMALL, WITH_SUB]))).encode()
    gz = data.draw(st.booleans())
    blob = gzip.compress(raw, mtime=0) if gz else raw
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    else:
        i = data.draw(st.integers(0, len(blob) - 1))
        blob = blob[:i] + bytes([blob[i] ^ data.draw(st.integers(1, 255))]) + blob[i + 1 :]
    path = tmp_path / ("trace_0009.json.gz" if gz else "trace_0009.json")
    path.write_bytes(blob)
    out = tmp_path / "o.parquet"
    try:
        import_trace("weka", path, out)
    except InputError as err:
        assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
        assert not out.exists()
    else:
        assert load_trace("weka", path).calls.height > 0
    out.unlink(missing_ok=True)


def _real_head(fmt: str) -> tuple[str, bytes]:
    """The first lines of a real file of each other format (skipped when ../shared is absent)."""
    from conftest import shared_path

    where = {
        "mooncake": ("mooncake-fast25", "conversation_trace.jsonl", 12),
        "azure": ("azure-llm-2023", "AzureLLMInferenceTrace_conv.csv", 13),
        "tracelab": ("tracelab-example", "round_trace.jsonl", 6),
    }[fmt]
    lines = shared_path(*where[:2]).read_bytes().splitlines(keepends=True)[: where[2]]
    return where[1], b"".join(lines)


@st.composite
def other_format_damage(draw):
    fmt = draw(st.sampled_from(["mooncake", "azure", "tracelab"]))
    return fmt, draw(st.data())


@settings(
    max_examples=90, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(other_format_damage())
def test_fuzz_other_formats(tmp_path, case):
    fmt, data = case
    name, blob = _real_head(fmt)
    kind = data.draw(st.sampled_from(["field", "truncate", "flip"]))
    if kind == "field" and fmt != "azure":
        lines = blob.splitlines()
        i = data.draw(st.integers(0, len(lines) - 1))
        rec = json.loads(lines[i])
        key = data.draw(st.sampled_from(sorted(rec)))
        if data.draw(st.booleans()):
            del rec[key]
        else:
            rec[key] = data.draw(BAD_VALUES)
        lines[i] = json.dumps(rec).encode()
        blob = b"\n".join(lines)
    elif kind == "field":
        rows = [r.split(b",") for r in blob.splitlines()]
        i, j = data.draw(st.integers(0, len(rows) - 1)), data.draw(st.integers(0, 2))
        rows[i][j] = data.draw(
            st.sampled_from([b"-3", b"3.5", b"x", b"", b"2023-13-45 99:00:00", b"1e400"])
        )
        blob = b"\n".join(b",".join(r) for r in rows)
    elif kind == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    else:
        i = data.draw(st.integers(0, len(blob) - 1))
        blob = blob[:i] + bytes([blob[i] ^ data.draw(st.integers(1, 255))]) + blob[i + 1 :]
    path = tmp_path / name
    path.write_bytes(blob)
    try:
        trace = load_trace(fmt, path)
    except InputError as err:
        assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
    else:
        assert trace.calls.height > 0
