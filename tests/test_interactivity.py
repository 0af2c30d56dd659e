"""Decode batch from a target interactivity (issue 3 part 2)."""

from __future__ import annotations

import json
from contextlib import nullcontext

import numpy as np
import pytest
from click.testing import CliRunner

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.errors import UsageError
from agentx.replay.config import make_config
from agentx.replay.footprint import max_resident_tokens
from agentx.replay.interactivity import batch_for_interactivity, decode_step_time_s

CAT = load_catalog()


@pytest.mark.parametrize("hw", ["b200", "b300", "gb200"])
def test_chosen_batch_is_the_largest_that_meets_the_target_and_fits(hw):
    cfg = make_config(CAT, hw, "kimi-k2", gpus=32)
    ctx = 100_000.0
    # 20: HBM binds; 50 and 60: interactivity binds. (32 B200/B300 GPUs span four 8-GPU
    # nodes: EP32 dispatch/combine crosses the network, ~10 ms of collective latency per
    # decode step, so one sequence decodes at ~66 tokens/s there and 100 is out of reach.)
    limits = []
    for target in (20.0, 50.0, 60.0):
        b, rec = batch_for_interactivity(cfg, target, ctx)
        limits.append(rec["limited_by"])
        step = decode_step_time_s(cfg, np.array([b, b + 1]), ctx)
        assert step[0] <= 1 / target
        next_fits = (b + 1) * ctx <= max_resident_tokens(cfg)
        assert step[1] > 1 / target or not next_fits
        assert rec["limited_by"] == ("hbm" if step[1] <= 1 / target else "interactivity")
        assert rec["tokens_per_s_per_user"] >= target
    assert limits == ["hbm", "interactivity", "interactivity"]
    with pytest.raises(UsageError, match="out of reach") if hw != "gb200" else nullcontext():
        batch_for_interactivity(cfg, 100.0, ctx)


def test_faster_users_mean_smaller_batches():
    cfg = make_config(CAT, "gb200", "kimi-k2", gpus=32)
    batches = [batch_for_interactivity(cfg, t, 60_000)[0] for t in (10, 30, 60, 90, 120)]
    assert batches == sorted(batches, reverse=True) and batches[0] > batches[-1]


def test_unreachable_target_is_a_usage_error():
    cfg = make_config(CAT, "h200", "deepseek-v3", gpus=8)
    with pytest.raises(UsageError, match="out of reach: one sequence at 100,000 tokens decodes at"):
        batch_for_interactivity(cfg, 1e6, 100_000)


def test_cli_interactivity_sets_the_batch(sample_trace):
    res = CliRunner().invoke(
        cli, ["replay", str(sample_trace), "--hw", "gb200", "--interactivity", "50", "--json"]
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)  # stderr carries the over-context warning
    assert s["decode_batch"] == s["interactivity"]["decode_batch"] > 64
    assert s["interactivity"]["tokens_per_s_per_user"] >= 50


def test_cli_refuses_both_batch_and_interactivity(sample_trace):
    res = CliRunner().invoke(
        cli,
        [
            "replay",
            str(sample_trace),
            "--hw",
            "gb200",
            "--interactivity",
            "50",
            "--decode-batch",
            "8",
        ],
    )
    assert res.exit_code == 2
    assert (
        res.output.strip().splitlines()[-1]
        == "Error: give --decode-batch or --interactivity, not both"
    )
