"""Progress output: drawn only on a terminal (or when forced), never in pipes or with --quiet."""

from __future__ import annotations

import io
import sys

from agentx.progress import Phases, progress


def test_progress_is_silent_when_disabled(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert list(progress(range(5), label="x", enabled=False)) == [0, 1, 2, 3, 4]
    p = Phases("replay", 2, enabled=False)
    p.step("a")
    p.step("b")
    p.done()
    assert err.getvalue() == ""


def test_progress_draws_counts_and_phases_when_enabled(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert list(progress(range(3), label="weka", enabled=True)) == [0, 1, 2]
    p = Phases("replay", 2, enabled=True)
    p.step("reading the trace")
    p.step("pricing the four stages")
    p.done()
    out = err.getvalue()
    assert "weka done (3)" in out
    assert "replay [1/2] reading the trace" in out and "replay [2/2] pricing the four stages" in out
    assert "replay done in" in out and out.endswith("\n")


def test_default_follows_the_terminal(monkeypatch):
    err = io.StringIO()  # not a tty
    monkeypatch.setattr(sys, "stderr", err)
    Phases("sweep", 1).step("points")
    list(progress(range(2), label="x"))
    assert err.getvalue() == ""
