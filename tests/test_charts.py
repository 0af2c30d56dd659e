"""Charts are values: assert on ``to_dict()`` (marks, encodings, data) against polars figures."""

from __future__ import annotations

import polars as pl
import pytest
from _runs_fixture import make_runs, write_trace_file
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.analysis import charts as C
from agentx.analysis import open_db


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("charts")
    trace = write_trace_file(root / "trace.parquet")
    make_runs(root / "runs", trace)
    with open_db([trace], [root / "runs"]) as db:
        yield db


def data_of(spec: dict, layer: int | None = None) -> list[dict]:
    """Rows a chart (or one of its layers) plots, from the spec's inlined datasets."""
    node = spec["layer"][layer] if layer is not None else spec
    name = node.get("data", spec.get("data"))["name"]
    return spec["datasets"][name]


def test_stage_shares(db):
    stages = db.query("SELECT * FROM stages")
    spec = C.stage_shares(stages, by="run").to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["row"]["field"] == "metric"
    assert spec["encoding"]["x"]["stack"] == "normalize"
    rows = pl.DataFrame(data_of(spec))
    assert rows.height == stages.height * 2
    got = rows.filter((pl.col("metric") == "energy_share") & (pl.col("run") == "replay-b200")).sort(
        "stage"
    )
    want = stages.filter(pl.col("run") == "replay-b200").sort("stage")
    assert got["share"].to_list() == pytest.approx(want["energy_share"].to_list())


def test_kv_link_bytes_conserves_bytes(db):
    calls = db.query("SELECT * FROM replay_calls")
    spec = C.kv_link_bytes(calls, bins=30).to_dict()
    rows = pl.DataFrame(data_of(spec))
    assert set(rows["link"]) == set(C.LINKS)
    assert rows.height == 3 * 4 * 30  # every run × link × bin, empty bins as zero
    for link in C.LINKS:
        assert rows.filter(pl.col("link") == link)["bytes"].sum() == calls[f"kv_{link}_bytes"].sum()
    assert spec["mark"]["interpolate"] == "step-after"


def test_hbm_footprint_marks_capacity(db):
    fp = db.query("SELECT * FROM footprint")
    spec = C.hbm_footprint(fp).to_dict()
    bars, ticks = spec["layer"]
    assert bars["mark"]["type"] == "bar" and ticks["mark"]["type"] == "tick"
    caps = {r["run"]: r["capacity_gb"] for r in data_of(spec, 1)}
    assert caps["replay-b300"] == pytest.approx(288.0)
    # the slices stack up to the table's own total row; total/capacity/free are not slices
    drawn = pl.DataFrame(data_of(spec, 0))
    assert not set(drawn["component"]) & set(C.FOOTPRINT_TOTALS)
    total = drawn.group_by("run").agg(pl.col("gb_per_gpu").sum())
    want = fp.filter(pl.col("component") == "total").select("run", pl.col("bytes_per_gpu") / 1e9)
    assert dict(total.iter_rows()) == pytest.approx(dict(want.iter_rows()))


def test_latency_throughput_draws_the_fitting_frontier(db):
    sweep = db.query("SELECT * FROM sweep")
    spec = C.latency_throughput(sweep).to_dict()
    rows = pl.DataFrame(data_of(spec))
    fits = sweep.filter(pl.col("fits"))
    assert 0 < rows.height < fits.height  # the fixture's long contexts are dominated
    assert spec["encoding"]["column"]["field"] == "stage"
    assert spec["encoding"]["x"]["scale"]["type"] == "log"
    # the best throughput of each curve is on it
    best = (
        fits.group_by("system", "gpus", "stage")
        .agg(pl.col("tokens_per_s_per_gpu").max())
        .sort("system", "gpus", "stage")
    )
    drawn = (
        rows.group_by("system", "gpus", "stage")
        .agg(pl.col("tokens_per_s_per_gpu").max())
        .sort("system", "gpus", "stage")
    )
    assert drawn.equals(best)


@settings(max_examples=30, deadline=None)
@given(
    pts=st.lists(
        st.tuples(st.integers(1, 50), st.integers(1, 50), st.sampled_from("ab")),
        min_size=1,
        max_size=30,
    )
)
def test_pareto_frontier_is_exactly_the_undominated_points(pts):
    df = pl.DataFrame(
        pts, schema=["per_user_tokens_per_s", "tokens_per_s_per_gpu", "g"], orient="row"
    )
    front = C.pareto_frontier(df, ["g"])
    got = set(front.iter_rows())

    def dominated(p):
        return any(
            q[2] == p[2] and q[0] >= p[0] and q[1] >= p[1] and (q[0], q[1]) != (p[0], p[1])
            for q in pts
        )

    assert {p for p in pts if not dominated(p)} == got


