"""Compile a replay's last kernels on the idle core while its first run compiles the others.

On a fresh install numba compiles every kernel a command reaches, one after the other, in the
command's own thread: ``agentx replay`` of the bundled sample spent ~4.5 s of its ~6 s
compiling, with the second core idle. The kernels it reaches last are the KV outcome's
placement (``kv.tiers._place``), pricing (``replay.kernel``, the largest: ~2 s) and the HBM
peak's sweep (``replay.timeline._peak``). ``start`` launches a helper process that compiles
those three, for the argument types the run will give them, into numba's cache (the files a
run writes itself) while the run reads the trace and compiles the KV stack's kernels;
``settle``, called before the first of them runs, waits for the helper, and numba then loads
them from the cache (tests/test_startup.py). Only where the cache has no pricing kernel yet;
a helper that fails changes nothing but the time: the run compiles them itself, as before.
``prepare`` imports the kernels' modules, starts the helper and sets up numba's CPU target
(once per process) on a thread while the run reads its trace, cached kernels or not.

A first run of a small trace (``INTERPRET_MAX_CALLS``) compiles nothing at all: ``interpret``
turns numba off before the command imports its kernels, which then run as the Python they
are written in (same bytes), and ``compile_later`` compiles them in a process of its own that
outlives the run, for the next one. Compiling is what costs there: the sample's kernels run
interpreted in less time than they take to compile, a hash-less trace's chain kernel in a
tenth of it.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import subprocess
import sys
import threading

SETTLE_S = 120  # a helper still compiling after this is stopped: the run compiles in place
# A first run of a trace this small, on a cold cache, runs its kernels as Python (``interpret``)
# and leaves their compiling to a process in the background (``compile_later``): compiling
# them costs more than running them. Intel Xeon VM, three alternating runs each: the bundled
# sample (445 calls, 0.7 M block references) 6.0-9.6 s interpreted against 12.5-14.4 s
# compiling; a hash-less 500-call `agentx synth` trace 5.5 s against 47.5 s (the chain
# kernel alone compiles for ~25 s there). At 2,000 calls 13 s against ~40 s; at 20,000, 92 s.
INTERPRET_MAX_CALLS = 1_000
# True in the process's own command (agentx.cli.main), never in a caller's (a test, a library
# user): only there may ``interpret`` turn numba off for the modules imported after it
OWN_PROCESS = False

_helper: subprocess.Popen | None = None
_preparing: threading.Thread | None = None


def start(cfg, calls: int, parallel: bool = True) -> None:
    """Compile the kernels for ``cfg`` (the pricing variant a partition of ``calls`` rows
    takes, ``replay.kernel.kernel_for(calls, parallel)``) in a helper process, unless numba's
    cache has them or a helper is running."""
    global _helper
    from agentx.replay.kernel import kernel_for, params

    if _helper is not None or _cached(kernel_for(calls, parallel)):
        return
    payload = pickle.dumps((*params(cfg), calls, parallel))
    try:
        # -P: the run's working folder is not put on the helper's sys.path (a types.py or
        # numba.py there would break its imports)
        _helper = subprocess.Popen(
            [sys.executable, "-P", "-m", "agentx.warm"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # the payload (132 KB, mostly the configuration's expert table) is more than a pipe
        # holds, so writing it waits until the helper reads, after its own imports: 0.55 s of
        # the run's first seconds on an Intel Xeon VM. A thread hands it over instead.
        threading.Thread(target=_send, args=(_helper.stdin, payload), daemon=True).start()
        atexit.register(_stop)  # a run that ends first (an error) takes its helper along
    except OSError:  # no process to spare (or it died at once): compile in place, as before
        _stop()


def _send(pipe, payload: bytes) -> None:
    try:
        pipe.write(payload)
        pipe.close()
    except (OSError, ValueError):  # the helper was stopped first (the run ended): no matter
        pass


def prepare(modules=(), cfg=None, calls: int = 0, parallel: bool = True) -> None:
    """Ready the kernels on a thread of its own while the run reads its trace (polars
    decoding, the GIL let go): import ``modules``, ``start`` the helper for ``cfg`` (which
    imports the pricing kernel) where one is given, and set up numba's CPU target. Call
    ``ready`` before the run imports any of them itself.

    numba and the kernels' modules take ~0.3-0.45 s of one core to import, and setting up the
    target (every registered implementation, once per process) 0.13 s more, which the first
    kernel a run calls pays even when numba loads it from its cache: on the main thread
    before the read and between the read and the KV kernels they were that much of a 10 M-call
    replay's time, with the second core idle. Here they overlap the read; whatever fails here
    (an import) happens again where the run needs it, and says why there."""
    global _preparing
    _preparing = threading.Thread(
        target=_prepare, args=(modules, cfg, calls, parallel), name="agentx-prepare", daemon=True
    )
    _preparing.start()


def ready() -> None:
    """Wait for ``prepare``'s thread, if any: the run's own imports come after its own (two
    threads importing the same modules at once may find one of them half made)."""
    global _preparing
    thread, _preparing = _preparing, None
    if thread is not None:
        thread.join()


def _prepare(modules, cfg, calls: int, parallel: bool) -> None:
    import importlib

    try:
        for name in modules:
            importlib.import_module(name)
        if cfg is not None:
            start(cfg, calls, parallel)
    except Exception:  # noqa: BLE001 (the run's own import or compile says why)
        pass
    _refresh()


def _refresh() -> None:
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        with global_compiler_lock:
            cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 (another numba's internals: the first kernel does it)
        pass


def settle() -> None:
    """Wait for the helper ``start`` launched, if any: its kernels are then in the cache."""
    global _helper
    ready()  # (``prepare`` may be starting it)
    helper, _helper = _helper, None
    if helper is not None:
        try:
            helper.wait(SETTLE_S)
        except subprocess.TimeoutExpired:
            helper.kill()


def _stop() -> None:
    global _helper
    helper, _helper = _helper, None
    if helper is not None:
        helper.kill()


# A kernel every run of the command compiles, whichever its trace's path (hashed or not): its
# absence from numba's cache marks a cold cache for that command.
PRICING = ("agentx.replay.kernel", "_price")  # replay
GEOMETRY = ("agentx.kv.geometry_ops", "_assemble")  # kv-curve (replay's runs compile it too)
SIMULATOR = ("agentx.dynamics.kernel", "simulate_kernel")  # simulate (open loop)


def interpret(rows: int, probe: tuple[str, str] = PRICING) -> bool:
    """Whether this run, of a trace of ``rows`` calls, runs its kernels as Python: in the
    process's own command, for 1..INTERPRET_MAX_CALLS calls, where numba's cache holds no
    kernel ``probe`` (module, function: a cold cache). Then numba compiles none of the
    kernels in modules imported from here on (numba.config.DISABLE_JIT, read as a function is
    decorated), and they give the same bytes (tests/test_startup.py). Call it before the
    command imports them; ``compile_later`` then fills the cache for the next run."""
    if not OWN_PROCESS or not 0 < rows <= INTERPRET_MAX_CALLS or probe[0] in sys.modules:
        return False
    import numba

    if numba.config.DISABLE_JIT or not _cold(*probe):
        return False  # (numba off by the user: nothing to compile later either)

    numba.config.DISABLE_JIT = True
    return True


def _cold(module: str, function: str) -> bool:
    """Whether numba's cache holds no kernel of ``module.function`` (no index file), found
    without importing ``module`` (where its kernels are compiled is fixed at import)."""
    import glob

    where = _cache_dir(module)
    if where is None:  # take it as warm: compile, as before
        return False
    stem = module.rpartition(".")[2]
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    return not glob.glob(os.path.join(glob.escape(where), f"{stem}.{function}-*.{tag}.nbi"))


def _cache_dir(module: str) -> str | None:
    """The folder numba caches ``module``'s kernels in (None where that cannot be told)."""
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # numba >= 0.65: public
        # the file by path: importlib's find_spec would import the module's package first
        here = os.path.dirname(os.path.abspath(__file__))  # agentx/
        source = os.path.join(here, *module.split(".")[1:]) + ".py"

        def probe():  # the locators read a function only for its line: any will do
            pass

        locators = (cls.from_function(probe, source) for cls in impl._locator_classes)
        return next(loc for loc in locators if loc is not None).get_cache_path()
    except Exception:  # noqa: BLE001 (another numba's internals)
        return None


