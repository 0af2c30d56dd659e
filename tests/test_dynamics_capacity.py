"""Bandwidth vs capacity (SEED-12, SEED-13) on the real cost model."""

from __future__ import annotations

import polars as pl
import pytest

from agentx.catalog import load_catalog
from agentx.dynamics.capacity import capacity_curves, enough_capacity


@pytest.fixture(scope="module")
def curves():
    return capacity_curves(
        load_catalog(), "b200", "kimi-k2", gpus=16, context_tokens=32_768, tpot_slo_s=0.05
    )


def test_capacity_curve_flattens_past_enough(curves):
    e = enough_capacity(curves)
    print({k: round(v, 3) for k, v in e.items()})
    cap = curves.filter(pl.col("axis") == "capacity").sort("hbm_bytes_per_gpu")
    thr = cap["tokens_per_s_per_gpu"].to_numpy()
    assert (thr[1:] >= thr[:-1] - 1e-9).all()  # more memory never hurts
    assert thr[0] < 0.5 * thr.max()  # below "enough", capacity is what limits the batch
    assert e["slope_below_enough_per_gb"] > 0
    assert e["slope_above_enough_per_gb"] <= 0.05 * e["slope_below_enough_per_gb"]  # SEED-13: flat
    assert e["capacity_gain_enough_to_last"] <= 1.05
    chip_hbm = 180e9
    assert e["enough_hbm_bytes_per_gpu"] < 2 * chip_hbm


def test_bandwidth_keeps_paying_where_capacity_does_not(curves):
    """SEED-12: at the chip's capacity, doubling bandwidth still raises revenue per GPU."""
    e = enough_capacity(curves)
    bw = curves.filter(pl.col("axis") == "bandwidth").sort("hbm_bytes_per_s_per_gpu")
    thr = bw["tokens_per_s_per_gpu"].to_numpy()
    assert (thr[1:] >= thr[:-1] - 1e-9).all()
    assert e["bandwidth_gain_first_to_last"] > 3.0  # 0.25x → 2x bandwidth
    at_chip = bw.filter(
        (pl.col("hbm_bytes_per_s_per_gpu") - 8e12).abs()
        == (pl.col("hbm_bytes_per_s_per_gpu") - 8e12).abs().min()
    )
    doubled = bw["tokens_per_s_per_gpu"][-1]
    assert doubled > at_chip["tokens_per_s_per_gpu"][0] * 1.1
    assert e["capacity_gain_enough_to_last"] < doubled / at_chip["tokens_per_s_per_gpu"][0]
