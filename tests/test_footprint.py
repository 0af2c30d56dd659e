"""HBM footprint per GPU: layout rules (NOTES.md (a) caveats), SEED-14 buffering, SEED-21."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import ServingConfig, load_catalog
from agentx.errors import CapacityError, UsageError
from agentx.replay.footprint import (
    check_fits,
    footprint_per_gpu,
    kv_capacity_bytes_per_gpu,
    max_resident_tokens,
)

CAT = load_catalog()


def cfg(system="h200", model="deepseek-v3", gpus=8, **kw) -> ServingConfig:
    kw.setdefault("tp", gpus)
    kw.setdefault("ep", gpus)
    return ServingConfig(system=CAT.system(system), model=CAT.model(model), gpus=gpus, **kw)


def test_deepseek_v3_fp8_weights_on_8_h200():
    m = CAT.model("deepseek-v3")
    fp = footprint_per_gpu(cfg(), 0)
    weights = fp.weights_bytes + fp.replicated_bytes
    # every parameter stored once across the 8 GPUs, plus the small router copies
    assert weights == pytest.approx(m.computed_total_params / 8, rel=0.002)
    assert 83e9 < weights < 85e9
    assert fp.replicated_bytes == pytest.approx(m.router_params)
    assert fp.capacity_bytes == 141e9 and fp.fits


def test_dp_attention_replicates_dense_weights_but_splits_kv():
    tp, dp = footprint_per_gpu(cfg(), 1e6), footprint_per_gpu(cfg(tp=1, dp_attention=True), 1e6)
    m = CAT.model("deepseek-v3")
    dense = m.attention_params + m.dense_ffn_params + m.shared_expert_params
    assert dp.replicated_bytes == pytest.approx(dense + m.router_params)
    # MLA latent: every TP rank holds all of it; data-parallel attention holds 1/8 per GPU
    assert tp.kv_bytes == pytest.approx(1e6 * m.kv_bytes_per_token("fp8"))
    assert dp.kv_bytes == pytest.approx(tp.kv_bytes / 8)


@pytest.mark.parametrize(("model", "tp", "split"), [
    ("qwen3-235b-a22b", 8, 4),  # 4 KV heads: TP 8 replicates each head twice
    ("qwen3-235b-a22b", 2, 2),
    ("llama3.1-70b", 8, 8),
    ("glm-4.6", 4, 4),
])  # fmt: skip
def test_gqa_kv_heads_split_up_to_num_kv_heads(model, tp, split):
    c = cfg(model=model, gpus=8, tp=tp, ep=8)
    per_gpu = footprint_per_gpu(c, 1e6).kv_bytes
    groups = 8 // tp  # attention groups, each serving its own share of the sequences
    assert per_gpu == pytest.approx(1e6 * c.kv_bytes_per_token / groups / split)


def test_pipeline_stages_split_layers():
    one = footprint_per_gpu(cfg(gpus=16, tp=8, ep=8), 1e6)
    two = footprint_per_gpu(cfg(gpus=16, tp=8, ep=8, pp=2), 1e6)
    # 61 layers over 2 stages: the fuller stage holds 31
    assert two.kv_bytes == pytest.approx(one.kv_bytes * 2 * 31 / 61)
    assert two.weights_bytes < 0.6 * one.weights_bytes


def test_double_buffer_and_total():
    fp = footprint_per_gpu(cfg(), 3e5)
    assert fp.prefetch_buffer_bytes == fp.kv_bytes > 0
    assert footprint_per_gpu(cfg(), 3e5, double_buffer=False).prefetch_buffer_bytes == 0
    rows = {r["component"]: r["bytes_per_gpu"] for r in fp.as_rows()}
    parts = [k for k in rows if k not in ("total", "hbm_capacity", "free")]
    assert rows["total"] == pytest.approx(sum(rows[k] for k in parts))
    assert rows["free"] == pytest.approx(rows["hbm_capacity"] - rows["total"])
    assert len(parts) == 7 and fp.activation_bytes > 0 and fp.routing_bytes > 0


def test_local_attention_windows_apply_per_sequence():
    c = cfg(model="gpt-oss-120b", tp=8, ep=8)
    flat = footprint_per_gpu(c, 1e6).kv_bytes
    windowed = footprint_per_gpu(c, 1e6, sequences=10).kv_bytes
    # 18 sliding layers hold 128 tokens per sequence: about half the all-layer figure
    assert windowed == pytest.approx(flat * (18 * 1e5 + 18 * 128) / (36 * 1e5))


def test_kv_capacity_and_max_resident_tokens():
    c = cfg()
    cap = kv_capacity_bytes_per_gpu(c)
    fixed = footprint_per_gpu(c, 0)
    assert cap == pytest.approx(141e9 - fixed.total_bytes)
    tokens = max_resident_tokens(c)
    full = footprint_per_gpu(c, tokens)
    assert full.free_bytes == pytest.approx(0, abs=1e3)
    assert max_resident_tokens(c, double_buffer=False) == pytest.approx(2 * tokens)


def test_check_fits_says_by_how_much():
    check_fits(cfg())
    with pytest.raises(CapacityError) as err:
        check_fits(cfg(gpus=4))
    fp = footprint_per_gpu(cfg(gpus=4), 0)
    short = -fp.free_bytes / 1e9
    assert str(err.value) == (
        "deepseek-v3 weights need 167.8 GB per GPU on 4 × h200 (tp 4, ep 4, fp8); with 2.9 GB of "
        f"activations and workspace, 141.0 GB of HBM is short by {short:.1f} GB"
    )
    assert 29 < short < 31


@pytest.mark.parametrize(("kw", "message"), [
    ({"tp": 3}, "tp 3 × pp 1 must divide the 8 GPUs"),
    ({"ep": 16}, "ep 16 × pp 1 exceeds the 8 GPUs"),
    ({"tp": 0}, "--tp must be at least 1, got 0"),
])  # fmt: skip
def test_impossible_layouts_are_usage_errors(kw, message):
    with pytest.raises(UsageError, match=f"^{message}$"):
        footprint_per_gpu(cfg(**kw), 0)


def test_seed_21_frontier_configs_stay_below_80_gb():
    """SEED-21: peak HBM per GPU below 80 GB for frontier MoE configs at 16-64 GPUs.

    Kimi K2 (FP8 weights and KV) with data-parallel attention on 32 and 64 GB200 GPUs, the
    instance holding 256 sequences of 32k tokens (a large agentic decode batch), double-buffered.
    On 16 GPUs the weights alone take most of that budget, so it is not claimed there.
    """
    for gpus in (32, 64):
        c = cfg("gb200", "kimi-k2", gpus=gpus, tp=1, ep=gpus, dp_attention=True)
        fp = footprint_per_gpu(c, 256 * 32_768, sequences=256)
        assert fp.total_bytes < 80e9, (gpus, fp.total_bytes)
    c16 = cfg("gb200", "kimi-k2", gpus=16, tp=1, ep=16, dp_attention=True)
    assert footprint_per_gpu(c16, 256 * 32_768).total_bytes > 80e9


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(sorted(CAT.models)),
    system=st.sampled_from(["h200", "b200", "gb200", "mi355x"]),
    gpus_log2=st.integers(3, 6),
    a=st.floats(0, 5e6),
    b=st.floats(0, 5e6),
)  # fmt: skip
def test_footprint_properties(model, system, gpus_log2, a, b):
    gpus = 2**gpus_log2
    c = cfg(system, model, gpus=gpus, tp=8, ep=min(gpus, CAT.model(model).n_routed_experts or 1))
    fa, fb, fab = (footprint_per_gpu(c, t) for t in (a, b, a + b))
    # KV is additive in resident tokens, everything else is fixed; all parts are >= 0
    assert fab.kv_bytes == pytest.approx(fa.kv_bytes + fb.kv_bytes, rel=1e-9, abs=1e-3)
    assert fab.weights_bytes == fa.weights_bytes and fab.total_bytes >= fa.total_bytes
    assert all(r["bytes_per_gpu"] >= 0 for r in fab.as_rows() if r["component"] != "free")
    # twice the GPUs (more expert ranks) never needs more weight bytes per GPU
    if c.model.is_moe and 2 * gpus <= c.model.n_routed_experts:
        bigger = footprint_per_gpu(cfg(system, model, gpus=2 * gpus, tp=8, ep=2 * gpus), a)
        assert bigger.weights_bytes <= fa.weights_bytes
