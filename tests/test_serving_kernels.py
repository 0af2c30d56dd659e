"""Measured kernel times in the serving model: MoE grouped GEMMs and AMD's MLA decode kernel."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.replay.config import make_config
from agentx.serving.iteration import iteration_cost, iteration_time_s
from agentx.serving.kernels import (
    _ENGINE_TABLE,
    _MS,
    MLA_DECODE_LATENCY,
    TOKENS,
    mla_decode_latency,
    mla_decode_s,
    moe_kernel,
    moe_layer_s,
)

CAT = load_catalog()
KERNELS = sorted(_MS)


def _dsr1(hw="h200", gpus=8, **kw):
    return make_config(CAT, hw, "deepseek-v3", gpus=gpus, tp=gpus, ep=gpus, **kw)


def test_tables_are_the_published_measurements():
    # AIConfigurator TRT-LLM 1.3.0rc20, H200, CUTLASS fp8_block, tp8 ep1, 8,192 tokens: 4.98 ms.
    assert moe_layer_s(("aic-trt-h200-fp8-cutlass", (8, 1)), 8192) == pytest.approx(4.98e-3)
    # Expert parallel on the same kernel: 1.2844 ms; SGLang's Triton kernel tp8: 2.2181 ms.
    assert moe_layer_s(("aic-trt-h200-fp8-cutlass", (1, 8)), 8192) == pytest.approx(1.2844e-3)
    assert moe_layer_s(("aic-sglang-h200-fp8-triton", (8, 1)), 8192) == pytest.approx(2.2181e-3)
    # aiter dsv3_fp4_tuned_fmoe.csv, cu_num 256, inter_dim 256, 8,192 tokens: 789.08 µs with
    # the shared expert fused in (top-9 of 257): 8/9 of it is routed.
    assert moe_layer_s(("aiter-mi355x-mxfp4", (8, 1)), 8192) == pytest.approx(789.08e-6 * 8 / 9)
    # AIConfigurator vLLM 0.24.0, B300, FlashInfer TRT-LLM-gen NVFP4 MoE, tp1 ep4, 8,192 tokens
    assert moe_layer_s(("aic-fi-b300-nvfp4-trtllm", (1, 4)), 8192) == pytest.approx(1.2781e-3)


@pytest.mark.parametrize("kernel", KERNELS)
def test_layer_time_follows_the_table_and_keeps_the_edge_rate(kernel):
    pts = [(n, t) for n, t in zip(TOKENS, _MS[kernel], strict=True) if t is not None]
    share = 8 / 9 if kernel[0].startswith("aiter") else 1.0
    for n, t in pts:
        assert moe_layer_s(kernel, n) == pytest.approx(share * t * 1e-3)
    # Between two measured points the time lies between them.
    for (n0, t0), (n1, t1) in zip(pts, pts[1:], strict=False):
        mid = moe_layer_s(kernel, (n0 + n1) / 2) / (share * 1e-3)
        assert min(t0, t1) <= mid <= max(t0, t1)
    # Outside the measured range the time scales with tokens (the nearest point's FLOP rate).
    assert moe_layer_s(kernel, 256) == pytest.approx(moe_layer_s(kernel, 1024) / 4)
    n_last = pts[-1][0]
    assert moe_layer_s(kernel, 2 * n_last) == pytest.approx(2 * moe_layer_s(kernel, n_last))


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (("trt", "h200", "deepseek-v3", "fp8", 8, 1), ("aic-trt-h200-fp8-cutlass", (8, 1))),
        (("trt", "b200", "deepseek-v3", "nvfp4", 8, 8), ("aic-trt-b200-nvfp4-trtllm", (1, 8))),
        (("sglang", "h200", "deepseek-v3", "fp8", 8, 1), ("aic-sglang-h200-fp8-triton", (8, 1))),
        (("atom", "mi355x", "deepseek-v3", "mxfp4", 4, 1), ("aiter-mi355x-mxfp4", (4, 1))),
        (("vllm", "h200", "kimi-k2", "int4", 8, 1), ("aic-vllm-h200-kimi-int4-marlin", (8, 1))),
        (("vllm", "mi355x", "kimi-k2", "mxfp4", 8, 1), ("aiter-mi355x-kimi-mxfp4", (8, 1))),
        # SGLang's flashinfer_trtllm MoE runner: FlashInfer's TRT-LLM-gen kernels (B200, B300)
        (("sglang", "b200", "deepseek-v3", "fp8", 4, 1), ("aic-fi-b200-fp8-trtllm", (4, 1))),
        (("sglang", "b300", "deepseek-v3", "fp8", 8, 1), ("aic-fi-b300-fp8-trtllm", (8, 1))),
        (("sglang", "b300", "deepseek-v3", "nvfp4", 4, 4), ("aic-fi-b300-nvfp4-trtllm", (1, 4))),
        # no measurement: vLLM NVFP4 (backend not pinned by its recipe), another model/engine
        # pair, MI300X, aiter FP8 expert parallel
        (("vllm", "b200", "deepseek-v3", "nvfp4", 4, 4), None),
        (("trt", "h200", "kimi-k2", "fp8", 8, 1), None),
        (("sglang", "mi300x", "deepseek-v3", "fp8", 8, 1), None),
        (("sglang", "mi355x", "deepseek-v3", "fp8", 8, 8), None),
    ],
)
def test_engine_and_layout_pick_the_measured_kernel(args, want):
    assert moe_kernel(*args) == want


def test_every_engine_table_has_a_measured_layout():
    tables = {t for t, _ in _MS}
    assert set(_ENGINE_TABLE.values()) <= tables


@settings(max_examples=40, deadline=None)
@given(kernel=st.sampled_from(KERNELS), batch=st.integers(1, 64), ctx=st.integers(1, 32768))
def test_decode_steps_stay_weight_bound(kernel, batch, ctx):
    """At decode batch sizes the measured kernels' compute time is below the weight read, so
    attaching a table leaves a decode step as the roofline prices it."""
    cfg = _dsr1("b200" if "b200" in kernel[0] else "h200")
    with_table = replace(cfg, extra={"moe_kernel": kernel})
    assert iteration_time_s(with_table, batch, ctx) == pytest.approx(
        iteration_time_s(cfg, batch, ctx), rel=1e-12
    )


@pytest.mark.parametrize("hw", ["h200", "b200"])
def test_tensor_sliced_experts_slow_an_8k_prefill(hw):
    """The measured tp8 ep1 layer is several times the roofline (N = 512, K = 256 per expert)."""
    cfg = _dsr1(hw)
    table = "aic-trt-h200-fp8-cutlass" if hw == "h200" else "aic-trt-b200-fp8-deepgemm"
    sliced = replace(cfg, extra={"moe_kernel": (table, (8, 1))})
    whole = replace(cfg, extra={"moe_kernel": (table, (1, 8))})
    t_roof, t_whole, t_sliced = (
        float(iteration_time_s(c, 0, 0, 8192, 0, 1)) for c in (cfg, whole, sliced)
    )
    assert t_roof < t_whole < t_sliced


def test_mla_decode_latency_is_the_aiter_figure_on_amd_only():
    t0, per_token = MLA_DECODE_LATENCY["mi355x"]
    # ROCm/aiter#3072, batch 1: 29.8 µs at 8,192 tokens and 52.5 µs at 23,333.
    assert t0 + per_token * 8192 == pytest.approx(29.8e-6, rel=0.01)
    assert t0 + per_token * 23333 == pytest.approx(52.5e-6, rel=0.01)
    assert mla_decode_latency("b200", "mla") is None
    assert mla_decode_latency("mi355x", "gqa") is None
    # 61 layers, less the 5 µs launch floor already charged per call.
    assert mla_decode_s((t0, per_token), 8192, 61, 5e-6) == pytest.approx(61 * 24.8e-6, rel=0.01)


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 256), ctx=st.integers(1, 65536), chunk=st.sampled_from([0, 2048]))
def test_mla_latency_only_ever_adds_time(batch, ctx, chunk):
    cfg = make_config(CAT, "mi355x", "deepseek-v3", gpus=8, tp=8, ep=8)
    amd = replace(cfg, extra={"mla_decode_latency": MLA_DECODE_LATENCY["mi355x"]})
    base = iteration_cost(cfg, batch, ctx, chunk)
    got = iteration_cost(amd, batch, ctx, chunk)
    assert got["time_s"] >= base["time_s"]
    lat = mla_decode_s(MLA_DECODE_LATENCY["mi355x"], ctx + 1, 61, 5e-6)
    assert got["attention_s"] == pytest.approx(max(float(base["attention_s"]), float(lat)))


@pytest.mark.parametrize(
    ("hw", "table", "aic_ms"),
    [("h200", "aic-trt-h200-fp8-cutlass", 316.0), ("b200", "aic-trt-b200-fp8-deepgemm", 147.0)],
)
def test_aiconfigurator_prefill_within_20_percent_with_the_measured_moe(hw, table, aic_ms):
    """The issue's AIConfigurator prefill points (8,192 tokens, DeepSeek-V3 FP8, TP8 attention
    × EP8 experts, docs/validation.md) priced by the serving iteration with TRT-LLM's measured
    MoE layer (balanced routing; AIConfigurator's own reference routes by a power law, which
    is slower). The replay closed forms, without the kernel table, stay at −33 % / −31 %."""
    cfg = make_config(CAT, hw, "deepseek-v3", gpus=8, tp=8, ep=8, dp_attention=False)
    cfg = replace(cfg, extra={"moe_kernel": (table, (1, 8))})
    got_ms = 1e3 * float(iteration_time_s(cfg, 0, 0, 8192, 0, 1))
    print(f"\n{hw} 8k prefill: {got_ms:.1f} ms vs AIConfigurator {aic_ms} ms")
    assert abs(got_ms / aic_ms - 1.0) <= 0.20
