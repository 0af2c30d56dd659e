"""Every DuckDB view and named query against the same figure computed in polars from the Parquet files."""

from __future__ import annotations

import json

import polars as pl
import pytest
from _runs_fixture import make_runs, make_trace, write_trace_file
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from agentx.analysis import QueryError, get_query, list_queries, open_db
from agentx.errors import InputError, UnknownNameError
from agentx.runs import write_run


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    trace = write_trace_file(root / "trace.parquet")
    runs = make_runs(root / "runs", trace)
    db = open_db([trace], [root / "runs"])
    yield root, trace, runs, db
    db.close()


def test_calls_view_is_the_trace(data):
    _, trace, _, db = data
    got = db.query("SELECT * EXCLUDE (trace) FROM calls")
    assert_frame_equal(got, pl.read_parquet(trace))
    assert db.query("SELECT DISTINCT trace FROM calls")["trace"].to_list() == ["trace"]


def test_sessions_view_matches_polars(data):
    _, trace, _, db = data
    df = pl.read_parquet(trace)
    want = (
        df.group_by("session_id")
        .agg(
            calls=pl.len(),
            subagent_calls=pl.col("agent_id").is_not_null().sum(),
            first_input_tokens=pl.col("input_tokens").first(),
            last_input_tokens=pl.col("input_tokens").last(),
            max_input_tokens=pl.col("input_tokens").max(),
            input_tokens=pl.col("input_tokens").sum(),
            output_tokens=pl.col("output_tokens").sum(),
            compactions=pl.col("is_compaction").sum(),
            duration_s=pl.col("t_start_s").max() - pl.col("t_start_s").min(),
            reuse_ratio=pl.col("reused_prefix_tokens").sum() / pl.col("input_tokens").sum(),
        )
        .sort("session_id")
    )
    got = db.query("SELECT * FROM sessions").select(want.columns)
    assert_frame_equal(got, want, check_dtypes=False)
    assert got["compactions"].sum() >= 1  # the fixture compacts at least once (SEED-6)


def test_run_table_views_union_every_run(data):
    _, _, runs, db = data
    for view, table, names in [
        ("stages", "stages", ["replay-b200", "replay-b300", "replay-gb200"]),
        ("replay_calls", "calls", ["replay-b200", "replay-b300", "replay-gb200"]),
        ("footprint", "footprint", ["replay-b200", "replay-b300", "replay-gb200"]),
        ("sweep", "sweep", ["sweep-b200", "sweep-gb200"]),
        ("kv_curve", "kv_curve", ["kv"]),
        ("sim_timeseries", "sim_timeseries", ["sim"]),
    ]:
        want = pl.concat(
            [
                pl.read_parquet(runs[n] / f"{table}.parquet").with_columns(run=pl.lit(n))
                for n in names
            ]
        )
        got = db.query(f"SELECT * FROM {view}")  # insertion order: runs sorted by path
        assert_frame_equal(got.select(want.columns), want, check_dtypes=False)


def test_standalone_table_file_joins_its_view(data, tmp_path):
    """agentx kv-curve -o curve.parquet writes one table (metadata agentx.kv_curve), not a run."""
    from _runs_fixture import kv_curve

    from agentx.io import write_parquet_atomic

    _, trace, runs, _ = data
    curve = tmp_path / "gb200-curve.parquet"
    write_parquet_atomic(kv_curve().head(5), curve, {"agentx.kv_curve": "gb200 kimi-k2 gpus=32"})
    with open_db([trace, curve], [runs["kv"]]) as db:
        got = db.query("SELECT run, count(*) AS n FROM kv_curve GROUP BY run ORDER BY run")
        assert got.rows() == [("gb200-curve", 5), ("kv", kv_curve().height)]
        assert db.query("SELECT count(*) FROM calls").item() == pl.read_parquet(trace).height


