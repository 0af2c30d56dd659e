"""The notebooks run top to bottom (nbclient) on a small real slice, and are committed without outputs.

The slice is the bundled Weka sample when it exists, else a few real Weka sessions imported
here from ../shared/traces; with neither, the run is skipped with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_TRACE, shared_path

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
SLICE_SESSIONS = 12


def test_there_are_three_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01-explore-weka.ipynb",
        "02-replay-systems.ipynb",
        "03-seed-study.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], (
                f"{path.name} cell {i} has outputs; strip them before committing"
            )
            assert cell.get("execution_count") is None, (
                f"{path.name} cell {i} has an execution count"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_uses_only_the_public_api(path):
    source = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    assert "from agentx" in source
    # private helpers (a leading underscore) are not part of the public API
    assert "import _" not in source and "._" not in source.replace("__", "")


@pytest.fixture(scope="module")
def slice_trace(tmp_path_factory) -> Path:
    if SAMPLE_TRACE.exists():
        return SAMPLE_TRACE
    weka = shared_path("weka-claude-code")
    from agentx.traces.importers import import_trace

    folder = tmp_path_factory.mktemp("weka-slice")
    for f in sorted(weka.glob("*.json*"))[:SLICE_SESSIONS]:
        (folder / f.name).symlink_to(f)
    out = folder / "slice.parquet"
    import_trace("weka", folder, out)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, slice_trace, tmp_path, monkeypatch):
    import nbclient
    import nbformat

    monkeypatch.setenv("AGENTX_NOTEBOOK_TRACE", str(slice_trace))
    monkeypatch.setenv("AGENTX_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()  # a failing cell raises CellExecutionError naming the cell
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert errors == []
    if path.stem == "02-replay-systems":
        assert (tmp_path / "runs" / "report.html").stat().st_size > 100_000  # the inlined bundle
    if path.stem == "03-seed-study":
        runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
        assert "replay-gb200-64" in runs and "replay-b300-16" in runs
