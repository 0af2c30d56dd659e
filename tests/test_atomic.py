"""Whole outputs or nothing: the atomic writer, a kill -9 at many points, and determinism.

A run folder (or a trace file) appears at -o complete or not at all; an earlier one there is
replaced only by a complete new one; temporaries of a killed process are removed by the next
command writing the same path. Subprocesses are used only where a real process is the point
(kill -9, environment variables read at start-up).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from _hostile import SAMPLE_DIR, corpus, digest, leftovers
from _runs_fixture import write_trace_file

from agentx.errors import AgentxError
from agentx.io import OLD_TAG, TMP_TAG, atomic_dir, atomic_path, clean_stale
from agentx.runs import read_run, write_run

SAMPLE = SAMPLE_DIR / "weka-sample.parquet"


def tables(df_value: int) -> dict[str, pl.DataFrame]:
    return {"a": pl.DataFrame({"x": [df_value]}), "b": pl.DataFrame({"y": [df_value] * 3})}


def test_failed_run_leaves_the_old_one_whole(tmp_path):
    out = tmp_path / "run"
    write_run(out, "test", tables(1), summary={"v": 1})
    before = digest([out])
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        (tmp / "a.parquet").write_bytes(b"half")
        raise RuntimeError("killed halfway")
    assert digest([out]) == before and leftovers(tmp_path) == []
    write_run(out, "test", tables(2), summary={"v": 2})
    assert read_run(out).summary() == {"v": 2} and leftovers(tmp_path) == []
    assert read_run(out).table("b")["y"].to_list() == [2, 2, 2]


def test_failed_first_run_leaves_nothing(tmp_path):
    out = tmp_path / "new" / "run"
    with pytest.raises(ValueError), atomic_dir(out) as tmp:
        (tmp / "run.json").write_text("{}")
        raise ValueError
    assert not out.exists() and leftovers(out.parent) == []


def test_stale_temporaries_of_a_dead_process_are_removed(tmp_path):
    out = tmp_path / "run"
    dead = _dead_pid()
    stale = tmp_path / f".run{TMP_TAG}{dead}"
    stale.mkdir()
    (stale / "calls.parquet").write_bytes(b"partial")
    live = tmp_path / f".run{TMP_TAG}1"  # pid 1 is alive: another writer's, left alone
    live.mkdir()
    unrelated = tmp_path / f".other{TMP_TAG}{dead}"
    unrelated.mkdir()
    write_run(out, "test", tables(1))
    assert not stale.exists() and live.exists() and unrelated.exists()


def test_a_run_renamed_aside_is_restored_when_the_swap_was_killed(tmp_path):
    out = tmp_path / "run"
    write_run(out, "test", tables(1), summary={"v": 1})
    aside = tmp_path / f".run{OLD_TAG}{_dead_pid()}"
    out.rename(aside)  # the state after a kill between the two renames
    clean_stale(out)
    assert read_run(out).summary() == {"v": 1} and not aside.exists()


def test_atomic_file_refuses_a_folder_and_leaves_no_temporary(tmp_path):
    d = tmp_path / "x.parquet"
    d.mkdir()
    with pytest.raises(AgentxError, match="is a folder"), atomic_path(d):
        pass
    assert leftovers(tmp_path) == []


def test_atomic_file_leaves_the_name_free_for_the_writer(tmp_path):
    out = tmp_path / "x.parquet"
    with atomic_path(out) as tmp:
        # the writer creates it: a file opened with truncation is written out to disk when it
        # is closed (ext4 auto_da_alloc), which cost a 10 M-call replay 0.4 s
        assert tmp.parent == tmp_path and not os.path.lexists(tmp)
        tmp.write_bytes(b"rows")
    assert out.read_bytes() == b"rows"
    with atomic_path(out):  # a writer that writes nothing still replaces it, with nothing
        pass
    assert out.read_bytes() == b"" and leftovers(tmp_path) == []


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --- kill -9 --------------------------------------------------------------------------------

AGENTX = [sys.executable, "-m", "agentx"]


def _timed_run(args, cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run([*AGENTX, *args], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def _kill_after(args, cwd, delay_s: float) -> None:
    p = subprocess.Popen(
        [*AGENTX, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        p.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()


def _kill_when_writing(args, cwd: Path) -> bool:
    """SIGKILL the command the moment its temporary output appears (mid-write); True if it did."""
    p = subprocess.Popen(
        [*AGENTX, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while p.poll() is None:
            if any(e.name.endswith(f"{TMP_TAG}{p.pid}") for e in os.scandir(cwd)):
                p.send_signal(signal.SIGKILL)
                p.wait()
                return True
            time.sleep(0.0005)
        return False
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# Fractions of one full run's duration: most land in start-up and compute, the last ones in
# the write; the invariant must hold wherever the kill lands.
KILL_POINTS = (0.5, 0.8, 0.9, 0.95, 0.99)


def _tree(p: Path) -> dict[str, str]:
    return {k[len(str(p)) :]: v for k, v in digest([p]).items()}


def test_kill_9_during_replay_leaves_the_old_or_the_new_run(tmp_path):
    trace = write_trace_file(tmp_path / "t.parquet")

    def replay(gpus: int, out: str) -> list[str]:
        return ["replay", str(trace), "--hw", "gb200", "--gpus", str(gpus), "-o", out, "-q"]

    _timed_run(replay(8, "old"), tmp_path)
    full_s = _timed_run(replay(16, "new"), tmp_path)
    complete = {"old": _tree(tmp_path / "old"), "new": _tree(tmp_path / "new")}
    assert complete["old"] != complete["new"]
    d = tmp_path / "D"
    for frac in KILL_POINTS:
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(tmp_path / "old", d)
        _kill_after(replay(16, "D"), tmp_path, frac * full_s)
        state = _tree(d) if d.exists() else None
        assert state in (complete["old"], complete["new"]), f"kill at {frac:.2f}: a mixed run"
    _kill_when_writing(replay(16, "D"), tmp_path)  # mid-write, whatever the machine's speed
    assert _tree(d) in (complete["old"], complete["new"]), "kill while writing: a mixed run"
    # the next run finds and removes what every killed one left beside D
    _timed_run(replay(16, "D"), tmp_path)
    assert leftovers(tmp_path) == [] and _tree(d) == complete["new"]


def test_kill_9_during_import_leaves_the_old_or_the_new_trace(tmp_path):
    raw = corpus(tmp_path / "raw")
    out = tmp_path / "w.parquet"
    new = ["import", "weka", str(SAMPLE_DIR), "-o", "w.parquet", "-q", "--seed", "1"]
    _timed_run(["import", "mooncake", str(raw["mooncake"]), "-o", "w.parquet", "-q"], tmp_path)
    old_bytes = out.read_bytes()
    full_s = _timed_run(new, tmp_path)
    new_bytes = out.read_bytes()
    for frac in KILL_POINTS:
        out.write_bytes(old_bytes)
        _kill_after(new, tmp_path, frac * full_s)
        assert out.read_bytes() in (old_bytes, new_bytes), f"kill at {frac:.2f}: a partial trace"
    out.write_bytes(old_bytes)
    _kill_when_writing(new, tmp_path)
    assert out.read_bytes() in (old_bytes, new_bytes), "kill while writing: a partial trace"
    _timed_run(new, tmp_path)
    assert leftovers(tmp_path) == [] and out.read_bytes() == new_bytes


# --- determinism under TZ, PYTHONHASHSEED and thread counts -----------------------------------

ENVS = (
    {"TZ": "UTC", "PYTHONHASHSEED": "0", "POLARS_MAX_THREADS": "1", "NUMBA_NUM_THREADS": "1"},
    {"TZ": "Asia/Kolkata", "PYTHONHASHSEED": "123", "POLARS_MAX_THREADS": "2"},
    {"TZ": "America/St_Johns", "PYTHONHASHSEED": "random", "OMP_NUM_THREADS": "2"},
)


def test_outputs_do_not_depend_on_tz_hash_seed_or_threads(tmp_path):
    raw = corpus(tmp_path / "raw")
    trace = write_trace_file(tmp_path / "t.parquet")
    outs = []
    for i, extra in enumerate(ENVS):
        env = {**os.environ, **extra}
        d = tmp_path / f"e{i}"
        d.mkdir()
        for args in (
            ["import", "tracelab", str(raw["tracelab"]), "-o", "tl.parquet", "-q"],
            ["import", "azure", str(raw["azure"]), "-o", "az.parquet", "-q"],
            ["replay", str(trace), "--hw", "gb200", "-o", "run", "-q"],
        ):
            subprocess.run([*AGENTX, *args], cwd=d, env=env, check=True, capture_output=True)
        r = subprocess.run(
            [*AGENTX, "sql", "SELECT * FROM sessions ORDER BY ALL", "tl.parquet", "--format", "csv"],
            cwd=d, env=env, check=True, capture_output=True,
        )  # fmt: skip
        outs.append((_tree(d), r.stdout))
    assert outs[0] == outs[1] == outs[2]
