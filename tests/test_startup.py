"""Start-up: ``agentx --help`` lists every command without importing polars, pyarrow or numba,
with the same one-line help the imported command gives (timings live in benchmarks/)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest

from agentx.cli import COMMANDS, _short_help

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


# agentx/warm.py: a first run (empty numba cache) compiles these in a helper process
WARMED = ("agentx.replay.kernel._price", "agentx.replay.timeline._peak", "agentx.kv.tiers._place")


def test_a_first_replay_finds_the_helpers_kernels_in_the_cache(tmp_path):
    # the run's own process loads (cache hit) and never compiles (cache miss) what the helper
    # compiled: the helper's argument types are the run's (a drift would compile them twice)
    code = (
        "import sys, gc\n"
        "from numba.core.registry import CPUDispatcher\n"
        "from agentx.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "for d in gc.get_objects():\n"
        "    if isinstance(d, CPUDispatcher) and d.signatures:\n"
        "        f = d.py_func\n"
        "        print(f.__module__ + '.' + f.__name__,"
        " sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values()))\n"
    )
    sample = os.path.join(REPO, "traces", "sample", "weka-sample.parquet")
    # run from a folder whose numba.py would break an import: the helper must not see it
    work = tmp_path / "work"
    work.mkdir()
    (work / "numba.py").write_text("raise ImportError('a numba.py in the working folder')\n")
    cmd = [sys.executable, "-P", "-c", code, "replay", sample, "--hw", "gb200", "-q", "--json"]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, check=True)
    stats = {name: (int(hits), int(misses)) for name, hits, misses in
             (line.split() for line in out.stdout.splitlines() if line.startswith("agentx."))}  # fmt: skip
    assert {name: stats.get(name) for name in WARMED} == dict.fromkeys(WARMED, (1, 0))
    # ... while the kernels it does not warm were compiled in the run (the cache was empty)
    assert stats["agentx.kv.stack_passes._segment_pass"] == (0, 1)


def test_no_helper_starts_where_the_cache_holds_the_pricing_kernel():
    from agentx import warm
    from agentx.catalog import load_catalog
    from agentx.replay import make_config
    from agentx.replay.pricing import price_calls

    cfg = make_config(load_catalog(), "gb200", "kimi-k2")
    price_calls(
        cfg, {c: [1.0, 2.0] for c in ("new_tokens", "reused_prefix_tokens", "output_tokens")}
    )
    warm.start(cfg, 2)  # cached now: nothing to compile elsewhere
    assert warm._helper is None


def test_prepare_sets_up_numbas_target_on_a_thread_of_its_own():
    # in a fresh process: before it, numba's CPU target has no implementation installed
    code = (
        "import threading\n"
        "from numba.core.registry import cpu_target\n"
        "from agentx import warm\n"
        "ctx = cpu_target.target_context\n"
        "before = len(ctx._registries)\n"
        "warm.prepare()\n"
        "assert threading.main_thread() is not warm._preparing\n"
        "warm.ready()\n"
        "print(before, len(ctx._registries))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    assert before == 0 and after > 0


# Which thread imports numba: an import hook that records it (in a fresh process).
_WHO_IMPORTS_NUMBA = """
import sys, threading
from importlib.abc import MetaPathFinder
who = []
class Spy(MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "numba":
            who.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, Spy())
