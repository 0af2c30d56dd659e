"""A hostile user's corpus and the contract every command keeps on bad input (issue #15).

``assert_refused`` runs one command in-process (click's CliRunner) and checks what a user must
always get: exit 1 or 2, exactly one ``Error: …`` line on stderr, never a traceback or a Rust
panic, nothing at the output path (not even a temporary sibling), and every input's bytes
unchanged. ``corpus`` builds small real inputs of every format in a folder.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from click.testing import CliRunner

from agentx.cli import cli

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "traces" / "sample"
TMP_MARKS = (".agentx-tmp-", ".agentx-old-")


def digest(paths) -> dict[str, str]:
    """SHA-256 of every file at or below ``paths`` (folders walked, symlinks not followed)."""
    out = {}
    for p in map(Path, paths):
        if p.is_symlink() or not p.exists():
            continue
        files = [p] if p.is_file() else [f for f in sorted(p.rglob("*")) if f.is_file()]
        for f in files:
            if f.is_symlink() or not f.is_file():
                continue
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def invoke(args, env=None):
    return CliRunner().invoke(
        cli, [os.fspath(a) if isinstance(a, Path) else a for a in args], env=env
    )


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if any(m in p.name for m in TMP_MARKS))


def assert_refused(args, *, inputs=(), output=None, codes=(1, 2), contains=None):
    """Run ``args``; the command must refuse with the one-line contract (see module doc)."""
    before = digest(inputs)
    existed = output is not None and os.path.lexists(output)
    r = invoke(args)
    err = r.stderr
    lines = err.splitlines()
    shown = f"{args!r}: exit {r.exit_code}, stderr {err!r}"
    assert r.exit_code in codes, shown
    assert len(lines) == 1 and lines[0].startswith("Error: "), shown
    assert "Traceback" not in r.output and "panicked" not in r.output, shown
    assert "internal error" not in err, shown
    if contains is not None:
        assert contains in err, shown
    if output is not None:
        out = Path(output)
        if not existed:
            assert not os.path.lexists(out), f"{shown}: left {out}"
        if out.parent.is_dir():
            assert leftovers(out.parent) == [], shown
    assert digest(inputs) == before, f"{shown}: an input changed"
    return err


def assert_ok_or_refused(args, *, inputs=(), output=None):
    """Either success (strict JSON when --json) or the one-line refusal; never a crash."""
    before = digest(inputs)
    r = invoke(args)
    shown = f"{args!r}: exit {r.exit_code}, stderr {r.stderr!r}"
    if r.exit_code == 0:
        if "--json" in args:
            json.loads(r.stdout, parse_constant=_no_constant)
    else:
        assert_one_line(r, shown)
        if output is not None:
            assert not os.path.lexists(output), shown
    assert digest(inputs) == before, f"{shown}: an input changed"
    if output is not None and Path(output).parent.is_dir():
        assert leftovers(Path(output).parent) == [], shown
    return r


def assert_one_line(r, shown):
    lines = r.stderr.splitlines()
    assert r.exit_code in (1, 2), shown
    assert len(lines) == 1 and lines[0].startswith("Error: "), shown
    assert "Traceback" not in r.output and "panicked" not in r.output, shown


def _no_constant(name: str):
    raise AssertionError(f"{name} in --json output is not JSON")


def weka_session() -> dict:
    """The smallest real Weka session of the bundled sample (trace_0026, 3 requests)."""
    return json.loads(gzip.decompress((SAMPLE_DIR / "trace_0026.json.gz").read_bytes()))


MOONCAKE = (
    "\n".join(
        json.dumps({"timestamp": t, "input_length": n, "output_length": 50, "hash_ids": ids})
        for t, n, ids in ((0, 1100, [0, 1, 2]), (5, 1600, [0, 1, 3, 4]), (9, 600, [5, 6]))
    )
    + "\n"
)

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
)


def tracelab_round(session: str, i: int, total: int, prefix: int, ts: str) -> dict:
    return {
        "session_id": session,
        "round_index": i,
        "model": "claude",
        "input_tokens_total": total,
        "prefix_tokens": prefix,
        "newly_append_tokens": total - prefix,
        "output_tokens": 100,
        "first_input_event_type": "user_message",
        "timing_events": [{"event_type": "user_message", "timestamp": ts}],
    }


TRACELAB = (
    "\n".join(
        json.dumps(r)
        for r in (
            tracelab_round("a", 0, 3000, 0, "2026-06-01T05:40:20"),
            tracelab_round("a", 1, 5000, 3000, "2026-06-01T05:41:20"),
            tracelab_round("b", 0, 2000, 0, "2026-06-01T05:42:00.5"),
        )
    )
    + "\n"
)


def corpus(root: Path) -> dict[str, Path]:
    """Raw inputs of every importer, in ``root``: name → path."""
    root.mkdir(parents=True, exist_ok=True)
    weka = root / "weka"
    weka.mkdir(exist_ok=True)
    (weka / "trace_0026.json").write_text(json.dumps(weka_session()))
    paths = {"weka": weka}
    for fmt, name, text in (
        ("mooncake", "m.jsonl", MOONCAKE),
        ("azure", "a.csv", AZURE),
        ("tracelab", "t.jsonl", TRACELAB),
    ):
        (root / name).write_text(text)
        paths[fmt] = root / name
    return paths
