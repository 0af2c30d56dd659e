"""Fleet routing, partitioning and the local engine (docs/fleet.md)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.fleet import busy_times, replay_fleet
from agentx.fleet.router import ROUTERS, arrival_order, bounded_load_assign, route
from agentx.replay.config import make_config
from agentx.testing import trace_objects
from agentx.traces.io import read_trace


def test_cli_offers_every_router_and_no_other():
    """The CLI names the routers without importing the fleet (it loads numba, which `agentx
    replay --help` need not): the two lists must agree."""
    from agentx.cli._fleet import ROUTERS as offered

    assert offered == ROUTERS


@pytest.fixture(scope="module")
def cfg():
    return make_config(load_catalog(()), "gb200", "kimi-k2")


@given(
    keys=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=400),
    replicas=st.integers(1, 12),
    eps=st.sampled_from([0.0, 0.1, 0.25, 1.0]),
)
def test_bounded_load_hashing_caps_every_prefix(keys, replicas, eps):
    """Mirrokni et al. 2018: after m placements no replica holds more than ceil((1+eps) m/R)."""
    loads = np.zeros(replicas, np.int64)
    owner = bounded_load_assign(np.array(keys, np.uint64), replicas, eps, loads)
    for m in range(1, len(keys) + 1):
        per = np.bincount(owner[:m], minlength=replicas)
        assert per.max() <= math.ceil((1 + eps) * m / replicas)
    assert loads.sum() == len(keys)


def test_session_router_keeps_sessions_whole_and_bounded(cfg, sample_trace):
    tr = read_trace(sample_trace)
    a = route(tr.calls, 3, "session", eps=0.5)
    per_session = tr.calls.with_columns(r=a).group_by("session_id").agg(pl.col("r").n_unique())
    assert per_session["r"].max() == 1
    sessions = np.bincount(
        tr.calls.with_columns(r=a).unique("session_id")["r"].to_numpy(), minlength=3
    )
    assert sessions.max() <= math.ceil(1.5 * sessions.sum() / 3)


@settings(max_examples=40)
@given(tr=trace_objects(max_sessions=5, with_hashes=True), replicas=st.integers(1, 4))
def test_round_robin_spreads_calls_evenly(tr, replicas):
    a = route(tr.calls, replicas, "round-robin")
    counts = np.bincount(a, minlength=replicas)
    assert counts.max() - counts.min() <= 1
    order = arrival_order(tr.calls)
    assert (a[order] == np.arange(tr.calls.height) % replicas).all()


def _oracle(calls: pl.DataFrame, a: np.ndarray, busy: np.ndarray, replicas: int, b: int):
    """Replays the router's view call by call (Python): in-flight blocks and calls per replica,
    and each replica's cached prefix for the call, at the moment the call is routed."""
    order = arrival_order(calls)
    t0 = calls["t_start_s"].to_numpy()
    t1 = t0 + busy
    inp, out = calls["input_tokens"].to_numpy(), calls["output_tokens"].to_numpy()
    reused, shared = (
        calls["reused_prefix_tokens"].to_numpy(),
        calls["shared_prefix_tokens"].to_numpy(),
    )
    chain = list(zip(calls["session_id"], calls["agent_id"], strict=True))
    held: dict = {}
    seen: dict = {}
    routed: list[int] = []
    for c in order:
        live = [f for f in routed if not (t1[f] <= t0[c])]
        blocks = [
            sum(-(-(inp[f] + out[f]) // b) for f in live if a[f] == r) for r in range(replicas)
        ]
        inflight = [sum(1 for f in live if a[f] == r) for r in range(replicas)]
        ov = [
            min(reused[c], max(held.get((chain[c], r), 0), seen.get((shared[c], r), 0)))
            for r in range(replicas)
        ]
        yield c, blocks, inflight, ov
        routed.append(c)
        r = a[c]
        held[(chain[c], r)] = max(held.get((chain[c], r), 0), inp[c] + out[c])
        seen[(shared[c], r)] = max(seen.get((shared[c], r), 0), shared[c])


@settings(max_examples=40)
@given(
    tr=trace_objects(max_sessions=5, max_calls_per_session=8, with_hashes=True),
    replicas=st.integers(2, 4),
)
def test_kv_aware_never_picks_a_shorter_cached_prefix_at_equal_load(cfg, tr, replicas):
    busy = busy_times(tr, cfg)
    a = route(tr.calls, replicas, "kv-aware", busy_s=busy, block_size_tokens=64)
    for c, blocks, _, ov in _oracle(tr.calls, a, busy, replicas, 64):
        chosen = a[c]
        for r in range(replicas):
            if blocks[r] == blocks[chosen]:
                assert ov[r] <= ov[chosen], (c, r, chosen, ov, blocks)


@settings(max_examples=40)
@given(tr=trace_objects(max_sessions=5, max_calls_per_session=8), replicas=st.integers(2, 4))
def test_least_loaded_picks_a_replica_with_fewest_calls_in_flight(cfg, tr, replicas):
    busy = busy_times(tr, cfg)
    a = route(tr.calls, replicas, "least-loaded", busy_s=busy)
    for c, _, inflight, _ in _oracle(tr.calls, a, busy, replicas, 64):
        assert inflight[a[c]] == min(inflight)


def test_kv_aware_follows_the_cache_when_idle():
    """Two sessions far apart in time: each call goes back to where its prefix is."""
    rows = []
    for s, t in (("a", 0.0), ("b", 1.0)):
        for k in range(4):
            rows.append(
                {"session_id": s, "agent_id": None, "call_index": k, "t_start_s": t + 10.0 * k,
                 "input_tokens": 1000 * (k + 1), "reused_prefix_tokens": 1000 * k,
                 "output_tokens": 10, "shared_prefix_tokens": 0}
            )  # fmt: skip
    df = pl.DataFrame(rows)
    a = route(df, 4, "kv-aware", busy_s=np.full(df.height, 0.5), block_size_tokens=64)
    by = df.with_columns(r=a).group_by("session_id").agg(pl.col("r").n_unique())
    assert by["r"].max() == 1  # each session kept its replica
    assert a[0] != a[4]  # and the two did not share one (ties go to the idle replica)


@pytest.mark.slow
def test_round_robin_hits_no_more_than_session_affinity_on_weka(cfg, weka_parquet):
    tr = read_trace(weka_parquet)
    hits = {
        r: replay_fleet(tr, cfg, replicas=4, router=r)["summary"]["fleet"]["hit_ratio"]
        for r in ("round-robin", "session")
    }
    assert hits["round-robin"] <= hits["session"], hits


def test_fleet_of_one_is_the_single_instance_replay(cfg, sample_trace):
    from agentx.kv import replay_tiers
    from agentx.replay.replay import replay_trace

    tr = read_trace(sample_trace)
    one = replay_fleet(tr, cfg, replicas=1, router="round-robin")
    ref = replay_trace(tr, cfg, kv=replay_tiers(tr, cfg))
    assert one["summary"]["total_time_s"] == pytest.approx(ref.summary["total_time_s"], rel=1e-12)
    assert one["summary"]["hbm_peak_bytes_per_gpu"] == ref.summary["hbm_peak_bytes_per_gpu"]
    cols = [c for c in ref.calls.columns]
    assert one["tables"]["calls"].select(cols).equals(ref.calls)


def test_shared_store_turns_recomputed_shared_prefix_into_loads(cfg, sample_trace):
    from agentx.fleet import SharedStore

    tr = read_trace(sample_trace)
    base = replay_fleet(tr, cfg, replicas=4, router="round-robin")["tables"]["calls"]
    res = replay_fleet(tr, cfg, replicas=4, router="round-robin", store=SharedStore(1e12, 50e9))[
        "tables"
    ]["calls"]
    moved = res["kv_store_hit_tokens"]
    assert (moved <= tr.calls["shared_prefix_tokens"].gather(res["trace_row"])).all()
    assert (res["kv_recompute_tokens"] + moved).equals(base["kv_recompute_tokens"])
    assert moved.sum() > 0 and res["total_energy_j"].sum() <= base["total_energy_j"].sum()


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("store", [[], ["--store-gb", "100"]])
def test_partition_then_replay_equals_routing_in_place(tmp_path, sample_trace, store):
    ds = tmp_path / "ds"
    r = _invoke("partition", sample_trace, "--hw", "gb200", "--replicas", 3,
                "--router", "kv-aware", *store, "-o", ds, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in ds.iterdir()) == [
        "fleet.json", "replica=0", "replica=1", "replica=2"
    ]  # fmt: skip
    # a standard hive layout: any reader recovers the replica column from the folder names
    hive = pl.read_parquet(ds / "*" / "*.parquet", hive_partitioning=True)
    assert hive.height == pl.read_parquet(sample_trace).height
    assert sorted(hive["replica"].unique().to_list()) == [0, 1, 2]
    a = _invoke("replay", ds, "--hw", "gb200", "-o", tmp_path / "a", "-q")
    b = _invoke("replay", sample_trace, "--hw", "gb200", "--replicas", 3, "--router", "kv-aware", *store,
                "-o", tmp_path / "b", "-q")  # fmt: skip
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    by_file = pl.read_parquet(tmp_path / "a" / "calls.parquet")
    assert ("kv_store_hit_tokens" in by_file.columns) == bool(store)
    assert hive.sort("trace_row")["replica"].cast(pl.Int32).equals(by_file["replica"])
    for t in ("calls", "stages", "replicas", "replica_load", "footprint"):
        assert pl.read_parquet(tmp_path / "a" / f"{t}.parquet").equals(
            pl.read_parquet(tmp_path / "b" / f"{t}.parquet")
        ), t
    assert (tmp_path / "a" / "summary.json").read_bytes() == (
        tmp_path / "b" / "summary.json"
    ).read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--replicas", "2", "--gpus-total", "64"],
            "Error: give --replicas or --gpus-total, not both",
        ),
        (
            ["--gpus-total", "16"],
            "Error: --gpus-total 16 holds no replica of 32 GPUs; give at least 32",
        ),
        (["--replicas", "0"], "Error: --replicas must be at least 1, got 0"),
        (["--router", "session"], "Error: a fleet needs --replicas or --gpus-total"),
        (["--replicas", "2", "--ray-address", "auto"], "Error: --ray-address needs --engine ray"),
    ],
)
def test_fleet_usage_errors(sample_trace, args, message):
    r = _invoke("replay", sample_trace, "--hw", "gb200", *args)
    assert r.exit_code == 2 and r.output.strip().splitlines()[-1] == message, r.output


