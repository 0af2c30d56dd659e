"""The CLI asks polars' allocator to give freed pages back within 100 ms (agentx/cli/__init__.py):
its setting must come after polars' own default (later entries win), even when a parent
process that imported polars passed that default down, and a user's own setting must win.
The same holds for OpenMP's idle threads and numpy's huge pages."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

OURS = "dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:true"
POLARS = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def _after(var: str, inherited: str | None, imports: str = "agentx.cli, polars") -> str:
    """``var`` as a fresh process sees it after importing ``imports``, given ``inherited``."""
    env = {k: v for k, v in os.environ.items() if k != var}
    if inherited is not None:
        env[var] = inherited
    code = f"import os, {imports}; print(os.environ[{var!r}])"
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
    assert _after("_RJEM_MALLOC_CONF", inherited) == want


@pytest.mark.parametrize(("inherited", "want"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_importing_agentx_lets_idle_openmp_threads_sleep_unless_told_otherwise(inherited, want):
    # agentx/__init__.py: numba's OpenMP workers spinning between parallel regions took the
    # core the writer and polars' reader need (a 10 M-call replay, ~0.7 CPU s)
    assert _after("OMP_WAIT_POLICY", inherited, "agentx") == want


@pytest.mark.parametrize(("inherited", "want"), [(None, "False"), ("1", "True")])
def test_the_cli_keeps_numpy_off_huge_pages_unless_told_otherwise(inherited, want):
    # agentx/cli/__init__.py: first touches of huge pages cost 5x those of 4 KB pages on the
    # VMs the replay is measured on; numpy reads the variable once, when first imported
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if inherited is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = inherited
    code = (
        "import agentx.cli, numpy\n"
        "from numpy._core.multiarray import _get_madvise_hugepage\n"
        "print(_get_madvise_hugepage())"
    )
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == want


def test_out_of_core_replay_turns_numpy_huge_pages_back_on(tmp_path, sample_trace, monkeypatch):
    # agentx.cli.recycled_pages: the out-of-core replay takes the same partitions' memory again
    # and again, where huge pages mean fewer faults; the in-memory replay keeps them off, and a
    # user's own NUMPY_MADVISE_HUGEPAGE stands either way
    from click.testing import CliRunner
    from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage

    import agentx.cli as cli_module
    import agentx.traces.partitions as partitions

    def replay(out, rows):
        monkeypatch.setattr(partitions, "OUT_OF_CORE_ROWS", rows)
        args = ["replay", str(sample_trace), "--hw", "gb200", "--no-kv-tiers", "-q", "-o", str(out)]
        res = CliRunner().invoke(cli_module.cli, args)
        assert res.exit_code == 0, res.output
        return _get_madvise_hugepage()

    was = _get_madvise_hugepage()
    try:
        monkeypatch.setattr(cli_module, "_USER_HUGEPAGE", False)
        _set_madvise_hugepage(False)
        assert replay(tmp_path / "in-memory", 10**9) is False
        assert replay(tmp_path / "out-of-core", 10) is True
        monkeypatch.setattr(cli_module, "_USER_HUGEPAGE", True)
        _set_madvise_hugepage(False)
        assert replay(tmp_path / "user", 10) is False
    finally:
        _set_madvise_hugepage(was)
