"""Measured attention-projection GEMMs (aiter's FP8 block-scale GEMM on MI300X) in the serving
iteration: the published records, the table's shape, where it applies, what it changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.replay.config import make_config
from agentx.serving.gemm_kernels import (
    _US,
    M_TOKENS,
    attn_gemm_kernel,
    attn_gemm_layer_s,
    layer_us,
)
from agentx.serving.iteration import iteration_cost, iteration_time_s
from agentx.serving.points import read_points
from agentx.serving.validate import deployment_for

CAT = load_catalog()
MI300X = "aiter-mi300x-fp8-blockscale-tp8"
POINTS = (
    Path(__file__).resolve().parents[1].parent / "shared/reference/measured/inferencex-points.csv"
)


def _mi300x(**extra):
    cfg = make_config(CAT, "mi300x", "deepseek-v3", gpus=8, tp=8, ep=8)
    return replace(cfg, extra={**cfg.extra, **extra})


def test_table_is_the_published_records():
    # a8w8_blockscale_tuned_gemm_ds_v3.csv, gfx942, cu_num 304, M = 8,192: fused q_a + kv_a
    # 291.6331 µs, q_b 106.0009, kv_b 66.7474, o_proj 268.976 -> 733.36 µs per layer.
    assert attn_gemm_layer_s(MI300X, 8192) == pytest.approx(733.3574e-6)
    assert attn_gemm_layer_s(MI300X, 16) == pytest.approx(30.6760e-6)
    # Less four 5 µs launch floors already charged by the iteration.
    assert attn_gemm_layer_s(MI300X, 16, 5e-6) == pytest.approx(10.6760e-6)
    assert set(_US[MI300X]) == {(2112, 7168), (3072, 1536), (4096, 512), (7168, 2048)}


def test_layer_time_is_linear_between_points_flat_below_and_keeps_the_edge_rate():
    t = layer_us(MI300X)
    for m, us in zip(M_TOKENS, t, strict=True):
        assert attn_gemm_layer_s(MI300X, m) == pytest.approx(1e-6 * us)
    pts = list(zip(M_TOKENS, t, strict=True))
    for (m0, t0), (m1, t1) in zip(pts, pts[1:], strict=False):
        assert attn_gemm_layer_s(MI300X, (m0 + m1) / 2) == pytest.approx(0.5e-6 * (t0 + t1))
    # At M <= 16 the records are flat (weight read and launch): fewer rows keep the 16-row time.
    assert attn_gemm_layer_s(MI300X, [1, 4, 16]) == pytest.approx([1e-6 * t[0]] * 3)
    last = M_TOKENS[-1]
    assert attn_gemm_layer_s(MI300X, 3 * last) == pytest.approx(3 * attn_gemm_layer_s(MI300X, last))


def test_every_measured_point_is_slower_than_the_roofline_math():
    """aiter's records reach 532-881 TFLOP/s at 1,024-16,384 rows, below the 1,143 TFLOP/s the
    roofline takes for MI300X FP8 (0.85 × MAMF fraction × peak)."""
    chip = CAT.systems["mi300x"].chip
    cfg = _mi300x()
    rate = chip.flops_per_s("fp8") * cfg.efficiencies.prefill.compute
    assert rate == pytest.approx(1143e12, rel=0.01)
    flops_per_row = 2.0 * sum(n * k for n, k in _US[MI300X])
    for m, us in zip(M_TOKENS, layer_us(MI300X), strict=True):
        assert m * flops_per_row / (1e-6 * us) < 0.8 * rate


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (("sglang", "mi300x", "deepseek-v3", "fp8", 8, False), MI300X),
        (("sglang", "mi300x", "deepseek-v3", "fp8", 8, True), None),  # other shapes per GPU
        (("sglang", "mi300x", "deepseek-v3", "fp8", 4, False), None),
        (("sglang", "mi355x", "deepseek-v3", "fp8", 8, False), None),
        (("vllm", "mi300x", "deepseek-v3", "fp8", 8, False), None),
        (("sglang", "mi300x", "deepseek-v3", "bf16", 8, False), None),
    ],
)
def test_only_the_measured_engine_and_layout_take_the_table(args, want):
    assert attn_gemm_kernel(*args) == want


def test_validate_attaches_the_table_to_the_mi300x_rows_only():
    points, _ = read_points(POINTS, CAT)
    got = {
        p.row
        for p in points
        if not p.disagg and "attn_gemm_kernel" in deployment_for(CAT, p).cfg.extra
    }
    assert got == {p.row for p in points if p.hardware == "mi300x" and not p.disagg}
    assert got == {27, 28, 29}


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 64), ctx=st.integers(1, 32768))
def test_decode_steps_stay_weight_bound(batch, ctx):
    """Less the launch floors already charged, the projections at decode sizes take less than
    the pass's weight read: a decode step is priced as before."""
    cfg = _mi300x()
    got = iteration_time_s(_mi300x(attn_gemm_kernel=MI300X), batch, ctx)
    assert got == pytest.approx(iteration_time_s(cfg, batch, ctx), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(0, 256), ctx=st.integers(1, 32768), chunk=st.integers(1, 65536))
def test_a_pass_with_prefill_is_never_faster_with_the_table(batch, ctx, chunk):
    base = iteration_cost(_mi300x(), batch, ctx, chunk)
    got = iteration_cost(_mi300x(attn_gemm_kernel=MI300X), batch, ctx, chunk)
    assert float(got["time_s"]) >= float(base["time_s"]) * (1 - 1e-12)
    assert float(got["flops"]) == pytest.approx(float(base["flops"]))


def test_an_8k_prefill_takes_the_measured_projection_time():
    """8,192 tokens through 61 layers: 61 × (733.36 − 4 × 5) µs of projections, against
    61 × 525 µs of roofline math."""
    cfg = _mi300x()
    base, got = (
        iteration_cost(c, 0, 0, 8192, 0, 1) for c in (cfg, _mi300x(attn_gemm_kernel=MI300X))
    )
    added = float(got["linear_s"]) - float(base["linear_s"])
    roof = 61 * 2 * 8192 * sum(n * k for n, k in _US[MI300X]) / 1143e12
    assert added == pytest.approx(61 * (733.3574e-6 - 20e-6) - roof, rel=0.02)
