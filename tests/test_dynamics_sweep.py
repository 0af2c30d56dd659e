"""Operating-point sweeps on the real cost model, and the seed study's SEED-19/20/21 checks."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from agentx.catalog import load_catalog
from agentx.dynamics.sweep import COLUMNS, load_scenario, sweep
from agentx.dynamics.verdicts import seed_verdicts
from agentx.errors import InputError, UnknownNameError


@pytest.fixture(scope="module")
def seed_sweep():
    sc, _ = load_scenario("seed-study")
    df, skipped = sweep(load_catalog(), sc["systems"], sc["gpus"], sc["model"])
    return df, skipped, sc


def test_bundled_scenario_is_the_seed_study(seed_sweep):
    df, skipped, sc = seed_sweep
    assert (
        sc["systems"] == ["b200", "b300", "gb200"]
        and sc["gpus"] == [16, 32, 64]
        and sc["model"] == "kimi-k2"
    )
    assert skipped == []
    assert tuple(df.columns) == COLUMNS
    assert set(df["stage"].unique()) == {"prefill", "midfill", "decode"}
    assert df.group_by("system", "gpus").len().height == 9
    assert (
        df.filter(pl.col("stage") == "decode")["ttft_s"].null_count()
        == df.filter(pl.col("stage") == "decode").height
    )
    num = df.select(
        pl.col(
            "per_user_tokens_per_s",
            "tokens_per_s_per_gpu",
            "energy_per_token_j",
            "hbm_peak_bytes_per_gpu",
        )
    )
    assert (num.to_numpy() > 0).all()


def test_step_time_grows_with_batch_and_context_throughput_rises_then_saturates(seed_sweep):
    df = seed_sweep[0].filter(pl.col("stage") == "decode")
    for (system, gpus, ctx), g in df.group_by("system", "gpus", "context_tokens"):
        g = g.sort("batch_size")
        step = g["step_time_s"].to_numpy()
        assert (np.diff(step) > 0).all(), (system, gpus, ctx)
        thr = g["tokens_per_s_per_gpu"].to_numpy()
        assert thr[g["batch_size"] == 64][0] > 10 * thr[0]  # batching pays while memory-bound
        gain = thr[1:] / thr[:-1]
        assert gain[-1] < gain[0]  # and pays less and less towards the compute/bandwidth bound
    for (system, gpus, b), g in df.group_by("system", "gpus", "batch_size"):
        assert (np.diff(g.sort("context_tokens")["step_time_s"].to_numpy()) > 0).all(), (
            system,
            gpus,
            b,
        )


def test_fill_ttft_grows_with_batch_while_throughput_rises(seed_sweep):
    df = seed_sweep[0].filter(pl.col("stage") == "midfill")
    for _, g in df.group_by("system", "gpus", "context_tokens", "new_tokens"):
        g = g.sort("batch_size")
        assert (np.diff(g["ttft_s"].to_numpy()) > 0).all()
        assert g["tokens_per_s_per_gpu"][-1] >= g["tokens_per_s_per_gpu"][0]


def test_seed_19_20_21_as_the_model_computes_them(seed_sweep):
    """Prints every verdict with its numbers; asserts what the model computes, agreeing or not."""
    v = seed_verdicts(seed_sweep[0])
    verdict = v["verdict"]
    s19 = verdict["seed19_mean_lead_share"]
    print(
        f"\nSEED-19 decode: GB200 leads (> 1 %) on {s19:.0%} of the common interactivity range, "
        f"leads or ties on {verdict['seed19_mean_lead_or_tie_share']:.0%}"
    )
    for r in v["seed20_midfill"]:
        print(
            f"SEED-20 midfill {r['gpus']} GPUs: lowest TTFT {r['lowest_ttft_system']} {r['min_ttft_s']}; "
            f"B300/GB200 best throughput {r['b300_over_gb200_throughput']:.2f}"
        )
    h = v["seed21_hbm"]
    print(
        f"SEED-21: {h['share_below_80gb']:.0%} of {h['frontier_points']} frontier points below 80 GB/GPU (max {h['max_gb']:.0f} GB)"
    )
    # The model agrees with SEED-19, SEED-20 (low-TTFT end) and SEED-21 ...
    assert verdict["seed19_gb200_leads_decode_most_of_curve"] and s19 > 0.5
    assert verdict["seed19_mean_lead_or_tie_share"] == 1.0  # never behind
    assert verdict["seed20_gb200_lowest_midfill_ttft"]
    assert verdict["seed21_peak_hbm_mostly_below_80gb"]
    # ... and disagrees with "B300 catches up at the throughput end": B300's 8-GPU NVLink domain
    # pushes expert-parallel traffic of 16-64 GPUs over 100 GB/s scale-out, GB200's stays in the rack.
    ratios = [r["b300_over_gb200_throughput"] for r in v["seed20_midfill"]]
    print("SEED-20 throughput end DISAGREES: B300/GB200 =", [round(x, 2) for x in ratios])
    assert not verdict["seed20_b300_catches_up_at_throughput_end"]
    assert all(0 < x < 0.95 for x in ratios)


def test_scenario_errors_name_file_and_field(tmp_path):
    with pytest.raises(
        UnknownNameError, match="unknown scenario 'seed-stdy'; did you mean 'seed-study'"
    ):
        load_scenario("seed-stdy")
    bad = tmp_path / "bad.toml"
    bad.write_text("[scenario\n")
    with pytest.raises(InputError, match=rf"^{bad}: expected TOML"):
        load_scenario(str(bad))
    nogpus = tmp_path / "nogpus.toml"
    nogpus.write_text('[scenario]\nmodel = "kimi-k2"\nsystems = ["b200"]\n')
    with pytest.raises(
        InputError, match=rf"^{nogpus}: field 'scenario.gpus': expected a non-empty list"
    ):
        load_scenario(str(nogpus))
