"""The code base stays ruff-clean (lint and format), as the style guide asks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PY_DIRS = ["agentx", "tests", "benchmarks", "traces", "replay", "analysis"]


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    return [found]


def test_ruff_check_is_clean():
    res = subprocess.run([*_ruff(), "check", *PY_DIRS], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format_is_clean():
    res = subprocess.run(
        [*_ruff(), "format", "--check", *PY_DIRS], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
