"""OpenTelemetry GenAI spans as OTLP JSON, the form LangSmith, Langfuse, OpenLLMetry and the
agent SDKs export.

Accepted layouts, per file: one OTLP ``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``
document, or JSON Lines where each line is such an envelope (the Collector's file exporter)
or a single span object. A span has ``traceId``, ``spanId``, ``parentSpanId``,
``startTimeUnixNano``, ``endTimeUnixNano`` (decimal strings or numbers) and ``attributes``,
either OTLP ``[{"key", "value": {"intValue" | "stringValue" | …}}]`` or a plain object.

A span is a model call when ``gen_ai.operation.name`` is ``chat``, ``text_completion`` or
``generate_content``, or when it has no operation name but carries
``gen_ai.usage.input_tokens`` (``invoke_agent`` and ``execute_tool`` spans are not calls:
their usage would count their children twice). Mapping (semantic-conventions
``docs/gen-ai/gen-ai-spans.md``): ``gen_ai.usage.input_tokens`` (all input, cached included)
→ ``input_tokens``; ``gen_ai.usage.cache_read.input_tokens`` → ``reused_prefix_tokens``;
``gen_ai.usage.output_tokens`` → ``output_tokens``; ``gen_ai.request.model`` (else
``gen_ai.response.model``) → ``model``; session = ``gen_ai.conversation.id`` (else
OpenInference's ``session.id``, Langfuse's ``langfuse.session.id``), else the trace id; agent = ``gen_ai.agent.id`` (or ``gen_ai.agent.name``) of the span or its nearest
ancestor, the session's first agent being the main one. Prompt and completion attributes
(``gen_ai.input.messages`` …) are never read.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentx.errors import InputError
from agentx.traces.importers._agentlog import Calls, assemble, source_files
from agentx.traces.importers._common import count, parse_json, read_bytes
from agentx.traces.io import Trace

CALL_OPERATIONS = ("chat", "text_completion", "generate_content")
IN, OUT = "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"
# older spellings (OpenLLMetry and early semantic conventions): read when the current is absent
IN_OLD, OUT_OLD = "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"
SESSION = ("gen_ai.conversation.id", "session.id", "langfuse.session.id")
CACHE_READ = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
AGENT = ("gen_ai.agent.id", "gen_ai.agent.name")


def load_otel(source) -> Trace:
    """Read OTLP JSON files of GenAI spans (files, or folders of *.json / *.jsonl)."""
    files = [p for s in _listed(source) for p in source_files(s, ".json*", "OTLP JSON files")]
    spans: list[dict] = []
    for path in files:
        for where, span in _spans(path):
            spans.append(_span(span, path, where))
    calls = _calls(spans)
    options = {
        "sessions": "gen_ai.conversation.id (session.id, langfuse.session.id), else trace id"
    }
    return assemble(calls, "otel", options, files[0] if len(files) == 1 else source)


def _listed(source) -> list:
    return [source] if isinstance(source, (str, Path)) else list(source)


def _spans(path: Path):
    """``(where, span object)`` for every span of the file, in file order."""
    raw = read_bytes(path)
    try:
        docs = [(None, parse_json(path, raw))]
    except InputError as whole:
        lines = [ln for ln in raw.split(b"\n") if ln.strip()][:2]
        if len(lines) > 1 and not any(_is_object(ln) for ln in lines):
            raise whole from None  # a pretty-printed document, not JSON Lines
        docs = [
            (f"line {n}", parse_json(path, line, f"line {n}"))
            for n, line in enumerate(raw.split(b"\n"), 1)
            if line.strip()
        ]
    for where, doc in docs:
        if not isinstance(doc, dict):
            raise InputError(path, f"expected a JSON object, got {doc!r:.40}", where=where)
        if "resourceSpans" not in doc:
            yield where or "span 0", doc
            continue
        for i, rs in enumerate(_list(doc, "resourceSpans", path, where)):
            for j, ss in enumerate(_list(rs, "scopeSpans", path, where)):
                for k, span in enumerate(_list(ss, "spans", path, where)):
                    at = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                    yield f"{where}: {at}" if where else at, span


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _list(obj: object, key: str, path: Path, where: str | None) -> list:
    got = obj.get(key, []) if isinstance(obj, dict) else obj
    if not isinstance(got, list):
        raise InputError(path, f"expected a list, got {got!r:.40}", where=where, field=key)
    return got


def _span(span: object, path: Path, where: str) -> dict:
    """The few fields a call needs, checked; attribute values unwrapped."""
    if not isinstance(span, dict):
        raise InputError(path, f"expected a span object, got {span!r:.40}", where=where)
    attrs = _attributes(span.get("attributes"), path, where)
    out = {"path": path, "where": where, "attrs": attrs}
    for key in ("traceId", "spanId"):
        v = span.get(key)
        if not isinstance(v, str) or not v:
            raise InputError(path, f"expected a hex id, got {v!r:.40}", where=where, field=key)
        out[key] = v
    parent = span.get("parentSpanId")
    out["parentSpanId"] = parent if isinstance(parent, str) and parent else None
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        out[key] = _nanos(span.get(key), path, where, key)
    return out


def _attributes(a: object, path: Path, where: str) -> dict:
    if a is None:
        return {}
    if isinstance(a, dict):
        return a
    if not isinstance(a, list):
        raise InputError(
            path, f"expected a list of key-values, got {a!r:.40}", where=where, field="attributes"
        )
    out = {}
    for kv in a:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise InputError(
                path,
                f"expected {{'key', 'value'}}, got {kv!r:.40}",
                where=where,
                field="attributes",
            )
        v = kv.get("value")
        if isinstance(v, dict) and len(v) == 1:
            ((kind, val),) = v.items()
            if kind == "intValue" and isinstance(val, str) and val.isdigit():
                val = int(val)  # OTLP JSON writes 64-bit integers as strings
            v = val
        out[kv["key"]] = v
    return out


def _nanos(v: object, path: Path, where: str, field: str) -> float:
    if isinstance(v, str) and v.isdigit():
        v = int(v)
    if type(v) is int and 0 <= v < 1 << 63:
        return v / 1e9
    raise InputError(path, f"expected Unix nanoseconds, got {v!r:.40}", where=where, field=field)


def _calls(spans: list[dict]) -> Calls:
    by_id = {(s["traceId"], s["spanId"]): s for s in spans}
    calls = Calls()
    main_agent: dict[str, str | None] = {}
    for s in sorted(spans, key=lambda s: s["startTimeUnixNano"]):
        a, path, where = s["attrs"], s["path"], s["where"]
        op = a.get("gen_ai.operation.name")
        in_key = IN if IN in a or IN_OLD not in a else IN_OLD
        if op not in CALL_OPERATIONS and (op is not None or in_key not in a):
            continue
        n_in = count(a.get(in_key), path, where, in_key)
        read = next((a[k] for k in CACHE_READ if k in a), 0)
        read = count(read, path, where, CACHE_READ[0])
        if read > n_in:
            raise InputError(
                path,
                f"expected at most {IN} = {n_in} cached tokens, got {read}",
                where=where,
                field=CACHE_READ[0],
            )
        session = next((a[k] for k in SESSION if isinstance(a.get(k), str) and a[k]), s["traceId"])
        agent = _agent(s, by_id)
        first = main_agent.setdefault(session, agent)
        model = a.get("gen_ai.request.model") or a.get("gen_ai.response.model")
        calls.add(
            session_id=session,
            agent_id=None if agent == first else agent,
            t_begin=s["startTimeUnixNano"],
            t_end=max(s["endTimeUnixNano"], s["startTimeUnixNano"]),
            input_tokens=n_in,
            reused_prefix_tokens=read,
            output_tokens=_output(a, path, where),
            trigger="unknown",
            model=model if isinstance(model, str) else None,
            marked_compaction=False,
        )
    return calls


def _output(a: dict, path: Path, where: str) -> int:
    key = OUT if OUT in a or OUT_OLD not in a else OUT_OLD
    return count(a.get(key, 0), path, where, key)


def _agent(span: dict, by_id: dict) -> str | None:
    """Agent id of the span or its nearest ancestor that names one."""
    seen = 0
    while span is not None and seen < 1000:
        for key in AGENT:
            v = span["attrs"].get(key)
            if isinstance(v, str) and v:
                return v
        parent = span["parentSpanId"]
        span = by_id.get((span["traceId"], parent)) if parent else None
        seen += 1
    return None
