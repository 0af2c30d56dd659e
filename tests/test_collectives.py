"""The collectives replay and the serving iteration both charge (agentx/replay/collectives.py):
the FFN-output all-reduce bytes and the collectives' latency floor per forward pass.

Properties over layouts (system × model × GPUs × TP × EP × attention mode): both terms are
≥ 0 and vanish on one GPU, they only ever add time to a replay stage, replay's per-pass floors
are the serving iteration's, and stage time stays monotone in tokens with them.
"""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.errors import AgentxError
from agentx.replay import make_config
from agentx.replay import stages as stages_mod
from agentx.replay.collectives import (
    collective_floor_s,
    collective_floors_s,
    ffn_all_reduce_bytes,
    ffn_all_reduce_layers,
)
from agentx.replay.stages import (
    _floor_per_pass,
    _launch_floors_per_pass,
    decode_attention_step,
    decode_experts_step,
    fill_cost,
)
from agentx.serving.iteration import iteration_cost

CAT = load_catalog()
SETTINGS = settings(max_examples=60, deadline=None)
layouts = st.tuples(
    st.sampled_from(["h200", "b200", "gb200"]),
    st.sampled_from(["deepseek-v3", "kimi-k2", "llama3.1-70b", "gpt-oss-120b", "qwen3-235b-a22b"]),
    st.sampled_from([1, 2, 4, 8, 16, 32]),
    st.sampled_from([1, 2, 4, 8]),
    st.booleans(),  # ep = all GPUs, or 1 (tensor-parallel experts)
    st.booleans(),  # data-parallel attention
)


@functools.cache
def _cfg(hw, model, gpus, tp, wide_ep, dp_attention):
    try:
        return make_config(
            CAT, hw, model, gpus=gpus, tp=min(tp, gpus), ep=gpus if wide_ep else 1,
            dp_attention=dp_attention,
        )  # fmt: skip
    except AgentxError:
        return None


def _layout(args):
    cfg = _cfg(*args)
    assume(cfg is not None)
    return cfg


def _without_collectives():
    """Replay's closed forms with both terms taken out (what they charged before issue 9)."""
    return mock.patch.multiple(
        stages_mod,
        collective_floors_s=lambda cfg: (0.0, 0.0),
        ffn_all_reduce_bytes=lambda cfg, tokens: 0.0 * np.asarray(tokens, dtype=np.float64),
    )


def _times(cfg, n, p, b, ctx):
    return np.array([
        float(fill_cost(cfg, n, p).time_s),
        float(fill_cost(cfg, n, p, 8192.0).time_s),
        float(decode_attention_step(cfg, b, b * ctx).time_s),
        float(decode_experts_step(cfg, b).time_s),
    ])  # fmt: skip


@SETTINGS
@given(layouts, st.floats(0, 1e6))
def test_terms_non_negative_split_sums_and_zero_on_one_gpu(args, tokens):
    cfg = _layout(args)
    att, ffn = collective_floors_s(cfg)
    assert att >= 0 and ffn >= 0
    assert att + ffn == pytest.approx(collective_floor_s(cfg), rel=1e-15, abs=0)
    ar = float(ffn_all_reduce_bytes(cfg, tokens))
    assert ar >= 0
    assert ar == pytest.approx(tokens * float(ffn_all_reduce_bytes(cfg, 1.0)), rel=1e-12)
    if cfg.tp == 1:
        assert ar == 0 and ffn_all_reduce_layers(cfg) == 0
    if cfg.gpus == 1:
        assert (att, ffn, ar) == (0.0, 0.0, 0.0)


@SETTINGS
@given(layouts, st.integers(1, 512), st.floats(0, 2e5))
def test_replay_floors_are_the_serving_iterations(args, batch, ctx):
    """A decode step pays the same per-pass floors in replay (both stages) as in the serving
    iteration: launch floors plus the collectives' latency (pp = 1, so no stage split)."""
    cfg = _layout(args)
    fa, ff = _floor_per_pass(cfg)
    it = float(iteration_cost(cfg, float(batch), ctx)["floor_s"])
    assert fa + ff == pytest.approx(it, rel=1e-12)
    assert fa + ff == pytest.approx(sum(_launch_floors_per_pass(cfg)) + collective_floor_s(cfg))


@SETTINGS
@given(layouts, st.integers(0, 300_000), st.integers(0, 300_000), st.integers(1, 512))
def test_collectives_only_add_time_and_nothing_on_one_gpu(args, n, p, b):
    cfg = _layout(args)
    ctx = 4096.0
    with_terms = _times(cfg, float(n), float(p), float(b), ctx)
    with _without_collectives():
        without = _times(cfg, float(n), float(p), float(b), ctx)
    assert (with_terms >= without * (1 - 1e-12)).all()
    if cfg.gpus == 1:
        assert (with_terms == without).all()
    if n > 0 and collective_floor_s(cfg) > 0:  # a fill pass pays its collectives' latency
        assert with_terms[0] > without[0]


@SETTINGS
@given(layouts, st.integers(0, 300_000), st.integers(0, 300_000), st.integers(1, 20_000))
def test_stage_time_monotone_in_tokens(args, n, p, dn):
    cfg = _layout(args)
    for batch in (None, 8192.0):
        a, b = fill_cost(cfg, float(n), float(p), batch), fill_cost(cfg, n + dn, float(p), batch)
        assert float(b.time_s) >= float(a.time_s) * (1 - 1e-12)
    small, big = 1.0 + n % 256, 1.0 + n % 256 + dn % 256
    for step in (decode_experts_step, lambda c, x: decode_attention_step(c, x, x * 4096.0)):
        assert float(step(cfg, big).time_s) >= float(step(cfg, small).time_s) * (1 - 1e-12)


def test_default_gb200_decode_step_pays_the_ep32_dispatch_latency():
    """Kimi K2 on 32 × GB200 (EP32 inside NVL72): NCCL's model gives 3.6 + 32 × 0.47 µs per
    dispatch or combine, 13.64 µs above the 5 µs kernel floor, × 2 × 60 MoE layers = 1.64 ms
    per step; a decode-experts step of one token costs exactly that much more than before."""
    cfg = make_config(CAT, "gb200", "kimi-k2", gpus=32)
    assert collective_floors_s(cfg) == pytest.approx((0.0, 2 * 60 * 13.64e-6), rel=1e-9)
    with _without_collectives():
        before = float(decode_experts_step(cfg, 1.0).time_s)
    assert float(decode_experts_step(cfg, 1.0).time_s) - before == pytest.approx(1.6368e-3)
