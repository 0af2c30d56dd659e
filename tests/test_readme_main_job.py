"""The README's first command (the main job on the bundled sample) works, and works again.

A user reruns it after changing nothing; the second run replaces the first run folder and report
instead of refusing (the report sits beside the run, not inside it, so the folder stays a run).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from agentx.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def _main_job_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"\*\*Run the main job.*?```sh\n(.*?)\n```", text, re.S).group(1)
    cmds = [shlex.split(part) for part in block.split("&&")]
    return [c[1:] for c in cmds if c and c[0].endswith("bin/agentx")]


def test_readme_main_job_runs_twice(tmp_path, monkeypatch):
    cmds = _main_job_commands()
    assert [c[0] for c in cmds] == ["replay", "report"]
    (tmp_path / "traces").symlink_to(ROOT / "traces")
    monkeypatch.chdir(tmp_path)
    for attempt in (1, 2):
        for args in cmds:
            r = CliRunner().invoke(cli, [*args, "-q"])
            assert r.exit_code == 0, (attempt, args, r.output)
    run = tmp_path / "runs" / "sample"
    assert (run / "run.json").is_file() and (run / "calls.parquet").is_file()
    assert (tmp_path / "runs" / "sample.html").stat().st_size > 100_000
    assert not [p for p in os.listdir(tmp_path / "runs") if "agentx-tmp" in p]