def compile_later(module: str, params: dict) -> None:
    """Run ``module``'s command again with ``params`` (its parsed parameters) in a process of
    its own that outlives this one, with numba on and its output in a temporary folder: it
    compiles into the cache the kernels this interpreted run did not. One at a time (a lock
    file: a second exits at once); its failure changes nothing but the next run's time.
    ``AGENTX_COMPILE_LATER=0`` starts none (a batch job or container that wants no process
    left behind: every first run of a small trace is then interpreted)."""
    if os.environ.get("AGENTX_COMPILE_LATER", "1") == "0":
        return
    try:
        payload = pickle.dumps((module, params))
        child = subprocess.Popen(
            [sys.executable, "-P", "-m", "agentx.warm", "--later"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not stopped with this run's terminal (Ctrl-C)
        )
        child.stdin.write(payload)
        child.stdin.close()
    except Exception:  # noqa: BLE001 (never the run's failure)
        pass  # no process to spare, or a parameter pickle cannot take: the next run compiles


LOCK_NAME = "agentx-compile.lock"


def lock_path() -> str:
    """The lock file ``compile_later``'s process holds while it compiles: one per cache."""
    import tempfile

    where = _cache_dir("agentx.replay.kernel") or tempfile.gettempdir()
    return os.path.join(where, LOCK_NAME)


def wait_compiled(cache_dir, probe: str, timeout_s: float = math.inf) -> None:
    """Until a ``compile_later`` process compiling into the numba cache folder ``cache_dir``
    (another process's ``NUMBA_CACHE_DIR``) has written an index file matching ``probe``
    (e.g. ``kernel._price-*.nbi``) and let go of its lock; TimeoutError after ``timeout_s``.
    For the tests and benchmarks that time or check a first run and the one after it."""
    import fcntl
    import glob
    import time

    def found(pattern):
        return glob.glob(os.path.join(glob.escape(str(cache_dir)), "**", pattern), recursive=True)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lock = found(LOCK_NAME)
        if lock and found(probe):
            with open(lock[0]) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except OSError:  # still compiling
                    pass
        time.sleep(0.05)
    raise TimeoutError(f"no compile_later process finished in {cache_dir} ({probe})")


def _later(module: str, params: dict) -> None:
    import fcntl
    import importlib
    import tempfile
    from pathlib import Path

    import click

    with open(lock_path(), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another one compiles
            return
        command = importlib.import_module(module).command
        with tempfile.TemporaryDirectory(prefix="agentx-compile-") as tmp:
            for k in ("run_dir", "output"):  # what the command writes goes to the folder
                if params.get(k) is not None:
                    params = {**params, k: Path(tmp) / Path(params[k]).name}
            with click.Context(command) as ctx:
                quiet = {k: True for k in ("quiet", "as_json") if k in params}  # nothing said
                ctx.invoke(command.callback, **{**params, **quiet})


def _cached(dispatcher) -> bool:
    """Whether numba's cache holds kernels of ``dispatcher``'s function (its index file)."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:  # another numba's internals: assume it is (start nothing)
        return True


def _compile(q, dtab, exp_tok, calls: int, parallel: bool = True) -> None:
    """Compile (not run) the three kernels for the argument types a replay gives them:
    ``q, dtab, exp_tok`` are ``replay.kernel.params`` of its configuration, ``calls`` the
    rows of its partitions, ``parallel`` whether they may take the parallel kernel."""
    import numba
    import numpy as np

    from agentx.kv.tiers import _place
    from agentx.replay.kernel import N_ROWS, kernel_for
    from agentx.replay.timeline import _peak

    f, i = np.zeros(1), np.zeros(1, np.int64)
    price = kernel_for(calls, parallel)
    for fn, args in (  # in the order a run reaches them
        (_place, (i, *[f] * 8, *[1.0] * 7, *[i] * 4, *[f] * 6)),
        (price, (q, dtab, exp_tok, f, f, f, f, f, np.empty((N_ROWS, 1)), i)),
        (_peak, (f, f, f, f, f, f, 1.0, 1.0, 1.0)),
    ):
        fn.compile(tuple(numba.typeof(a) for a in args))


if __name__ == "__main__":
    if sys.argv[1:] == ["--later"]:
        _later(*pickle.load(sys.stdin.buffer))
    else:
        _compile(*pickle.load(sys.stdin.buffer))
