"""Claude Code session logs: ``~/.claude/projects/<project>/<session>.jsonl``, one session a file.

Format (JSON Lines, one entry a line; see traces/README.md for the sources): ``type`` is
``user``, ``assistant``, ``system``, ``summary`` or bookkeeping (``progress``,
``file-history-snapshot``, ``queue-operation``); entries carry ``uuid``, ``parentUuid``,
``sessionId``, ``timestamp`` (ISO-8601), ``isSidechain`` and, in sub-agent files, ``agentId``.
An assistant entry's ``message`` holds ``id``, ``model`` and ``usage`` (``input_tokens``,
``cache_creation_input_tokens``, ``cache_read_input_tokens``, ``output_tokens``). A streamed
response is written as one entry per content block, all with the same ``message.id`` and
usage, so calls are keyed by ``message.id`` (ccusage de-duplicates the same way); a resumed
session's file repeats earlier entries, which are counted once (in the first file read).
Compaction: a ``system`` entry with ``subtype: "compact_boundary"`` (``compactMetadata``), and
the user entry with ``isCompactSummary: true`` that follows it.

Sub-agents: their entries are ``isSidechain: true``, either inline (older versions) or in
``<session>/subagents/agent-<agentId>.jsonl`` (newer ones); both join the parent's session
with agent id ``agentId`` (or, inline without one, the uuid of the sidechain's first entry).

Privacy: only counts, ids, times, the model name and the *types* of content blocks are
looked at; no text of prompts, responses or tool results is copied anywhere.
"""

from __future__ import annotations

from pathlib import Path

from agentx.errors import InputError
from agentx.limits import check
from agentx.traces.importers._agentlog import Calls, assemble, iso_seconds, json_lines, source_files
from agentx.traces.importers._common import count, located
from agentx.traces.io import Trace

USAGE = "message.usage"


def load_claude_code(source) -> Trace:
    """Read Claude Code session files (a file, a project folder or the projects folder)."""
    files = source_files(source, ".jsonl", "Claude Code session files")
    calls = Calls()
    seen: set[str] = set()  # message ids already taken, in any file
    for path in files:
        _read_file(path, calls, seen)
    options = {"sessions": "one per main file; sub-agent files join their parent session"}
    return assemble(calls, "claude-code", options, files[0] if len(files) == 1 else source)


def _session_of(path: Path) -> tuple[str, str | None]:
    """(session id, sub-agent id) a file's location implies."""
    if path.parent.name == "subagents":
        return path.parent.parent.name, path.stem.removeprefix("agent-")
    return path.stem, None


def _read_file(path: Path, calls: Calls, seen: set[str]) -> None:
    session, file_agent = _session_of(path)
    by_id: dict[str, int] = {}  # message id -> row in calls (for the later blocks of a stream)
    pending: dict[str | None, tuple[float | None, str, bool]] = {}
    side_root: dict[str, str] = {}  # sidechain uuid -> uuid of its first entry
    renamed = False
    for line_no, e in json_lines(path):
        kind = e.get("type")
        if kind not in ("user", "assistant", "system"):
            continue
        where = f"line {line_no}"
        if not renamed and path.stem.startswith("agent-") and file_agent is None:
            # older layout: agent-<id>.jsonl beside the sessions, naming its parent in sessionId
            sid = e.get("sessionId")
            if isinstance(sid, str) and sid:
                session, file_agent = sid, e.get("agentId") or path.stem.removeprefix("agent-")
            renamed = True
        agent = _agent(e, file_agent, side_root, path, where)
        t = iso_seconds(e.get("timestamp"), path, where, "timestamp")
        if kind == "system":
            if e.get("subtype") == "compact_boundary":
                pending[agent] = (t, "compaction", True)
            continue
        msg = e.get("message")
        if not isinstance(msg, dict):
            raise InputError(
                path, f"expected an object, got {msg!r:.40}", where=where, field="message"
            )
        if kind == "user":
            if e.get("isMeta"):
                continue
            _, _, marked = pending.get(agent, (None, "", False))
            trig = "tool_result" if _has_tool_result(msg.get("content")) else "user"
            pending[agent] = (t, trig, marked or e.get("isCompactSummary") is True)
            continue
        if msg.get("model") == "<synthetic>":  # a client-made message, no model call behind it
            continue
        mid = msg.get("id")
        key = mid if isinstance(mid, str) and mid else f"uuid:{e.get('uuid')}:{line_no}"
        row = by_id.get(key)
        if row is not None:  # a later content block of the same streamed response
            c = calls.cols
            c["t_end"][row] = max(c["t_end"][row], t)
            out = _usage(msg, path, where)[2]
            c["output_tokens"][row] = max(c["output_tokens"][row], out)
            continue
        if key in seen:  # a resumed session's file repeats earlier entries: count them once
            continue
        seen.add(key)
        n_new, n_read, n_out = _usage(msg, path, where)
        t_sent, trig, marked = pending.pop(agent, (None, "unknown", False))
        model = msg.get("model")
        by_id[key] = len(calls)
        calls.add(
            session_id=session,
            agent_id=agent,
            t_begin=t if t_sent is None or t_sent > t else t_sent,
            t_end=t,
            input_tokens=n_new + n_read,
            reused_prefix_tokens=n_read,
            output_tokens=n_out,
            trigger=trig,
            model=model if isinstance(model, str) else None,
            marked_compaction=marked,
        )


def _agent(
    e: dict, file_agent: str | None, side_root: dict[str, str], path: Path, where: str
) -> str | None:
    side = e.get("isSidechain", False)
    if side is not True and side is not False:
        raise InputError(
            path, f"expected true or false, got {side!r:.40}", where=where, field="isSidechain"
        )
    if file_agent is not None:
        return file_agent
    if not side:
        return None
    agent = e.get("agentId")
    if isinstance(agent, str) and agent:
        return agent
    uuid, parent = e.get("uuid"), e.get("parentUuid")
    root = side_root.get(parent) if isinstance(parent, str) else None
    root = root or (uuid if isinstance(uuid, str) else f"line-{where}")
    if isinstance(uuid, str):
        side_root[uuid] = root
    return f"sidechain-{root[:8]}"


def _has_tool_result(content: object) -> bool:
    if not isinstance(content, list):
        return False
    return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _usage(msg: dict, path: Path, where: str) -> tuple[int, int, int]:
    """(new tokens = input + cache creation, reused = cache read, output)."""
    u = msg.get("usage")
    if not isinstance(u, dict):
        raise InputError(path, f"expected an object, got {u!r:.40}", where=where, field=USAGE)
    fresh = count(u.get("input_tokens"), path, where, f"{USAGE}.input_tokens")
    made = u.get("cache_creation_input_tokens")
    made = 0 if made is None else count(made, path, where, f"{USAGE}.cache_creation_input_tokens")
    read = u.get("cache_read_input_tokens")
    read = 0 if read is None else count(read, path, where, f"{USAGE}.cache_read_input_tokens")
    out = count(u.get("output_tokens"), path, where, f"{USAGE}.output_tokens")
    if fresh + made + read >= 1 << 63:
        raise InputError(
            path,
            f"expected a prompt below 2^63 tokens, got {fresh + made + read} (input + cache creation + cache read)",
            where=where,
            field=USAGE,
        )
    check("call_tokens", fresh + made + read, located(path, where, USAGE))  # the call's prompt
    return fresh + made, read, out
