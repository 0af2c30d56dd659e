"""Execution engines: the same per-replica function in-process (``local``) or as Ray tasks.

``ray``: one task per replica partition, each reading only its partition (a file path of a
partitioned dataset, or the frame put once into Ray's object store); a task whose worker dies
is retried by Ray (``max_retries``). With no address a local Ray instance is started with this
machine's CPUs; ``auto`` joins the cluster this machine belongs to; ``ray://host:port`` goes
through Ray Client. An address that does not answer fails in one line within ``timeout_s``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable

from agentx.errors import AgentxError, UsageError
from agentx.fleet.partition import Partition
from agentx.fleet.replica import Partial, replay_replica

ENGINES = ("local", "ray")
RAY_INSTALL = "pip install 'agentx[ray]'"
MAX_RETRIES = 3
CONNECT_TIMEOUT_S = 10.0


class EngineError(AgentxError):
    """The execution engine is missing or cannot be reached."""


def _run_one(part: Partition, cfg, opts, fn: Callable = replay_replica) -> Partial:
    return fn(part.load(), cfg, opts, part.replica)


def run_local(parts: list[Partition], cfg, opts, *, fn=replay_replica, report=None) -> list:
    out = []
    for k, p in enumerate(parts, 1):
        out.append(_run_one(p, cfg, opts, fn))
        if report:
            report(k, len(parts))
    return out


def import_ray():
    try:
        import ray
    except ImportError:
        raise EngineError(
            f"--engine ray needs Ray, which is not installed: {RAY_INSTALL}"
        ) from None
    return ray


def probe(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail in one line unless a Ray cluster answers at ``address`` within ``timeout_s``.

    A closed port fails at once; an open port that is not Ray (or a cluster that hangs) is
    tried in a child process, because Ray's own connect retries for a minute and logs from C++.
    """
    hostport = address.removeprefix("ray://").split("/")[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(
            f"--ray-address must be auto, host:port or ray://host:port, got '{address}'"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise EngineError(
            f"Ray at {address} does not answer ({reason}, waited up to {timeout_s:g} s)"
        ) from None
    code = "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); ray.shutdown()"
    try:
        res = subprocess.run(
            [sys.executable, "-c", code, address], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise EngineError(
            f"Ray at {address} does not answer (no Ray cluster replied, waited up to {timeout_s:g} s)"
        ) from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise EngineError(f"Ray at {address} does not answer ({last})")


def connect(address: str | None, *, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Attach to (or start) Ray; True if this call started the connection (caller shuts it)."""
    ray = import_ray()
    if address not in (None, "auto"):
        probe(address, timeout_s)
    if ray.is_initialized():
        return False
    try:
        if address is None:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR")
        else:
            ray.init(address=address, logging_level="ERROR")
    except ConnectionError as exc:
        raise EngineError(
            f"no Ray cluster at {address or 'local'}: {str(exc).splitlines()[0]}"
        ) from None
    return True


def run_ray(
    parts: list[Partition],
    cfg,
    opts,
    *,
    address: str | None = None,
    fn=replay_replica,
    report=None,
    max_retries: int = MAX_RETRIES,
) -> list:
    """One Ray task per partition; results in partition order, ``report(done, total)`` as
    tasks finish."""
    ray = import_ray()
    started = connect(address)
    try:
        task = ray.remote(max_retries=max_retries, num_cpus=1)(_run_one)
        cfg_ref, opts_ref = ray.put(cfg), ray.put(opts)
        refs = [task.remote(p, cfg_ref, opts_ref, fn) for p in parts]
        index = {r.hex(): k for k, r in enumerate(refs)}
        out: list = [None] * len(refs)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for r in ready:
                out[index[r.hex()]] = ray.get(r)
            if report:
                report(len(refs) - len(pending), len(refs))
        return out
    finally:
        if started:
            ray.shutdown()


def run(engine: str, parts, cfg, opts, *, address=None, fn=replay_replica, quiet=False):
    """Partials of ``parts`` on ``engine``; tasks done / total on stderr at a terminal."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}'; choose one of {', '.join(ENGINES)}")
    report = None if quiet or not sys.stderr.isatty() else _report
    if engine == "local":
        if address is not None:
            raise UsageError("--ray-address needs --engine ray")
        return run_local(parts, cfg, opts, fn=fn, report=report)
    return run_ray(parts, cfg, opts, address=address, fn=fn, report=report)


def _report(done: int, total: int) -> None:
    sys.stderr.write(f"\rreplicas: {done}/{total} tasks done")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()
