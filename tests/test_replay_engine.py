"""``--serving-engine``: replay fills priced with the engine's measured routed-MoE layer.

The tables are agentx.serving.kernels'; the serving iteration (serving/iteration.py) reads them
the same way. Without an engine replay keeps the roofline (tests/test_stages.py, unchanged).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.errors import UnknownNameError
from agentx.replay import make_config
from agentx.replay.collectives import collective_floor_s, ffn_all_reduce_bytes
from agentx.replay.config import engine_note
from agentx.replay.stages import fill_cost, moe_pass_s
from agentx.serving import kernels
from agentx.serving.iteration import iteration_cost

CAT = load_catalog()
FILL_COLUMNS = {
    "prefill_time_s",
    "prefill_energy_j",
    "midfill_time_s",
    "midfill_energy_j",
    "ttft_s",
    "total_energy_j",
}


def _aic(hw: str, engine: str | None = "trt"):
    return make_config(
        CAT, hw, "deepseek-v3", gpus=8, tp=8, ep=8, dp_attention=False, engine=engine
    )


def test_engine_attaches_the_measured_table_for_the_replay_layout():
    assert _aic("h200").extra["moe_kernel"] == ("aic-trt-h200-fp8-cutlass", (1, 8))
    assert _aic("b200").extra["moe_kernel"] == ("aic-trt-b200-fp8-deepgemm", (1, 8))
    assert _aic("h200", None).extra == {} and engine_note(_aic("h200")) is None
    # 16 expert-parallel ranks: no table, the roofline stays and the note says so
    wide = make_config(CAT, "h200", "deepseek-v3", gpus=16, engine="trt")
    assert "moe_kernel" not in wide.extra
    assert engine_note(wide) == (
        "no measured trt MoE kernel for deepseek-v3 fp8 experts on h200 tp1 ep16: "
        "routed experts priced by the roofline"
    )


def test_unknown_engine_in_the_library():
    with pytest.raises(
        UnknownNameError, match=r"^unknown serving engine 'sglng'; did you mean 'sglang'\?$"
    ):
        make_config(CAT, "h200", "deepseek-v3", engine="sglng")


@pytest.mark.parametrize("hw", ["h200", "b200"])
@pytest.mark.parametrize("tokens", [1024.0, 3000.0, 8192.0])
def test_fill_cost_prices_routed_experts_as_iteration_cost(hw, tokens):
    """One compute-bound prefill pass (one chunk), one expert group: both models charge
    moe_layers × the measured layer time for the routed experts, and the same collectives:
    the all-reduce bytes of the TP-sharded dense FFN layers and the collectives' latency floor
    (agentx.replay.collectives). So fill_cost equals the serving iteration on the same pass
    (without the engine the iteration's roofline also pads expert rows to the MMA tile and
    paces the busiest EP rank, which the measured table holds). Below ~1,000 tokens the pass
    is weight-read bound, and the iteration reads expert weights at the decode-experts HBM
    efficiency (0.70), fill_cost at the prefill one (0.85).
    """
    cfg = _aic(hw)
    fill = fill_cost(cfg, tokens, 0.0)
    it = iteration_cost(cfg, 0.0, 0.0, tokens, 0.0, 1.0)
    assert float(fill.time_s) == pytest.approx(float(it["time_s"]), rel=1e-12)
    # ... and both hold the two collective terms, which are not zero here (TP8 over NVLink:
    # 3 dense layers' FFN all-reduce, 0.61 ms of collective latency per pass)
    ffn_ar = ffn_all_reduce_bytes(cfg, tokens)
    assert ffn_ar > 0 and collective_floor_s(cfg) > 0.5e-3
    assert float(fill.scale_up_bytes) == pytest.approx(float(it["comm_bytes"]), rel=1e-12)


def test_routed_seconds_follow_the_table_in_both_models(monkeypatch):
    """Doubling the measured layer time adds the same seconds to fill_cost and iteration_cost:
    moe_layers × layer time at 8,192 tokens (compute-bound, one pass)."""
    cfg = _aic("h200")
    name, split = cfg.extra["moe_kernel"]
    before = (
        float(fill_cost(cfg, 8192.0, 0.0).time_s),
        float(iteration_cost(cfg, 0, 0, 8192.0)["time_s"]),
    )
    monkeypatch.setitem(
        kernels._MS, (name, split), tuple(2 * t for t in kernels._MS[(name, split)])
    )
    after = (
        float(fill_cost(cfg, 8192.0, 0.0).time_s),
        float(iteration_cost(cfg, 0, 0, 8192.0)["time_s"]),
    )
    added = cfg.model.num_moe_layers * 1.2844e-3  # the table's 8,192-token H200 EP8 entry
    assert after[0] - before[0] == pytest.approx(added, rel=1e-9)
    assert after[1] - before[1] == pytest.approx(added, rel=1e-9)


def test_expert_groups_and_stages_share_the_pass():
    """Two expert groups each take half the pass at once; two pipeline stages each hold half
    the layers: instance-seconds as the roofline divides them."""
    one = make_config(CAT, "b200", "deepseek-v3", gpus=8, ep=8, engine="trt")
    two = make_config(CAT, "b200", "deepseek-v3", gpus=16, ep=8, engine="trt")
    pp2 = make_config(CAT, "b200", "deepseek-v3", gpus=16, ep=8, pp=2, engine="trt")
    layers = one.model.num_moe_layers
    assert float(moe_pass_s(one, 8192.0)) == pytest.approx(layers * 0.5018e-3, rel=1e-12)
    assert float(moe_pass_s(two, 8192.0)) == pytest.approx(layers * 0.3561e-3, rel=1e-12)
    assert float(moe_pass_s(pp2, 8192.0)) == pytest.approx(layers * 0.5018e-3 / 2, rel=1e-12)


ENGINE_CFGS = {
    "h200-trt-tp8": _aic("h200"),
    "b200-trt-dp8": make_config(CAT, "b200", "deepseek-v3", gpus=8, engine="trt"),
    "h200-sglang-dp16-ep8": make_config(CAT, "h200", "deepseek-v3", gpus=16, ep=8, engine="sglang"),
}


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(sorted(ENGINE_CFGS)),
    st.integers(0, 300_000),
    st.integers(0, 300_000),
    st.integers(1, 20_000),
    st.sampled_from([None, 512.0, 8192.0]),
)
def test_engine_fill_monotone_in_new_tokens_and_energy_non_negative(name, n, p, dn, batch):
    """Packed or alone: more new tokens never cost less time or energy (the tables used here
    take no less time per layer for more tokens); energy and time stay ≥ 0."""
    cfg = ENGINE_CFGS[name]
    base, more = (
        fill_cost(cfg, float(n), float(p), batch),
        fill_cost(cfg, float(n + dn), float(p), batch),
    )
    for k in ("time_s", "energy_j"):
        assert float(base[k]) >= 0 and np.isfinite(float(base[k]))
        assert float(more[k]) > float(base[k])
    # the measured layer is never faster than the roofline it replaces on these tables
    plain = fill_cost(make_config(CAT, cfg.system.name, "deepseek-v3", gpus=cfg.gpus, tp=cfg.tp, ep=cfg.ep,
                                  dp_attention=cfg.dp_attention), float(n), float(p), batch)  # fmt: skip
    assert float(base.time_s) >= float(plain.time_s) * (1 - 1e-12)
    assert float(base.flops) == float(plain.flops)


def _ok(command, sample, out, *extra):
    """``command`` on the sample, DeepSeek-V3 on H200, into run folder ``out``."""
    args = [command, str(sample), "--hw", "h200", "--model", "deepseek-v3", "-q", "-o", str(out)]
    res = CliRunner().invoke(cli, [*args, *extra])
    assert res.exit_code == 0, res.output
    return res


def _replay(sample, out, *extra):
    res = _ok("replay", sample, out, "--calls", "full", *extra)
    return pl.read_parquet(out / "calls.parquet"), res


def test_sample_replay_with_engine_changes_only_fills(sample_trace, tmp_path):
    plain, _ = _replay(sample_trace, tmp_path / "plain")
    trt, res = _replay(sample_trace, tmp_path / "trt", "--serving-engine", "trt")
    again, _ = _replay(sample_trace, tmp_path / "again", "--serving-engine", "trt")
    assert "note:" not in res.stderr  # h200 tp1 ep8 has a table
    assert trt.equals(again)  # deterministic run to run
    changed = {c for c in plain.columns if not plain[c].equals(trt[c])}
    assert changed == FILL_COLUMNS
    filled = (trt["new_tokens"] + trt["kv_recompute_tokens"]) > 0
    fill_s = pl.col("prefill_time_s") + pl.col("midfill_time_s")
    slower = trt.select(fill_s).to_series() - plain.select(fill_s).to_series()
    assert (slower.filter(~filled) == 0).all() and (slower.filter(filled) > 0).all()
    assert filled.sum() > 0


def test_cli_unknown_serving_engine(sample_trace):
    res = CliRunner().invoke(
        cli, ["replay", str(sample_trace), "--hw", "h200", "--serving-engine", "trtt"]
    )
    assert res.exit_code == 2
    assert res.output == "Error: unknown serving engine 'trtt'; did you mean 'trt'?\n"


def test_cli_says_once_when_no_table_fits(sample_trace):
    res = CliRunner().invoke(
        cli,
        ["replay", str(sample_trace), "--hw", "h200", "--model", "deepseek-v3", "--gpus", "16",
         "--serving-engine", "trt", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    note = (
        "note: no measured trt MoE kernel for deepseek-v3 fp8 experts on h200 tp1 ep16: "
        "routed experts priced by the roofline"
    )
    assert res.stderr.splitlines().count(note) == 1


def _simulate(sample, out, *extra):
    from agentx.runs import read_run

    _ok("simulate", sample, out, "--pools", "aggregated", *extra)
    return read_run(out)


def test_simulate_with_engine_prices_fills_with_the_measured_kernel(sample_trace, tmp_path):
    """``simulate --serving-engine`` reaches the time-stepped model's fill costs (the same
    ``fill_cost``): TRT-LLM's measured MoE layer is never faster than the roofline on these
    tables, so the fill pool is busy longer and the median first token comes later (single
    calls may still start sooner: batching and queues shift); the run records the engine;
    without it run.json has no engine key, as before."""
    plain = _simulate(sample_trace, tmp_path / "plain")
    trt = _simulate(sample_trace, tmp_path / "trt", "--serving-engine", "trt")
    assert "serving_engine" not in plain.manifest["config"]
    assert trt.manifest["config"]["serving_engine"] == "trt"
    assert trt.summary()["fill_busy_s"] > plain.summary()["fill_busy_s"] > 0
    a, b = plain.table("sim_calls"), trt.table("sim_calls")
    assert a.height == b.height > 0
    assert b["ttft_s"].median() > a["ttft_s"].median()


def test_simulate_unknown_serving_engine(sample_trace, tmp_path):
    res = CliRunner().invoke(
        cli,
        ["simulate", str(sample_trace), "--hw", "h200", "--serving-engine", "trtt", "-o",
         str(tmp_path / "o")],
    )  # fmt: skip
    assert res.exit_code == 2
    assert res.output == "Error: unknown serving engine 'trtt'; did you mean 'trt'?\n"
    assert not (tmp_path / "o").exists()
