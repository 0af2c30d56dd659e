"""Shared fixtures. Real traces are read from ../shared/traces (skipped, with the reason, if absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Timing is the benchmarks' job: a slow shared CI core or a first numba compile must not turn
# a property test into a DeadlineExceeded failure. print_blob lets a failure be replayed.
# The gate (.ci/run) is derandomized so that one commit gets one verdict; hunting for new
# counterexamples is a deliberate run: pytest --hypothesis-profile explore (random seeds).
settings.register_profile("agentx", deadline=None, print_blob=True, derandomize=True)
settings.register_profile("explore", deadline=None, print_blob=True, max_examples=300)
settings.load_profile("agentx")

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = Path(os.environ.get("AGENTX_SHARED_TRACES", REPO.parent / "shared" / "traces"))
SAMPLE_TRACE = REPO / "traces" / "sample" / "weka-sample.parquet"


def shared_path(*parts: str) -> Path:
    """Path under ../shared/traces, or skip the test saying what is missing."""
    p = SHARED_TRACES.joinpath(*parts)
    if not p.exists():
        pytest.skip(
            f"real trace {p} is absent (set AGENTX_SHARED_TRACES or place ../shared/traces)"
        )
    return p


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    return shared_path()


@pytest.fixture(scope="session")
def weka_dir() -> Path:
    return shared_path("weka-claude-code")


@pytest.fixture(scope="session")
def weka_parquet(tmp_path_factory, weka_dir) -> Path:
    """The whole shared Weka set imported once per test session (seeded, deterministic)."""
    from agentx.traces.importers import import_trace

    out = tmp_path_factory.mktemp("weka") / "weka.parquet"
    import_trace("weka", weka_dir, out)
    return out


@pytest.fixture(scope="session")
def sample_trace() -> Path:
    if not SAMPLE_TRACE.exists():
        pytest.skip(f"bundled sample {SAMPLE_TRACE} not built yet")
    return SAMPLE_TRACE


@pytest.fixture(scope="session")
def agentic_runs(tmp_path_factory, sample_trace) -> dict[str, Path]:
    """``agentx simulate --users 1,2`` on the sample trace with --offload none and dram, made
    once per test session (the report and browser tests share them)."""
    from _runs_fixture import make_agentic_runs

    return make_agentic_runs(tmp_path_factory.mktemp("agentic"), sample_trace)