def test_runs_and_summary_views(data):
    _, trace, runs, db = data
    got = db.query("SELECT run, kind, system, model, gpus, trace_sha256 FROM runs ORDER BY run")
    assert got["run"].to_list() == sorted(runs)
    b200 = got.filter(pl.col("run") == "replay-b200").row(0, named=True)
    manifest = json.loads((runs["replay-b200"] / "run.json").read_text())
    assert (b200["kind"], b200["system"], b200["gpus"]) == ("replay", "b200", 16)
    assert b200["trace_sha256"] == manifest["inputs"]["trace"]["sha256"]
    summary = json.loads((runs["replay-gb200"] / "summary.json").read_text())
    j = db.query(
        "SELECT value FROM summary WHERE run = 'replay-gb200' AND key = 'j_per_output_token'"
    ).item()
    assert j == pytest.approx(summary["j_per_output_token"])
    pre = db.query(
        "SELECT value FROM summary WHERE run = 'replay-gb200' AND key = 'stages.prefill.energy_j'"
    ).item()
    assert pre == pytest.approx(summary["stages"]["prefill"]["energy_j"])


def _replay(runs, name):
    return pl.read_parquet(runs[name] / "calls.parquet")


def test_named_query_energy_per_stage(data):
    _, _, runs, db = data
    got = db.query(get_query("energy_per_stage").sql)
    for name in ("replay-b200", "replay-gb200"):
        st = pl.read_parquet(runs[name] / "stages.parquet").sort("stage")
        mine = got.filter(pl.col("run") == name).sort("stage")
        assert mine["energy_j"].to_list() == pytest.approx(st["energy_j"].to_list())
    # SEED-22 shape in the fixture: decode dominates energy, so it sorts first in each run
    assert got.filter(pl.col("run") == "replay-b200")["stage"][0].startswith("decode")


def test_named_query_j_per_output_token_and_cheapest(data):
    _, _, runs, db = data
    jpt = db.query(get_query("j_per_output_token").sql)
    cheap = db.query(get_query("cheapest_system").sql)
    for name in ("replay-b200", "replay-b300", "replay-gb200"):
        c = _replay(runs, name)
        want = c["total_energy_j"].sum() / c["output_tokens"].sum()
        assert jpt.filter(pl.col("run") == name)["j_per_output_token"].item() == pytest.approx(want)
    best = min(
        ("replay-b200", "replay-b300", "replay-gb200"),
        key=lambda n: _replay(runs, n)["total_energy_j"].sum(),
    )
    assert cheap.filter(pl.col("rank") == 1)["run"].to_list() == [best]


def test_named_query_bytes_per_tier_link_and_hits(data):
    _, _, runs, db = data
    links = db.query(get_query("bytes_per_tier_link").sql)
    hits = db.query(get_query("kv_hit_tokens").sql)
    c = _replay(runs, "replay-b300")
    for link in ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd"):
        got = links.filter((pl.col("run") == "replay-b300") & (pl.col("link") == link))[
            "bytes"
        ].item()
        assert got == c[f"kv_{link}_bytes"].sum()
    row = hits.filter(pl.col("run") == "replay-b300").row(0, named=True)
    assert row["hbm_hit_share"] == pytest.approx(
        c["kv_hbm_hit_tokens"].sum() / c["input_tokens"].sum()
    )
    assert sum(
        row[k] for k in ("hbm_hit_share", "dram_hit_share", "ssd_hit_share", "recompute_share")
    ) == pytest.approx(1.0)
    reused = c["reused_prefix_tokens"].sum()
    assert row["hit_ratio_of_reused"] == pytest.approx(
        (
            c["kv_hbm_hit_tokens"].sum()
            + c["kv_dram_hit_tokens"].sum()
            + c["kv_ssd_hit_tokens"].sum()
        )
        / reused
    )