def test_context_growth_derives_compactions_from_replay_calls(db):
    """Replay calls carry no is_compaction: a prompt below half the previous one is marked."""
    trace_calls = db.query("SELECT * FROM calls")
    replay = db.query("SELECT * FROM replay_calls WHERE run = 'replay-b200'")
    assert "is_compaction" not in replay.columns
    spec = C.context_growth(replay, max_sessions=50).to_dict()
    marked = {(r["session_id"], r["call_index"]) for r in data_of(spec, 1)}
    main = trace_calls.filter(pl.col("agent_id").is_null() & pl.col("is_compaction"))
    assert marked == set(main.select("session_id", "call_index").iter_rows())
    assert marked  # the fixture compacts at least once


def test_context_growth_marks_compactions(db):
    calls = db.query("SELECT * FROM calls")
    spec = C.context_growth(calls, max_sessions=3).to_dict()
    line = pl.DataFrame(data_of(spec, 0))
    assert line["session_id"].n_unique() == 3
    main = calls.filter(pl.col("agent_id").is_null())
    longest = (
        main.group_by("session_id")
        .len()
        .sort(["len", "session_id"], descending=[True, False])["session_id"]
        .head(3)
    )
    assert set(line["session_id"]) == set(longest)
    marks = data_of(spec, 1)
    assert all(r["is_compaction"] for r in marks)
    assert (
        len(marks)
        == main.filter(
            pl.col("session_id").is_in(longest.to_list()) & pl.col("is_compaction")
        ).height
    )


def test_hit_ratio_curve_and_sim(db):
    curve = db.query("SELECT * FROM kv_curve")
    spec = C.hit_ratio_curve(curve).to_dict()
    line = spec["layer"][0]
    assert line["encoding"]["x"]["scale"]["type"] == "symlog"
    assert len(data_of(spec, 0)) == curve.height
    assert 0.9 in line["encoding"]["y"]["axis"]["values"]  # the 90 % point is labelled
    # per GPU when the run's GPU count is known, with the configured capacity as a rule
    per_gpu = curve.with_columns(gpus=pl.lit(8))
    marks = pl.DataFrame({"tier": ["hbm"], "capacity_gb": [100.0]})
    spec = C.hit_ratio_curve(per_gpu, configured=marks).to_dict()
    rows = pl.DataFrame(data_of(spec, 0))
    want = curve.sort("tier", "capacity_bytes")["capacity_bytes"] / 1e9 / 8
    assert rows["capacity_gb"].to_list() == pytest.approx(want.to_list())
    assert spec["layer"][1]["mark"]["type"] == "rule"
    assert data_of(spec, 1) == [{"tier": "hbm", "capacity_gb": 100.0}]
    assert "per GPU" in spec["title"]
    ts = db.query("SELECT * FROM sim_timeseries")
    spec = C.sim_timeseries(ts, max_points=5000).to_dict()
    assert spec["resolve"]["scale"]["y"] == "independent"
    assert len(data_of(spec)) == ts.height * 4
    # a long series is averaged into max_points bins; the mean is kept
    small = pl.DataFrame(data_of(C.sim_timeseries(ts, max_points=100).to_dict()))
    assert small.height == 100 * 4
    power = small.filter(pl.col("metric") == "power_w")["value"].mean()
    assert power == pytest.approx(ts["power_w"].mean(), rel=1e-9)


def test_frontier_draws_every_point_per_system():
    pts = pl.DataFrame(
        {
            "hw": ["gb200", "gb200", "b300"],
            "layout": ["a", "a", "b"],
            "decode_batch": [64, 8, 16],
            "tok_s_per_user": [20.0, 80.0, 40.0],
            "output_tok_s_per_gpu": [900.0, 200.0, 400.0],
        }
    )
    spec = C.frontier(pts).to_dict()
    assert spec["encoding"]["x"]["scale"]["type"] == "log"
    assert spec["encoding"]["color"]["field"] == "hw"
    assert pl.DataFrame(data_of(spec))["output_tok_s_per_gpu"].sum() == 1500.0


def test_missing_columns_say_which():
    with pytest.raises(ValueError, match=r"hit_ratio_curve needs columns \['hit_ratio'\]"):
        C.hit_ratio_curve(pl.DataFrame({"tier": ["hbm"], "capacity_bytes": [1.0]}))


def test_same_input_same_spec(db):
    stages = db.query("SELECT * FROM stages")
    assert C.stage_shares(stages, by="run").to_json() == C.stage_shares(stages, by="run").to_json()


@settings(max_examples=20, deadline=None)
@given(
    t=st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=40),
    bins=st.integers(1, 50),
)
def test_kv_link_binning_conserves_any_traffic(t, bins):
    n = len(t)
    calls = pl.DataFrame(
        {
            "run": ["r"] * n,
            "t_start_s": t,
            **{f"kv_{link}_bytes": list(range(n)) for link in C.LINKS},
        }
    )
    rows = pl.DataFrame(data_of(C.kv_link_bytes(calls, bins=bins).to_dict()))
    assert rows.height == 4 * bins
    assert rows.filter(pl.col("link") == "dram_to_hbm")["bytes"].sum() == sum(range(n))
