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
        "[t.join() for t in threading.enumerate() if t.name == 'numba-target']\n"
        "print(before, len(ctx._registries))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    assert before == 0 and after > 0


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
