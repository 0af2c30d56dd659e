"""Closed forms of the four stages: invariants (Hypothesis), routing, energy calibration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.replay import make_config
from agentx.replay.energy import coefficients, power_w
from agentx.replay.stages import (
    STAGES,
    call_costs,
    decode_attention_calls,
    decode_attention_step,
    decode_experts_step,
    distinct_experts,
    fill_cost,
    pair_layers,
)

CAT = load_catalog()
CFGS = {
    "kimi-gb200": make_config(CAT, "gb200", "kimi-k2", gpus=32),
    "dsv3-h200-tp8": make_config(
        CAT, "h200", "deepseek-v3", gpus=8, tp=8, ep=8, dp_attention=False
    ),
    "gptoss-b200": make_config(CAT, "b200", "gpt-oss-120b", gpus=8),  # sliding-window layers
    "maverick-b300": make_config(CAT, "b300", "llama4-maverick", gpus=8),  # chunked layers
    "llama70b-mi355x": make_config(CAT, "mi355x", "llama3.1-70b", gpus=8, weight_precision="bf16"),
    # tensor-parallel experts (ep 1): every MoE layer all-reduces its output over tp ranks
    "qwen3-b200-tp4-ep1": make_config(
        CAT, "b200", "qwen3-235b-a22b", gpus=8, tp=4, ep=1, dp_attention=False
    ),
    # measured MoE kernel tables (--serving-engine): one expert group, and two groups
    "dsv3-h200-trt": make_config(
        CAT, "h200", "deepseek-v3", gpus=8, tp=8, ep=8, dp_attention=False, engine="trt"
    ),
    "dsv3-b200-sglang-2x": make_config(CAT, "b200", "deepseek-v3", gpus=16, ep=8, engine="sglang"),
}
cfg_names = st.sampled_from(sorted(CFGS))
tokens = st.integers(0, 400_000)
SETTINGS = settings(max_examples=60, deadline=None)


def _calls(n, p, m):
    return {
        "new_tokens": np.asarray(n, float),
        "reused_prefix_tokens": np.asarray(p, float),
        "output_tokens": np.asarray(m, float),
    }


@SETTINGS
@given(
    cfg_names, st.lists(st.tuples(tokens, tokens, st.integers(0, 20_000)), min_size=1, max_size=20)
)
def test_costs_non_negative_and_stage_split_sums_to_total(name, rows):
    n, p, m = (np.array(c, float) for c in zip(*rows, strict=True))
    df = call_costs(CFGS[name], _calls(n, p, m))
    assert df.height == len(rows)
    for c in df.columns:
        assert (df[c] >= 0).all(), c
        assert df[c].is_finite().all(), c
    total = sum(df[f"{s}_energy_j"] for s in STAGES)
    np.testing.assert_allclose(df["total_energy_j"], total, rtol=1e-12)
    # a call is a prefill or a midfill, never both
    assert ((df["prefill_flops"] == 0) | (df["midfill_flops"] == 0)).all()
    assert (df.filter(p == 0)["midfill_time_s"] == 0).all()


@SETTINGS
@given(
    cfg_names, tokens, tokens, st.integers(0, 20_000), st.integers(1, 5000), st.integers(1, 5000)
)
def test_monotone_in_input_and_output_tokens(name, n, p, m, dn, dm):
    cfg = CFGS[name]
    base = call_costs(cfg, _calls([n], [p], [m]))
    more_new = call_costs(cfg, _calls([n + dn], [p], [m]))
    more_out = call_costs(cfg, _calls([n], [p], [m + dm]))
    for col in ("total_energy_j", "decode_attention_hbm_bytes"):
        assert more_new[col][0] >= base[col][0] * (1 - 1e-12)
    fill = "prefill" if p == 0 else "midfill"
    for k in ("time_s", "energy_j", "flops", "hbm_bytes"):
        assert more_new[f"{fill}_{k}"][0] > base[f"{fill}_{k}"][0]
        for s in ("decode_attention", "decode_experts"):
            assert more_out[f"{s}_{k}"][0] > base[f"{s}_{k}"][0]
    # a longer cached prefix makes the fill and the decode reads dearer too
    longer = call_costs(cfg, _calls([n], [p + dn], [m]))
    for col in ("decode_attention_hbm_bytes", "decode_attention_energy_j"):
        assert longer[col][0] > base[col][0] or m == 0


@SETTINGS
@given(
    cfg_names,
    st.lists(st.tuples(tokens, tokens, st.integers(0, 20_000)), min_size=2, max_size=12),
    st.data(),
)
def test_energy_and_bytes_additive_over_calls(name, rows, data):
    """Pricing calls together equals pricing them apart: no call's cost depends on another's."""
    cfg = CFGS[name]
    cut = data.draw(st.integers(1, len(rows) - 1))
    n, p, m = (np.array(c, float) for c in zip(*rows, strict=True))
    whole = call_costs(cfg, _calls(n, p, m))
    a = call_costs(cfg, _calls(n[:cut], p[:cut], m[:cut]))
    b = call_costs(cfg, _calls(n[cut:], p[cut:], m[cut:]))
    for c in whole.columns:
        np.testing.assert_allclose(whole[c].sum(), a[c].sum() + b[c].sum(), rtol=1e-9)


@SETTINGS
@given(cfg_names, st.integers(0, 300_000), st.integers(0, 50_000), st.integers(0, 50_000))
def test_pairs_and_decode_split_over_steps(name, start, a, b):
    """m1 + m2 decode steps cost the first m1 steps plus m2 steps from the longer context."""
    cfg = CFGS[name]
    np.testing.assert_allclose(
        pair_layers(cfg, start, a + b),
        pair_layers(cfg, start, a) + pair_layers(cfg, start + a, b),
        rtol=1e-12,
    )
    whole = decode_attention_calls(cfg, a + b, start)
    parts = [decode_attention_calls(cfg, a, start), decode_attention_calls(cfg, b, start + a)]
    for k in ("flops", "hbm_bytes", "kv_read_bytes", "energy_j", "time_s"):
        np.testing.assert_allclose(whole[k], parts[0][k] + parts[1][k], rtol=1e-9, atol=1e-12)


def test_pair_layers_windows_match_brute_force():
    cfg = CFGS["gptoss-b200"]
    m = cfg.model
    w = m.local_window_tokens
    for start, count in ((1, 50), (100, 300), (5000, 7)):
        ctx = np.arange(start, start + count)
        brute = m.num_global_layers * ctx.sum() + m.num_local_layers * np.minimum(ctx, w).sum()
        assert pair_layers(cfg, start, count) == brute


def test_step_equals_sum_of_its_sequences():
    cfg = CFGS["dsv3-h200-tp8"]
    step = decode_attention_step(cfg, 64, 64 * 8192)
    one = decode_attention_calls(cfg, 1, 8192, 64)
    for k in ("flops", "hbm_bytes", "time_s", "energy_j"):
        np.testing.assert_allclose(step[k], 64 * one[k], rtol=1e-12)


def test_distinct_experts_uniform_matches_simulation():
    cfg = CFGS["dsv3-h200-tp8"]  # 256 experts, top-8
    rng = np.random.default_rng(0)
    for batch in (1, 8, 64, 512):
        picks = np.argpartition(rng.random((max(40, 20_000 // batch), batch, 256)), 8, axis=2)[
            :, :, :8
        ]
        sim = np.mean([np.unique(t).size for t in picks])
        assert distinct_experts(cfg, batch) == pytest.approx(sim, rel=0.02)
    assert distinct_experts(cfg, 1) == pytest.approx(8)


def test_skewed_routing_touches_fewer_experts():
    base = CFGS["kimi-gb200"]
    skew = make_config(CAT, "gb200", "kimi-k2", gpus=32, routing_skew=1.0)
    b = np.array([1, 4, 16, 64, 256, 4096])
    uni, sk = distinct_experts(base, b), distinct_experts(skew, b)
    assert np.all(sk <= uni + 1e-9) and np.all(sk[2:] < uni[2:])
    assert np.all(np.diff(sk) > 0) and sk[-1] <= base.model.n_routed_experts
    assert decode_experts_step(skew, 64).hbm_bytes < decode_experts_step(base, 64).hbm_bytes


def test_each_token_bears_one_over_batch_of_expert_weights():
    cfg = CFGS["kimi-gb200"]
    per_call = call_costs(cfg, _calls([100], [1000], [10]))
    step = decode_experts_step(cfg, cfg.decode_batch)
    assert per_call["decode_experts_hbm_bytes"][0] == pytest.approx(
        10 * step.hbm_bytes / cfg.decode_batch
    )
    # bigger batches amortise the expert weights: fewer bytes per token
    assert decode_experts_step(cfg, 256).hbm_bytes / 256 < step.hbm_bytes / 64


def test_compute_bound_gpu_draws_its_tdp():
    """Calibration: a fill that keeps one GPU compute-bound at the default efficiency ≈ TDP."""
    for hw in ("h200", "b200", "gb200", "mi355x"):
        cfg = make_config(CAT, hw, "llama3.1-70b", gpus=1, tp=1, weight_precision="fp8")
        f = fill_cost(cfg, 32_768, 0)
        p = power_w(cfg, f.energy_j, f.time_s)
        assert p == pytest.approx(cfg.chip.tdp_w, rel=0.08), hw
        # memory-bound decode draws well under TDP but at least the static power
        d = decode_experts_step(cfg, 1)
        pd = power_w(cfg, d.energy_j, d.time_s)
        assert coefficients(cfg).static_w <= pd < 0.7 * cfg.chip.tdp_w


def test_fp8_costs_about_half_the_energy_per_flop_of_bf16():
    c8 = coefficients(make_config(CAT, "h200", "llama3.1-70b", gpus=8, weight_precision="fp8"))
    c16 = coefficients(make_config(CAT, "h200", "llama3.1-70b", gpus=8, weight_precision="bf16"))
    assert 0.4 < c8.lin_j_per_flop / c16.lin_j_per_flop < 0.6


def test_scale_out_expert_parallel_is_slower_than_nvl72():
    """SEED-20: EP beyond an 8-GPU node crosses the scale-out network; NVL72 keeps it in-rack."""
    hgx = make_config(CAT, "b200", "kimi-k2", gpus=32)
    nvl = make_config(CAT, "gb200", "kimi-k2", gpus=32)
    f_hgx, f_nvl = fill_cost(hgx, 4096, 50_000), fill_cost(nvl, 4096, 50_000)
    assert f_hgx.scale_out_bytes > 0 and f_nvl.scale_out_bytes == 0
    assert f_hgx.time_s > 1.2 * f_nvl.time_s


@settings(max_examples=25, deadline=None)
@given(
    cfg_names, st.lists(st.tuples(tokens, tokens, st.integers(0, 20_000)), min_size=1, max_size=30)
)
def test_fused_kernel_matches_the_closed_forms(name, rows):
    """call_costs runs a compiled kernel; it must equal the numpy closed forms it fuses."""
    cfg = CFGS[name]
    n, p, m = (np.array(c, float) for c in zip(*rows, strict=True))
    got = call_costs(cfg, _calls(n, p, m))
    fill = fill_cost(cfg, n, p, batch_tokens=cfg.prefill_chunk_tokens)
    att = decode_attention_calls(cfg, m, n + p)
    b = cfg.decode_batch
    exp = decode_experts_step(cfg, b)
    is_pre = p == 0
    for k in ("time_s", "energy_j", "flops", "hbm_bytes", "comm_bytes"):
        np.testing.assert_allclose(got[f"prefill_{k}"], np.where(is_pre, fill[k], 0.0), rtol=1e-9)
        np.testing.assert_allclose(got[f"midfill_{k}"], np.where(is_pre, 0.0, fill[k]), rtol=1e-9)
        np.testing.assert_allclose(got[f"decode_attention_{k}"], att[k], rtol=1e-9)
        np.testing.assert_allclose(got[f"decode_experts_{k}"], m * exp[k] / b, rtol=1e-9)
    alone = fill_cost(cfg, n, p)["time_s"]
    reps = make_layout_replicas(cfg)
    np.testing.assert_allclose(got["ttft_s"], alone * reps, rtol=1e-6)
    step = decode_attention_calls(cfg, 1, n + p + np.maximum(m - 1, 0) / 2, b)["time_s"] * b
    np.testing.assert_allclose(got["decode_latency_s"], m * (step + exp["time_s"]), rtol=1e-9)


def make_layout_replicas(cfg) -> int:
    from agentx.replay.config import layout

    return layout(cfg).att_replicas


def test_default_efficiencies_are_cited_fractions():
    from agentx.replay.config import default_efficiencies

    for hw in ("h100", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "mi355x", "tpu7x"):
        eff = default_efficiencies(CAT.system(hw))
        for stage in STAGES:
            e = getattr(eff, stage)
            assert 0.3 < e.compute < 0.8 and 0.5 < e.memory <= 0.9, (hw, stage)
            assert "NOTES.md (d)" in e.source
    # MAMF-scaled: the chip with the weakest measured matmuls gets the lowest compute fraction
    assert (
        default_efficiencies(CAT.system("mi300x"), "bf16").prefill.compute
        < default_efficiencies(CAT.system("h200"), "bf16").prefill.compute
    )


def test_activation_traffic_matches_the_layer_graph():
    """DeepSeek-V3 TP8: two add+RMSNorms on all 8 ranks, SwiGLU, permute and combine, by hand."""
    cfg = CFGS["dsv3-h200-tp8"]
    h, i, k, b = 7168, 2048, 8, 2.0
    norms = 61 * 2 * 4 * h * b * 8
    dense = 3 * 3 * 18432 * b
    moe = 58 * b * (3 * i + k * (2 * h + 3 * i) + (k + 1) * h)
    pre = fill_cost(cfg, 8192, 0)
    assert pre.activation_bytes == pytest.approx(8192 * (norms + dense + moe), rel=1e-12)
    assert pre.activation_bytes / 1e9 == pytest.approx(684, rel=0.001)  # docs/validation.md
    assert pre.hbm_bytes == pytest.approx(
        pre.weight_bytes + pre.kv_read_bytes + pre.kv_write_bytes + pre.activation_bytes
    )
    # data-parallel attention keeps one copy of the residual stream: the norms shrink 8x
    dp = make_config(CAT, "h200", "deepseek-v3", gpus=8, ep=8)
    att = decode_attention_step(dp, 1, 1000).activation_bytes
    assert att == pytest.approx(61 * 2 * 4 * h * b / 2, rel=1e-12)


def test_fill_cost_broadcasts_batch_tokens():
    cfg = CFGS["kimi-gb200"]
    n = np.array([300.0, 5000.0, 20_000.0])
    p = np.array([0.0, 90_000.0, 10.0])
    batch = np.array([512.0, 2048.0, 8192.0])
    arr = fill_cost(cfg, n, p, batch)
    for j in range(3):
        one = fill_cost(cfg, n[j], p[j], float(batch[j]))
        for key, v in one.items():
            assert np.asarray(arr[key])[j] == pytest.approx(float(v), rel=1e-12), key


def test_parallel_kernel_is_byte_identical_to_the_serial_one():
    """Above PARALLEL_FROM_CALLS the kernel runs on all cores; columns and stage sums must not
    depend on it (fixed blocks summed in order) and must match the closed forms."""
    from agentx.replay import kernel

    cfg = CFGS["dsv3-h200-tp8"]
    rng = np.random.default_rng(3)
    size = kernel.PARALLEL_FROM_CALLS
    n = np.rint(rng.lognormal(6.6, 1.5, size))
    p = np.where(rng.random(size) < 0.05, 0.0, np.rint(rng.lognormal(11.5, 0.8, size)))
    m = np.rint(rng.lognormal(5.4, 1.1, size))
    q, dtab, et = kernel.params(cfg)
    z = np.zeros(0)
    cols, sums = kernel.price(q, dtab, et, n, p, m, z, z)
    serial = np.empty_like(cols)
    serial_sums = kernel._price_serial(q, dtab, et, n, p, m, z, z, serial, np.arange(kernel.N_ROWS))
    assert cols.tobytes() == serial.tobytes() and sums.tobytes() == serial_sums.tobytes()
    # a replay writing calls.parquet asks for the serial kernel (its writer needs the core)
    alone, alone_sums = kernel.price(q, dtab, et, n, p, m, z, z, parallel=False)
    assert alone.tobytes() == cols.tobytes() and alone_sums.tobytes() == sums.tobytes()
    assert kernel.kernel_for(size, parallel=False) is kernel._price_serial
    assert kernel.kernel_for(size) is kernel._price_parallel
    keep = np.array([20, 0, 21, 7])  # some rows, any order: those rows, the same sums
    some, some_sums = kernel.price(q, dtab, et, n, p, m, z, z, keep)
    assert some.tobytes() == cols[keep].tobytes() and some_sums.tobytes() == sums.tobytes()
    fill = fill_cost(cfg, n[:50], p[:50], batch_tokens=cfg.prefill_chunk_tokens)
    np.testing.assert_allclose(cols[0, :50] + cols[5, :50], fill["time_s"], rtol=1e-9)
