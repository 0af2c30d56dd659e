"""Engine settings of the InferenceX launch scripts and what they do to the closed loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.replay.config import make_config
from agentx.replay.footprint import max_resident_tokens
from agentx.serving.recipes import (
    EAGER_PREFILL_S_PER_LAYER,
    RUNTIME_MEMORY_BYTES,
    Recipe,
    engine_kv_tokens,
    recipe_for,
)
from agentx.serving.steady import steady_state

CAT = load_catalog()


def _dsr1(hw="b200", gpus=8, kv="fp8", **kw):
    return make_config(CAT, hw, "deepseek-v3", gpus=gpus, tp=gpus, ep=gpus, kv_precision=kv, **kw)


@pytest.mark.parametrize(
    ("args", "kw", "want"),
    [
        # dsr1_fp4_b200.sh: recv interval 30 at concurrency >= 16, else 10; 1 with DP attention
        (("sglang", "b200", "fp4", 8, False, 64), {}, Recipe("fp8", "static", 0.85, 30, 0, True)),
        (("sglang", "b200", "fp4", 8, False, 8), {}, Recipe("fp8", "static", 0.85, 10, 0, True)),
        (("sglang", "b200", "fp4", 8, True, 64), {}, Recipe("fp8", "static", 0.85, 1, 0, True)),
        # dsr1_fp8_b200.sh: TP4 runs mem-fraction 0.95 and interval 10 at any concurrency
        (("sglang", "b200", "fp8", 4, False, 32), {}, Recipe("fp8", "static", 0.95, 10, 0, True)),
        # dsr1_fp8_h200.sh leaves the KV dtype "auto" (BF16)
        (("sglang", "h200", "fp8", 8, False, 4), {}, Recipe("bf16", "static", 0.82, 1, 0, True)),
        # TRT-LLM attention DP: balance with timeout_iters 60 over the tp ranks
        (("trt", "b200", "fp8", 8, True, 64), {}, Recipe("fp8", "free", 0.8, 60, 8, True)),
        # piecewise CUDA graphs for prefill only from 2026-01-29, FP8 B200 at conc >= 64
        (
            ("trt", "b200", "fp8", 8, False, 64),
            {"measured_date": "2026-05-18"},
            Recipe("fp8", "free", 0.8, 1, 0, False),
        ),
        (
            ("trt", "b200", "fp8", 8, False, 64),
            {"measured_date": "2025-11-02"},
            Recipe("fp8", "free", 0.8, 1, 0, True),
        ),
        (("trt", "h200", "fp8", 8, False, 4), {}, Recipe("fp8", "free", 0.75, 1, 0, True)),
        (("vllm", "b200", "fp4", 4, False, 64), {}, Recipe("fp8", "utilization", 0.9)),
    ],
)
def test_recipe_settings_follow_the_launch_scripts(args, kw, want):
    assert recipe_for(*args, **kw) == want


def test_b200_runtime_memory_is_the_reported_183359_mib():
    assert RUNTIME_MEMORY_BYTES["b200"] == 183_359 * 1024**2
    assert RUNTIME_MEMORY_BYTES["b200"] > CAT.system("b200").chip.hbm_bytes


def test_engine_pool_rules():
    cfg = _dsr1()
    static = engine_kv_tokens(cfg, Recipe("fp8", "static", 0.85))
    assert engine_kv_tokens(cfg, Recipe("fp8", "static", 0.95)) > static > 0
    # "free" gives a fraction of what weights and activations leave; the full rule is the most
    full = engine_kv_tokens(cfg, Recipe("fp8", ""))
    assert engine_kv_tokens(cfg, Recipe("fp8", "free", 0.8)) == pytest.approx(0.8 * full)
    # without a runtime figure the default rule is agentx's own footprint
    h200 = _dsr1("h200")
    assert engine_kv_tokens(h200, Recipe("fp8", "")) == pytest.approx(
        max_resident_tokens(h200, double_buffer=False)
    )


def test_dsr1_fp8_on_four_b200_holds_32_clients_of_8k():
    """Row 8 of inferencex-points.csv ran 32 clients of 8k/1k on 4 × B200 (SGLang, FP8 KV,
    mem-fraction 0.95); the catalog's 180 GB left no room, the runtime's 192.3 GB does."""
    cfg = make_config(CAT, "b200", "deepseek-v3", gpus=4, tp=4, ep=4, kv_precision="fp8")
    tokens = engine_kv_tokens(cfg, recipe_for("sglang", "b200", "fp8", 4, False, 32))
    assert tokens >= 32 * (0.9 * 8192 + 0.9 * 1024)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 80), c=st.sampled_from([2, 8, 64]), floor=st.floats(0.0, 0.2))
def test_admission_cadence_and_eager_floor_only_delay_first_tokens(k, c, floor):
    cfg = _dsr1()
    base = steady_state(cfg, c, 1024, 1024)
    slow = steady_state(cfg, c, 1024, 1024, admission_interval_iters=k, prefill_floor_s=floor)
    assert float(slow["ttft_s"]) >= float(base["ttft_s"]) * (1 - 1e-9)
    assert float(slow["requests_per_s"]) <= float(base["requests_per_s"]) * (1 + 1e-9)


def test_cadence_waits_half_a_cycle_and_never_at_concurrency_one():
    cfg = _dsr1()
    one = steady_state(cfg, 1, 1024, 1024, admission_interval_iters=30)
    assert float(one["ttft_s"]) == pytest.approx(float(steady_state(cfg, 1, 1024, 1024)["ttft_s"]))
    r1 = steady_state(cfg, 64, 1024, 1024)
    r30 = steady_state(cfg, 64, 1024, 1024, admission_interval_iters=30)
    # ~ (30 − 1)/2 decode iterations more (the decode step itself barely moves)
    extra = float(r30["ttft_s"] - r1["ttft_s"])
    assert 10 * float(r1["tpot_s"]) < extra < 20 * float(r30["tpot_s"])


def test_eager_floor_is_the_measured_deepseek_forward():
    assert pytest.approx(82.6e-3) == EAGER_PREFILL_S_PER_LAYER * 61
    cfg = _dsr1()
    r = recipe_for("sglang", "b200", "fp4", 8, False, 1)
    assert r.prefill_floor_s(cfg.model.num_layers) == pytest.approx(82.6e-3)
    # one client: the first token needs at least one eager prefill pass
    ttft = steady_state(cfg, 1, 1024, 1024, prefill_floor_s=r.prefill_floor_s(61))["ttft_s"]
    assert float(ttft) > 82.6e-3
    assert np.all(np.isfinite(ttft))
