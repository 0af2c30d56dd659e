"""The CLI asks polars' allocator to give freed pages back within 100 ms (agentx/cli/__init__.py):
its setting must come after polars' own default (later entries win), even when a parent
process that imported polars passed that default down, and a user's own setting must win."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

OURS = "dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:true"
POLARS = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def _conf(inherited: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if inherited is not None:
        env["_RJEM_MALLOC_CONF"] = inherited
    code = "import os, agentx.cli, polars; print(os.environ['_RJEM_MALLOC_CONF'])"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.parametrize(
    ("inherited", "want"),
    [
        (None, f"{POLARS},{OURS}"),
        (POLARS, f"{POLARS},{OURS}"),  # from a parent that imported polars: not a choice
        ("dirty_decay_ms:42", f"{POLARS},{OURS},dirty_decay_ms:42"),  # the user's, last
        (f"{POLARS},thp:always", f"{POLARS},{OURS},thp:always"),
    ],
)
def test_the_cli_frees_polars_pages_soon_unless_told_otherwise(inherited, want):
    assert _conf(inherited) == want
