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
``prepare`` sets up numba's CPU target (once per process, 0.13 s) on a thread while the run
reads its trace, cached kernels or not.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading

SETTLE_S = 120  # a helper still compiling after this is stopped: the run compiles in place

_helper: subprocess.Popen | None = None


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


def prepare() -> None:
    """Set up numba's CPU target on a thread of its own while the run reads its trace.

    The first kernel a run calls, even one numba loads from its cache, first sets up the
    target (every registered implementation, once per process): 0.13 s of the first load's
    0.13 s in a 10 M-call replay, on the main thread between the read and the KV kernels.
    Done here, under numba's compiler lock, it overlaps the read (polars decoding, the GIL
    let go); a run that reaches a kernel first waits on the lock, as before."""
    threading.Thread(target=_refresh, name="numba-target", daemon=True).start()


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
        (_peak, (f, f, f, f, f, f, 1.0)),
    ):
        fn.compile(tuple(numba.typeof(a) for a in args))


if __name__ == "__main__":
    _compile(*pickle.load(sys.stdin.buffer))
