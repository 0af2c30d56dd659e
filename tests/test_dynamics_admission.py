"""Latency-feedback oscillation (SEED-15) and its damping by smoothed admission (SEED-16)."""

from __future__ import annotations

import numpy as np
import pytest

from agentx.dynamics.admission import AdmissionPolicy, bursty_calls, oscillation_index
from agentx.dynamics.engine import SimConfig, simulate
from agentx.dynamics.service import AnalyticService
from agentx.errors import UnknownNameError


def test_oscillation_index_on_known_series():
    t = np.arange(600.0)
    flat = oscillation_index(np.full(600, 5.0), 1.0)
    assert flat["amplitude"] == 0 and flat["swing"] == 0
    drift = oscillation_index(5 + t / 100, 1.0)  # slow trend is not an oscillation
    assert drift["swing"] < 0.01
    square = oscillation_index(np.where((t // 30) % 2 == 0, 0.0, 10.0), 1.0)
    assert square["swing"] == pytest.approx(0.9, abs=0.15)
    assert square["peak_period_s"] == pytest.approx(60.0, rel=0.05)
    assert square["peak_share"] > 0.5


def test_greedy_oscillates_and_smoothed_admission_damps_it():
    """Waves of agent sessions on a decode pool holding 1 M KV tokens (docs/dynamics.md).

    Greedy admits everything whenever the decode pool looks free; the flood lands when it is
    full again, so the backlog between admission and decode swings by hundreds of calls. The
    PI controller holds the backlog near its target; the token bucket spreads bursts.
    """
    calls = bursty_calls()
    svc = AnalyticService(kv_capacity_tokens=1e6)
    res = {
        p: simulate(calls, svc, svc, AdmissionPolicy(p), SimConfig()).summary
        for p in ("greedy", "token-bucket", "pi")
    }
    amp = {p: s["oscillation_backlog"]["amplitude"] for p, s in res.items()}
    for p, s in res.items():
        print(
            f"{p:13s} backlog amplitude {amp[p]:7.1f} calls  mean {s['oscillation_backlog']['mean']:6.1f}  "
            f"TTFT p99 {s['ttft_s_p99']:6.1f} s  TPOT p99 {s['tpot_s_p99']:.3f} s  preemptions {s['preemptions']}"
        )
    assert amp["greedy"] > 50  # a measurable swing, in calls
    assert amp["greedy"] >= 10 * amp["pi"]
    assert amp["greedy"] >= 3 * amp["token-bucket"]
    # the price of damping is waiting at the gate, not lost work
    assert res["pi"]["done"] == res["greedy"]["done"] == calls.height
    assert res["pi"]["tpot_s_p99"] < res["greedy"]["tpot_s_p99"]


def test_minute_level_batch_cap_lowers_step_time():
    """Worker reconfiguration once a minute: cap the decode batch so a step fits the TPOT target
    at the mean context last seen. Contexts move between updates, so the cap is approximate."""
    calls = bursty_calls(waves=6, per_wave=100)
    svc = AnalyticService(kv_capacity_tokens=4e6)
    free = simulate(calls, svc, svc, AdmissionPolicy("pi"), SimConfig()).timeseries
    capped = simulate(
        calls, svc, svc, AdmissionPolicy("pi", tpot_target_s=0.012), SimConfig()
    ).timeseries
    busy_free = free.filter(free["decode_batch_size"] > 0)["step_time_s"]
    busy_capped = capped.filter(capped["decode_batch_size"] > 0)["step_time_s"]
    print("step time p95 free", busy_free.quantile(0.95), "capped", busy_capped.quantile(0.95))
    assert busy_free.quantile(0.95) > 0.012
    assert busy_capped.quantile(0.95) < busy_free.quantile(0.95)
    assert capped["decode_batch_size"].max() < free["decode_batch_size"].max()


def test_unknown_policy_says_did_you_mean():
    with pytest.raises(
        UnknownNameError, match="unknown policy 'tokenbucket'; did you mean 'token-bucket'"
    ):
        AdmissionPolicy("tokenbucket")