from agentx.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
print(who)
"""


@pytest.mark.parametrize("command", ["replay", "kv-curve"])
def test_numba_is_imported_beside_the_read_not_before_it(tmp_path, command):
    # a trace past the size a first run interprets (warm.INTERPRET_MAX_CALLS): the kernels
    # are imported on warm.prepare's thread while the main thread reads it
    from agentx import warm
    from agentx.traces.io import write_trace
    from agentx.traces.synth import synthesize

    trace = tmp_path / "t.parquet"
    write_trace(synthesize(n_calls=warm.INTERPRET_MAX_CALLS + 500, seed=3), trace)
    cmd = [sys.executable, "-c", _WHO_IMPORTS_NUMBA, command, str(trace), "--hw", "gb200", "-q"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip().splitlines()[-1] == "['agentx-prepare']"


def test_the_helpers_input_is_handed_over_without_waiting_for_it(tmp_path, monkeypatch):
    """The helper's input is more than a pipe holds, so a plain write would wait until the
    helper reads it, after its imports. Here the helper reads only once the test lets it:
    ``start`` must return before that (a blocking write never would), and the helper must
    then get every byte."""
    import pickle
    import threading

    from agentx import warm
    from agentx.catalog import load_catalog
    from agentx.replay import make_config
    from agentx.replay.kernel import params

    cfg = make_config(load_catalog(), "gb200", "kimi-k2")
    flag, got = tmp_path / "go", tmp_path / "payload"
    script = f"while [ ! -e {flag} ]; do sleep 0.01; done; cat > {got}"
    popen = subprocess.Popen
    monkeypatch.setattr(warm, "_helper", None)
    monkeypatch.setattr(warm, "_cached", lambda dispatcher: False)
    monkeypatch.setattr(warm.subprocess, "Popen", lambda cmd, **kw: popen(["sh", "-c", script], **kw))  # fmt: skip
    starting = threading.Thread(target=warm.start, args=(cfg, 2))
    starting.start()
    starting.join(60)
    returned = not starting.is_alive()
    flag.touch()  # (let a blocked start finish too, then judge)
    starting.join()
    helper = warm._helper
    assert helper is not None and helper.wait(60) == 0
    assert returned
    assert got.read_bytes() == pickle.dumps((*params(cfg), 2, True))
    assert len(got.read_bytes()) > 65536  # more than a pipe holds: the case that waited


# A run as the `agentx` command runs (agentx.cli.main with no argv: the process's own command),
# printing as it exits (an exit handler: a command that succeeded ends the process itself,
# agentx.cli._exit_now) whether its kernels were interpreted (plain functions) or compiled:
# the pricing kernel, the KV geometry's and the simulator's, those of them it ran.
OWN_RUN = (
    "import atexit, sys\n"
    "from agentx.cli import main\n"
    "sys.argv[0] = 'agentx'\n"
    "def report():\n"
    "    kinds = {type(getattr(sys.modules[m], f)).__name__ for m, f in"
    " (('agentx.replay.kernel', '_price_serial'), ('agentx.kv.geometry_ops', 'keys_kernel'),"
    " ('agentx.dynamics.kernel', 'simulate_kernel'))"
    " if m in sys.modules}\n"
    "    print('kernel', *sorted(kinds))\n"
    "atexit.register(report)\n"
    "main()\n"
)


@pytest.mark.parametrize(
    ("command", "files", "probe"),
    [
        (
            "replay",
            ("calls.parquet", "summary.json", "stages.parquet", "footprint.parquet"),
            "kernel._price-*.nbi",
        ),  # fmt: skip
        ("kv-curve", ("kv_curve.parquet", "summary.json"), "geometry_ops._assemble-*.nbi"),
    ],
)
def test_a_first_run_of_a_small_trace_is_interpreted_and_compiles_for_the_next(
    tmp_path, command, files, probe
):
    sample = os.path.join(REPO, "traces", "sample", "weka-sample.parquet")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def run(out):
        cmd = [sys.executable, "-P", "-c", OWN_RUN, command, sample, "--hw", "gb200", "-q", "-o", str(out)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)  # fmt: skip
        return done.stdout.splitlines()[-1]

    assert run(tmp_path / "first") == "kernel function"  # cold cache: interpreted
    from agentx import warm

    warm.wait_compiled(tmp_path / "numba", probe, timeout_s=240.0)
    assert run(tmp_path / "second") == "kernel CPUDispatcher"  # compiled for it, in the cache
    for name in files:
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()  # fmt: skip


@pytest.mark.parametrize(
    ("command", "files"),
    [
        ("compare", ("compare.parquet", "frontier.parquet", "summary.json")),
        ("simulate", ("sim_calls.parquet", "sim_timeseries.parquet", "summary.json")),
    ],
)
def test_a_first_run_is_interpreted_with_the_compiled_bytes(tmp_path, command, files):
    """compare and simulate interpret a first run as replay does (the cycle through the cache:
    the test above); here against this process's compiled run, with AGENTX_COMPILE_LATER=0:
    no process left compiling the simulator (20-30 s of CPU) beside the rest of the suite."""
    from click.testing import CliRunner

    from agentx.cli import cli

    sample = os.path.join(REPO, "traces", "sample", "weka-sample.parquet")
    cache = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "AGENTX_COMPILE_LATER": "0"}
    args = [command, sample, "--hw", "gb200", "-q", "-o"]
    cmd = [sys.executable, "-P", "-c", OWN_RUN, *args, str(tmp_path / "interpreted")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert done.stdout.splitlines()[-1] == "kernel function"
    assert not list(cache.rglob("*.nbi"))  # nothing compiled in the interpreted run
    assert CliRunner().invoke(cli, [*args, str(tmp_path / "compiled")]).exit_code == 0
    for name in files:
        want = (tmp_path / "compiled" / name).read_bytes()
        assert (tmp_path / "interpreted" / name).read_bytes() == want, name


def test_interpreted_kernels_give_the_compiled_bytes_on_a_hash_less_trace(tmp_path):
    # synthetic traces carry no block hashes: their KV outcome is the chain kernel's
    from click.testing import CliRunner

    from agentx.cli import cli
    from agentx.traces.io import write_trace
    from agentx.traces.synth import synthesize

    trace = tmp_path / "t.parquet"
    write_trace(synthesize(8, seed=5), trace)
    args = ["replay", str(trace), "--hw", "h200", "--gpus", "16", "--calls", "full", "-q", "-o"]
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    cmd = [sys.executable, "-P", "-c", OWN_RUN, *args, str(tmp_path / "interpreted")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert out.stdout.splitlines()[-1] == "kernel function"
    assert CliRunner().invoke(cli, [*args, str(tmp_path / "compiled")]).exit_code == 0
    for name in ("calls.parquet", "summary.json", "stages.parquet", "footprint.parquet"):
        want = (tmp_path / "compiled" / name).read_bytes()
        assert (tmp_path / "interpreted" / name).read_bytes() == want, name


def test_only_the_processs_own_command_of_a_small_trace_is_interpreted(monkeypatch):
    import numba

    import agentx.replay.kernel  # noqa: F401 (imported: what numba does with it is fixed)
    from agentx import warm

    assert not warm.OWN_PROCESS  # a caller's command (this test's) compiles, always
    assert not warm.interpret(10)
    monkeypatch.setattr(warm, "OWN_PROCESS", True)
    assert not warm.interpret(10)  # pricing's module is imported
    monkeypatch.delitem(sys.modules, "agentx.replay.kernel")
    monkeypatch.setattr(warm, "_cold", lambda module, function: True)
    monkeypatch.setattr(numba.config, "DISABLE_JIT", False)
    assert not warm.interpret(0) and not warm.interpret(warm.INTERPRET_MAX_CALLS + 1)
    assert not numba.config.DISABLE_JIT
    assert warm.interpret(warm.INTERPRET_MAX_CALLS)
    assert numba.config.DISABLE_JIT  # (monkeypatch puts it back)


@pytest.mark.parametrize("probe", ["PRICING", "GEOMETRY", "SIMULATOR"])
def test_a_cold_cache_is_one_without_the_probed_kernels_index(tmp_path, monkeypatch, probe):
    import glob
    import importlib

    import numba
    from numba.core.caching import FunctionCache

    from agentx import warm

    module, function = getattr(warm, probe)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    assert warm._cold(module, function)
    # the index file numba itself writes for the kernel (fails if the probe names no kernel),
    # in that folder (a cache object of its own: the kernel's read CACHE_DIR when it was made)
    py_func = getattr(importlib.import_module(module), function)
    py_func = getattr(py_func, "py_func", py_func)
    index = FunctionCache(py_func)._cache_file._index_path
    assert index.startswith(str(tmp_path))
    os.makedirs(os.path.dirname(index), exist_ok=True)
    open(index, "wb").close()
    assert not warm._cold(module, function)
    assert glob.glob(os.path.join(glob.escape(str(tmp_path)), "**", "*.nbi"), recursive=True) == [index]  # fmt: skip


def test_a_second_compile_later_exits_while_one_compiles(tmp_path, monkeypatch):
    import fcntl

    from agentx import warm

    monkeypatch.setattr(warm, "lock_path", lambda: str(tmp_path / warm.LOCK_NAME))
    with open(warm.lock_path(), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # a module that is not a command: the call fails if it gets past the lock
        warm._later("agentx.no_such_module", {})
    with pytest.raises(ModuleNotFoundError):
        warm._later("agentx.no_such_module", {})


def test_compile_later_never_fails_the_run(monkeypatch):
    from agentx import warm

    started = []
    monkeypatch.setattr(warm.subprocess, "Popen", lambda *a, **k: started.append(a))
    warm.compile_later("agentx.cli.cmd_replay", {"trace": lambda: None})  # cannot be pickled
    assert started == []

    def no_process(*a, **k):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(warm.subprocess, "Popen", no_process)
    warm.compile_later("agentx.cli.cmd_replay", {"trace": "t.parquet"})


def test_compile_later_starts_nothing_where_told_not_to(monkeypatch):
    from agentx import warm

    started = []
    monkeypatch.setattr(warm.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv("AGENTX_COMPILE_LATER", "0")
    warm.compile_later("agentx.cli.cmd_replay", {"trace": "t.parquet"})
    assert started == []
    monkeypatch.setenv("AGENTX_COMPILE_LATER", "1")
    warm.compile_later("agentx.cli.cmd_replay", {"trace": "t.parquet"})
    assert len(started) == 1
