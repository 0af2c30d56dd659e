"""Start-up: ``agentx --help`` lists every command without importing polars, pyarrow or numba,
with the same one-line help the imported command gives (timings live in benchmarks/)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from agentx.cli import COMMANDS, _short_help


@pytest.mark.parametrize(("name", "module"), COMMANDS)
def test_short_help_read_from_source_equals_the_command(name, module):
    want = importlib.import_module(module).command.get_short_help_str(60)
    assert _short_help(module, 60) == want


def test_top_level_help_imports_no_heavy_library():
    code = (
        "import sys\n"
        "from agentx.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('polars', 'pyarrow', 'numba', 'duckdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert re.search(r"^  replay +Price every call of TRACE", out.stdout, re.M)
