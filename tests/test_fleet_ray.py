"""--engine ray on a real local Ray instance gives the local engine's results (docs/fleet.md).

One Ray instance (2 CPUs) is shared by the module; tasks are real Ray tasks in separate
worker processes, and one test kills its own worker mid-task to exercise Ray's retry.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.fleet import replay_fleet
from agentx.fleet.replica import replay_replica
from agentx.fleet.router import ROUTERS
from agentx.fleet.store import SharedStore
from agentx.replay.config import make_config
from agentx.traces.io import read_trace

ray = pytest.importorskip("ray", reason="Ray is a test extra: pip install -e '.[test]'")


@pytest.fixture(scope="module")
def ray_local():
    ray.init(
        num_cpus=2, include_dashboard=False, logging_level="ERROR", object_store_memory=200_000_000
    )
    # the fault-injection task below lives in this test module: ship it by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(sample_trace):
    return read_trace(sample_trace), make_config(load_catalog(()), "gb200", "kimi-k2")


def assert_same(a: dict, b: dict) -> None:
    """Integers exact, floats within 1e-9 relative, every table and the summary."""
    assert a["tables"].keys() == b["tables"].keys()
    for name, x in a["tables"].items():
        y = b["tables"][name]
        assert x.columns == y.columns and x.height == y.height, name
        for c in x.columns:
            u, v = x[c], y[c]
            if u.dtype.is_float():
                np.testing.assert_allclose(
                    u.to_numpy(), v.to_numpy(), rtol=1e-9, atol=0, err_msg=f"{name}.{c}"
                )
            else:
                assert u.equals(v), f"{name}.{c}"
    _same_json(a["summary"], b["summary"], "summary")


def _same_json(x, y, where):
    if isinstance(x, dict):
        assert x.keys() == y.keys(), where
        for k in x:
            _same_json(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, float):
        assert y == pytest.approx(x, rel=1e-9, abs=0), where
    else:
        assert x == y, where


@pytest.mark.parametrize("router", ROUTERS)
def test_ray_equals_local_for_every_router(ray_local, setup, router):
    tr, cfg = setup
    kw = {"replicas": 3, "router": router, "store": SharedStore(1e12, 50e9)}
    local = replay_fleet(tr, cfg, engine="local", **kw)
    remote = replay_fleet(tr, cfg, engine="ray", **kw)
    assert_same(local, remote)


def test_progress_counts_tasks_done(ray_local, setup):
    from agentx.fleet import plan_fleet
    from agentx.fleet.engines import run_ray
    from agentx.fleet.replica import ReplicaOptions

    tr, cfg = setup
    parts, _ = plan_fleet(tr, cfg, 3, "round-robin")
    seen = []
    run_ray(parts, cfg, ReplicaOptions(), report=lambda k, n: seen.append((k, n)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def die_once(part, cfg, opts, replica):
    """Kill this Ray worker process the first time replica 1 runs; Ray retries the task."""
    marker = os.environ["AGENTX_TEST_KILL_MARKER"]
    if replica == 1 and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return replay_replica(part, cfg, opts, replica)


def test_a_killed_worker_is_retried_and_results_do_not_change(ray_local, setup, tmp_path):
    tr, cfg = setup
    marker = tmp_path / "killed"
    ray_env = {"AGENTX_TEST_KILL_MARKER": str(marker)}  # set inside the worker by the task
    local = replay_fleet(tr, cfg, replicas=3, router="session", engine="local")
    remote = replay_fleet(
        tr, cfg, replicas=3, router="session", engine="ray", fn=_with_env(ray_env)
    )
    assert marker.exists() and int(marker.read_text()) != os.getpid()  # a worker really died
    assert_same(local, remote)


def _with_env(env):
    def run(part, cfg, opts, replica):
        os.environ.update(env)
        return die_once(part, cfg, opts, replica)

    return run


def test_a_dataset_on_ray_reads_its_partitions(ray_local, setup, tmp_path, sample_trace):
    r = CliRunner().invoke(
        cli, ["partition", str(sample_trace), "--hw", "gb200", "--replicas", "2", "--router",
              "round-robin", "-o", str(tmp_path / "ds"), "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    tr, cfg = setup
    # by address: the probe (a child driver) must find the running instance
    address = ray_local.get_runtime_context().gcs_address
    from_files = replay_fleet(tmp_path / "ds", cfg, engine="ray", ray_address=address)
    in_place = replay_fleet(tr, cfg, replicas=2, router="round-robin", engine="local")
    assert_same(in_place, from_files)
    assert from_files["tables"]["calls"]["replica"].unique().sort().to_list() == [0, 1]


def test_cli_engine_ray_writes_the_local_engines_run(ray_local, tmp_path, sample_trace):
    import polars as pl

    base = ["replay", str(sample_trace), "--hw", "gb200", "--replicas", "3", "--router", "kv-aware",
            "--calls", "summary", "-q"]  # fmt: skip
    for engine in ("local", "ray"):
        r = CliRunner().invoke(cli, [*base, "--engine", engine, "-o", str(tmp_path / engine)])
        assert r.exit_code == 0, r.output
    for t in ("calls", "stages", "footprint", "replicas", "replica_load"):
        a = pl.read_parquet(tmp_path / "local" / f"{t}.parquet")
        b = pl.read_parquet(tmp_path / "ray" / f"{t}.parquet")
        assert a.equals(b), t
    summary = (tmp_path / "local" / "summary.json").read_bytes()
    assert summary == (tmp_path / "ray" / "summary.json").read_bytes()


def test_an_address_that_does_not_answer_fails_in_one_line(sample_trace):
    r = CliRunner().invoke(
        cli, ["replay", str(sample_trace), "--hw", "gb200", "--replicas", "2", "--engine", "ray",
              "--ray-address", "ray://127.0.0.1:9"],
    )  # fmt: skip
    assert r.exit_code == 1
    assert r.output.strip() == (
        "Error: Ray at ray://127.0.0.1:9 does not answer (Connection refused, waited up to 10 s)"
    )


def test_missing_ray_says_how_to_install(sample_trace, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    r = CliRunner().invoke(
        cli, ["replay", str(sample_trace), "--hw", "gb200", "--replicas", "2", "--engine", "ray"]
    )
    assert r.exit_code == 1
    assert r.output.strip() == (
        "Error: --engine ray needs Ray, which is not installed: pip install 'agentx[ray]'"
    )
