"""OpenAI Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

Each line is ``{"timestamp", "type", "payload"}`` (``RolloutLine`` in openai/codex
``codex-rs/protocol/src/protocol.rs``); ``type`` is ``session_meta`` (``payload.id`` is the
session id), ``turn_context`` (``payload.model``), ``response_item`` (messages, tool calls and
their outputs), ``event_msg`` or ``compacted``. One model call is one
``event_msg`` with ``payload.type == "token_count"`` whose ``payload.info.last_token_usage``
holds that call's ``input_tokens`` (cached and uncached: Codex's ``non_cached_input()`` is
``input_tokens − cached_input_tokens``), ``cached_input_tokens`` and ``output_tokens``
(reasoning tokens included). Codex repeats a ``token_count`` without a new call (the same
``total_token_usage``); those repeats are skipped, as ccusage's Codex reader does. A
``compacted`` line marks a compaction before the next call.

The send time of a call is the last input item before it (a user message or a tool output);
its end is the ``token_count`` time. Only counts, ids, times and model names are kept.
"""

from __future__ import annotations

from pathlib import Path

from agentx.errors import InputError
from agentx.traces.importers._agentlog import Calls, assemble, iso_seconds, json_lines, source_files
from agentx.traces.importers._common import count
from agentx.traces.io import Trace

_TOOL_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def load_codex(source) -> Trace:
    """Read Codex rollout files (a file or a folder such as ~/.codex/sessions)."""
    files = source_files(source, ".jsonl", "Codex rollout files")
    calls = Calls()
    for path in files:
        _read_file(path, calls)
    options = {"sessions": "one per rollout file", "calls": "token_count events"}
    return assemble(calls, "codex", options, files[0] if len(files) == 1 else source)


def _read_file(path: Path, calls: Calls) -> None:
    session = path.stem
    model: str | None = None
    sent: tuple[float, str] | None = None
    last_end: float | None = None
    last_total: object = None
    marked = False
    for line_no, e in json_lines(path):
        where = f"line {line_no}"
        kind, p = e.get("type"), e.get("payload")
        if kind not in ("session_meta", "turn_context", "response_item", "event_msg", "compacted"):
            continue
        t = iso_seconds(e.get("timestamp"), path, where, "timestamp")
        if not isinstance(p, dict):
            raise InputError(
                path, f"expected an object, got {p!r:.40}", where=where, field="payload"
            )
        if kind == "session_meta":
            sid = p.get("id")
            if isinstance(sid, str) and sid:
                session = sid
        elif kind == "turn_context":
            m = p.get("model")
            model = m if isinstance(m, str) else model
        elif kind == "compacted":
            marked = True
        elif kind == "response_item":
            item = p.get("type")
            if item == "message" and p.get("role") == "user":
                sent = (t, "user")
            elif item in _TOOL_OUTPUTS:
                sent = (t, "tool_result")
        elif p.get("type") == "token_count":
            info = p.get("info")
            if info is None:  # emitted before the first response (rate limits only)
                continue
            if not isinstance(info, dict):
                raise InputError(
                    path, f"expected an object, got {info!r:.40}", where=where, field="payload.info"
                )
            total = info.get("total_token_usage")
            if total is not None and total == last_total:
                continue  # a repeat: no new model call
            last_total = total
            n_in, n_cached, n_out = _usage(info.get("last_token_usage"), path, where)
            t_sent, trig = (
                sent if sent is not None else (last_end if last_end is not None else t, "unknown")
            )
            calls.add(
                session_id=session,
                agent_id=None,
                t_begin=min(t_sent, t),
                t_end=t,
                input_tokens=n_in,
                reused_prefix_tokens=n_cached,
                output_tokens=n_out,
                trigger=trig,
                model=model,
                marked_compaction=marked,
            )
            sent, last_end, marked = None, t, False


def _usage(u: object, path: Path, where: str) -> tuple[int, int, int]:
    field = "payload.info.last_token_usage"
    if not isinstance(u, dict):
        raise InputError(path, f"expected an object, got {u!r:.40}", where=where, field=field)
    n_in = count(u.get("input_tokens"), path, where, f"{field}.input_tokens")
    cached = u.get("cached_input_tokens")
    cached = 0 if cached is None else count(cached, path, where, f"{field}.cached_input_tokens")
    if cached > n_in:
        raise InputError(
            path,
            f"expected cached_input_tokens ≤ input_tokens ({n_in}), got {cached}",
            where=where,
            field=f"{field}.cached_input_tokens",
        )
    return n_in, cached, count(u.get("output_tokens"), path, where, f"{field}.output_tokens")