def test_named_query_peak_hbm_and_sweep(data):
    _, _, runs, db = data
    hbm = db.query(get_query("peak_hbm_per_gpu").sql)
    fp = pl.read_parquet(runs["replay-gb200"] / "footprint.parquet")
    row = hbm.filter(pl.col("run") == "replay-gb200").row(0, named=True)
    total = fp.filter(pl.col("component") == "total")["bytes_per_gpu"].item()
    assert row["hbm_bytes_per_gpu"] == pytest.approx(total)
    assert (
        row["capacity_bytes_per_gpu"]
        == fp.filter(pl.col("component") == "hbm_capacity")["bytes_per_gpu"].item()
    )
    assert row["below_80_gb"] == (total < 80e9)
    best = db.query(get_query("best_throughput").sql)
    sw = pl.read_parquet(runs["sweep-b200"] / "sweep.parquet").filter(
        pl.col("fits") & (pl.col("stage") == "prefill")
    )
    got = best.filter((pl.col("system") == "b200") & (pl.col("stage") == "prefill"))[
        "best_tokens_per_s_per_gpu"
    ].item()
    assert got == pytest.approx(sw["tokens_per_s_per_gpu"].max())


def test_named_query_session_growth(data):
    _, trace, _, db = data
    got = db.query(get_query("session_growth").sql).row(0, named=True)
    df = pl.read_parquet(trace)
    assert got["sessions"] == df["session_id"].n_unique()
    assert got["calls"] == df.height
    assert got["compactions"] == df["is_compaction"].sum()
    assert got["max_input_tokens"] == df["input_tokens"].max()


def test_every_named_query_runs_and_is_described(data):
    *_, db = data
    queries = list_queries()
    assert len(queries) >= 8
    for q in queries:
        assert q.description and q.needs, q.name
        assert set(q.needs) <= set(db.views), (q.name, q.needs)
        assert db.query(q.sql).height > 0, q.name


def test_unknown_query_suggests():
    with pytest.raises(
        UnknownNameError, match="unknown query 'energy_per_stag'; did you mean 'energy_per_stage'"
    ):
        get_query("energy_per_stag")


def test_file_access_is_locked(data, tmp_path):
    root, trace, _, db = data
    target = tmp_path / "leak.csv"
    for sql in [
        f"COPY stages TO '{target}'",
        f"ATTACH '{tmp_path / 'x.db'}'",
        f"SELECT * FROM read_parquet('{trace}')",
        "INSTALL httpfs",
        "SET enable_external_access = true",
    ]:
        with pytest.raises(QueryError):
            db.query(sql)
    assert not target.exists() and not (tmp_path / "x.db").exists()


def test_bad_inputs_name_the_file(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="bad.parquet: not a readable Parquet file"):
        open_db([bad])
    with pytest.raises(InputError, match="no such run folder"):
        open_db(runs=[tmp_path / "missing"])
    run = write_run(
        tmp_path / "runs" / "r", "replay", {"stages": pl.DataFrame({"stage": ["prefill"]})}
    )
    (run / "stages.parquet").write_bytes(b"truncated")
    with pytest.raises(InputError, match=r"r/stages.parquet: not a readable Parquet file"):
        open_db(runs=[tmp_path / "runs"])
    (run / "run.json").write_text("{not json")
    with pytest.raises(InputError, match=r"run.json: expected JSON, got a parse error at line 1"):
        open_db(runs=[tmp_path / "runs"])


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_sessions_view_conserves_tokens(tmp_path_factory, n, seed):
    """Whatever the trace, sessions partition calls: counts and token sums are conserved."""
    df = make_trace(n_sessions=n, seed=seed)
    p = write_trace_file(tmp_path_factory.mktemp("h") / "t.parquet", df)
    with open_db([p]) as db:
        s = db.query(
            "SELECT sum(calls) AS c, sum(input_tokens) AS i, sum(new_tokens) AS nw, count(*) AS n FROM sessions"
        ).row(0)
    assert s == (df.height, df["input_tokens"].sum(), df["new_tokens"].sum(), n)
