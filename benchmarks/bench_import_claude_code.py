"""Speed of ``agentx import claude-code`` on a folder of generated session files.

Generates N Claude Code session files (default 1,000) shaped like real ones: per turn a user
prompt, a streamed assistant response written as 2-3 entries with one ``message.id``, hook
``progress`` entries and tool results of a few KB; some sessions with a sub-agent file and a
compaction boundary. Times the end-to-end CLI import (read, validate, write Parquet) and
reports messages (JSONL entries) per second and model calls per second.

Run: .venv/bin/python benchmarks/bench_import_claude_code.py [--sessions 1000] [--repeat 3]
Prints figures only; nothing here is asserted (timings never go in tests).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentx.traces.importers import import_trace

TOOL_TEXT = "x" * 1800  # a tool result of about 2 KB


def _entry(kind: str, uuid: int, parent: int | None, t: datetime, sid: str, **kw) -> dict:
    return {
        "parentUuid": None if parent is None else f"u{parent}",
        "isSidechain": kw.pop("side", False),
        "userType": "external",
        "cwd": "/home/dev/project",
        "sessionId": sid,
        "version": "2.1.39",
        "gitBranch": "main",
        "type": kind,
        "uuid": f"u{uuid}",
        "timestamp": t.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        **kw,
    }


def session_lines(rng: random.Random, sid: str, turns: int, side: bool = False, agent=None):
    t = datetime(2026, 1, 5, tzinfo=UTC) + timedelta(seconds=rng.uniform(0, 86400))
    ctx, out, u = 15000, [], 0
    extra = {"side": side, **({"agentId": agent} if agent else {})}
    for k in range(turns):
        u += 1
        content = (
            "please look at the failing test and fix it"
            if k % 8 == 0
            else [{"type": "tool_result", "tool_use_id": f"t{k}", "content": TOOL_TEXT}]
        )
        out.append(
            _entry(
                "user",
                u,
                u - 1 if u > 1 else None,
                t,
                sid,
                message={"role": "user", "content": content},
                **extra,
            )
        )
        t += timedelta(seconds=rng.uniform(2, 8))
        new = rng.randint(200, 3000)
        usage = {
            "input_tokens": rng.randint(1, 10),
            "cache_creation_input_tokens": new,
            "cache_read_input_tokens": ctx,
            "output_tokens": rng.randint(20, 900),
            "service_tier": "standard",
        }
        ctx += new
        mid = f"msg_{sid[:8]}_{k}"
        for block in range(rng.randint(2, 3)):
            u += 1
            msg = {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": "working on it " * 20}],
                "stop_reason": "tool_use" if block else None,
                "usage": usage,
            }
            out.append(
                _entry("assistant", u, u - 1, t, sid, message=msg, requestId=f"req_{k}", **extra)
            )
            t += timedelta(seconds=0.5)
        out.append(
            {
                "type": "progress",
                "uuid": f"p{u}",
                "timestamp": out[-1]["timestamp"],
                "sessionId": sid,
                "data": {"hookEvent": "PreToolUse"},
            }
        )
        if not side and ctx > 160_000:  # auto-compaction
            u += 1
            out.append(
                _entry(
                    "system",
                    u,
                    None,
                    t,
                    sid,
                    subtype="compact_boundary",
                    content="Conversation compacted",
                    compactMetadata={"trigger": "auto", "preTokens": ctx},
                )
            )
            ctx = 15000
        t += timedelta(seconds=rng.uniform(1, 30))
    return out


def generate(folder: Path, n: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    project = folder / "-home-dev-project"
    project.mkdir(parents=True)
    lines = 0
    for i in range(n):
        sid = f"{i:08d}-0000-4000-8000-{rng.getrandbits(48):012x}"
        main = session_lines(rng, sid, rng.randint(15, 60))
        (project / f"{sid}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in main))
        lines += len(main)
        if i % 10 == 0:
            sub = session_lines(rng, sid, rng.randint(3, 10), side=True, agent=f"a{i:06x}")
            (project / sid / "subagents").mkdir(parents=True)
            (project / sid / "subagents" / f"agent-a{i:06x}.jsonl").write_text(
                "".join(json.dumps(e) + "\n" for e in sub)
            )
            lines += len(sub)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "projects"
        lines = generate(folder, args.sessions)
        size = sum(p.stat().st_size for p in folder.rglob("*.jsonl"))
        print(
            f"generated {args.sessions:,} sessions: {lines:,} JSONL messages, {size / 1e6:.1f} MB"
        )
        best, calls = float("inf"), 0
        for _ in range(args.repeat):
            t = time.perf_counter()
            trace = import_trace("claude-code", folder, Path(tmp) / "cc.parquet")
            best = min(best, time.perf_counter() - t)
            calls = trace.calls.height
        print(
            f"import claude-code (read + validate + write Parquet): best of {args.repeat} {best:.2f} s = "
            f"{lines / best:,.0f} messages/s, {calls / best:,.0f} model calls/s ({calls:,} calls), "
            f"{size / 1e6 / best:.0f} MB/s"
        )
        print(f"load average (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
