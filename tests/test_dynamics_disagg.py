"""Disaggregated vs aggregated on a real trace (SEED-17, SEED-20), and the Weka set at scale."""

from __future__ import annotations

import polars as pl
import pytest

from agentx.catalog import load_catalog
from agentx.dynamics.disagg import TABLE_COLUMNS, compare_pools, run_layout
from agentx.traces.io import read_trace


@pytest.fixture(scope="module")
def table(sample_trace):
    calls = read_trace(sample_trace).calls
    return compare_pools(calls, load_catalog(), ["b200", "gb200"], 16)


def test_table_per_system_and_layout(table):
    with pl.Config(tbl_cols=30, tbl_width_chars=250):
        print(table)
    assert tuple(table.columns) == TABLE_COLUMNS
    assert table.select("system", "pools").rows() == [
        ("b200", "disaggregated"),
        ("b200", "aggregated"),
        ("gb200", "disaggregated"),
        ("gb200", "aggregated"),
    ]
    assert (table["dropped"] == 0).all()


def test_kv_moves_only_when_disaggregated_and_nvl72_keeps_it_in_the_rack(table):
    d = table.filter(pl.col("pools") == "disaggregated")
    a = table.filter(pl.col("pools") == "aggregated")
    assert (a["kv_moved_bytes"] == 0).all() and (a["fill_share_of_steps"] > 0).all()
    assert (d["kv_moved_bytes"] > 0).all() and (d["fill_share_of_steps"] == 0).all()
    links = dict(d.select("system", "kv_link").rows())
    assert links == {"b200": "scale-out", "gb200": "scale-up"}
    # the same KV (tens of GB per long call, SEED-17) takes ~18x longer over 50 GB/s scale-out
    per_byte = dict(d.select("system", pl.col("kv_transfer_s") / pl.col("kv_moved_bytes")).rows())
    assert per_byte["b200"] / per_byte["gb200"] == pytest.approx(900 / 50, rel=0.01)
    assert d["kv_moved_bytes_per_call"].min() > 1e9


@pytest.mark.slow
def test_weka_set_time_driven_replay(weka_parquet):
    """All 603 Weka sessions (42,535 calls) on 16 GB200s: nothing lost, Little's law holds."""
    calls = read_trace(weka_parquet).calls
    res = run_layout(calls, load_catalog(), "gb200", "kimi-k2", 16, "disaggregated")
    s = res.summary
    print(
        {
            k: s[k]
            for k in (
                "done",
                "dropped",
                "preemptions",
                "decode_steps",
                "span_s",
                "ttft_s_p50",
                "tpot_s_p50",
                "littles_law",
            )
        }
    )
    assert s["done"] + s["dropped"] == calls.height and s["not_arrived"] == 0
    assert s["littles_law"]["rel_error"] < 0.03
    assert s["decode_steps"] > 1e6


def test_minute_level_pool_resizing_moves_gpus_to_the_busy_fill_pool():
    """SEED-16's minute time scale: a prefill-heavy load on 8 fill + 24 decode GB200s; the
    controller moves nodes to the fill pool and time to first token falls."""
    import numpy as np

    from agentx.dynamics.engine import SimConfig

    rng = np.random.default_rng(1)
    n = 900
    calls = pl.DataFrame({
        "session_id": [f"p{i:04d}" for i in range(n)], "call_index": np.zeros(n, np.int64),
        "t_start_s": np.sort(rng.uniform(0, 300, n)), "new_tokens": rng.integers(60_000, 140_000, n),
        "reused_prefix_tokens": np.zeros(n, np.int64), "output_tokens": rng.integers(20, 200, n),
        "think_time_s": np.zeros(n),
    })  # fmt: skip
    cat = load_catalog()
    runs = {
        resize: run_layout(calls, cat, "gb200", "kimi-k2", 32, "disaggregated", cfg=SimConfig(resize_pools=resize), fill_gpus=8)
        for resize in (False, True)
    }  # fmt: skip
    fixed, moved = runs[False].summary, runs[True].summary
    print(
        {
            k: (fixed[k], moved[k])
            for k in ("pool_resizes", "final_fill_gpus", "ttft_s_p50", "mean_utilisation")
        }
    )
    assert fixed["pool_resizes"] == 0 and fixed["final_fill_gpus"] == 8
    assert moved["pool_resizes"] >= 1 and moved["final_fill_gpus"] > 8
    assert moved["ttft_s_p50"] < 0.5 * fixed["ttft_s_p50"]
    ts = runs[True].timeseries
    assert ts["fill_gpus"].min() == 8 and ts["fill_gpus"].max() == moved["final_fill_gpus"]
    assert moved["done"] == fixed["done"] == n
