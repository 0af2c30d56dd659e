"""The Python API: docs/api.md runs as a doctest, and ``import agentx`` stays light."""

from __future__ import annotations

import doctest
import subprocess
import sys
import warnings

import pytest
from conftest import REPO


def test_api_doc_examples_run(sample_trace, monkeypatch):
    monkeypatch.chdir(REPO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the examples handle over-context calls explicitly
        res = doctest.testfile(
            str(REPO / "docs" / "api.md"),
            module_relative=False,
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
            verbose=False,
        )
    assert res.attempted >= 15
    assert res.failed == 0


def test_import_agentx_loads_no_heavy_library():
    code = "import sys, agentx; print(sorted(m for m in ('polars', 'numba', 'altair', 'duckdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_replay_is_the_api_even_after_the_package_loads(sample_trace):
    import agentx
    import agentx.replay.config  # noqa: F401  (binds agentx.replay to the package)

    with pytest.warns(UserWarning, match=r"59 calls need more than the model's 131,072-token"):
        run = agentx.replay(sample_trace, hw="b300", kv_tiers=False)
    assert run.kind == "replay" and run.summary["calls"] == 445
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        agentx.nope  # noqa: B018


def test_run_write_is_readable_by_the_report(sample_trace, tmp_path):
    import agentx
    from agentx.analysis.report import build_report

    run = agentx.replay(sample_trace, hw="b300", kv_tiers=False, over_context="drop")
    run.write(tmp_path / "b300")
    page, _ = build_report([tmp_path])
    assert "J per output token" in page
    with pytest.raises(Exception, match="did you mean 'stages'"):
        run.chart("stage")