def test_gpus_total_chooses_whole_replicas(sample_trace):
    r = _invoke("replay", sample_trace, "--hw", "gb200", "--gpus-total", 100, "--json", "-q")
    assert r.exit_code == 0, r.output
    assert '"replicas": 3' in r.output  # 100 GPUs hold three 32-GPU replicas


def test_load_chart_is_an_altair_chart(cfg, sample_trace):
    from agentx.fleet.charts import load_per_replica

    res = replay_fleet(read_trace(sample_trace), cfg, replicas=3, router="session")
    chart = load_per_replica(res["tables"]["replica_load"])
    spec = chart.to_dict()
    assert spec["encoding"]["color"]["field"] == "replica"
    assert len(spec.get("datasets", {}).popitem()[1]) == res["tables"]["replica_load"].height


def test_without_kv_tiers_hit_ratios_are_unknown_not_zero(cfg, sample_trace):
    from agentx.fleet.replica import ReplicaOptions

    res = replay_fleet(
        read_trace(sample_trace), cfg, replicas=2, options=ReplicaOptions(kv_tiers=False)
    )
    assert res["tables"]["replicas"]["hit_ratio"].null_count() == 2
    assert res["summary"]["fleet"]["hit_ratio"] is None


def test_more_replicas_than_sessions_leaves_some_idle(cfg, sample_trace):
    tr = read_trace(sample_trace)
    rep = replay_fleet(tr, cfg, replicas=12, router="session")["tables"]["replicas"]
    assert rep.height == 12 and rep["calls"].sum() == tr.calls.height
    idle = rep.filter(pl.col("calls") == 0)
    assert idle.height >= 12 - tr.calls["session_id"].n_unique()
    assert idle["work_s"].sum() == 0 and idle["hit_ratio"].null_count() == idle.height


def test_an_empty_trace_is_refused(cfg, sample_trace):
    from agentx.errors import InputError
    from agentx.traces.io import Trace

    tr = read_trace(sample_trace)
    with pytest.raises(InputError, match="expected at least one call to route, got none"):
        replay_fleet(Trace(tr.calls.head(0), tr.meta), cfg, replicas=2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replicas", "3"], "--replicas 3 differs from the dataset's 2 ({ds})"),
        (
            ["--store-gb", "100"],
            "the shared store is set when partitioning; give --store-gb/--store-gbps to "
            "agentx partition, not to replay ({ds})",
        ),
    ],
)
def test_replay_of_a_dataset_keeps_its_routing(tmp_path, sample_trace, args, message):
    ds = tmp_path / "ds"
    made = _invoke("partition", sample_trace, "--hw", "gb200", "--replicas", 2, "-o", ds, "-q")
    assert made.exit_code == 0, made.output
    r = _invoke("replay", ds, "--hw", "gb200", *args)
    assert r.exit_code == 2
    assert r.output.strip() == "Error: " + message.format(ds=ds)
