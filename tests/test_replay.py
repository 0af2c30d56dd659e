"""replay_trace and ``agentx replay``: tables, sums, footprint, KV hook, CLI errors, determinism."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.analysis.derived import with_run_columns
from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.replay import make_config, replay_trace
from agentx.replay.replay import TRACE_COLUMNS, resident_context
from agentx.replay.stages import STAGES
from agentx.replay.timeline import arrivals
from agentx.traces.io import Trace, write_trace
from agentx.traces.synth import synthesize

CAT = load_catalog()
CFG = make_config(CAT, "gb200", "kimi-k2", gpus=32)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return synthesize(30, seed=7)


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory, trace):
    p = tmp_path_factory.mktemp("replay") / "t.parquet"
    write_trace(trace, p)
    return p


@pytest.fixture(scope="module")
def result(trace):
    return replay_trace(trace, CFG)


def test_calls_table_layout_and_stage_sums(result, trace):
    calls = result.calls
    assert calls.height == trace.calls.height
    assert calls.columns[: len(TRACE_COLUMNS)] == list(TRACE_COLUMNS)
    for s in STAGES:
        for k in ("time_s", "energy_j", "flops", "hbm_bytes", "comm_bytes"):
            assert f"{s}_{k}" in calls.columns
    assert calls.columns[-3:] == ["ttft_s", "decode_latency_s", "total_energy_j"]
    stages = result.stages
    assert stages["stage"].to_list() == list(STAGES)
    for s in STAGES:
        row = stages.filter(pl.col("stage") == s).row(0, named=True)
        for k in ("time_s", "energy_j", "flops", "hbm_bytes", "comm_bytes"):
            assert row[k] == pytest.approx(calls[f"{s}_{k}"].sum(), rel=1e-9)
        assert row["hbm_bytes"] == pytest.approx(
            row["weight_bytes"]
            + row["kv_read_bytes"]
            + row["kv_write_bytes"]
            + row["activation_bytes"],
            rel=1e-12,
        )
        assert row["arithmetic_intensity"] == pytest.approx(row["flops"] / row["hbm_bytes"])
    assert stages["time_share"].sum() == pytest.approx(1.0)
    assert stages["energy_share"].sum() == pytest.approx(1.0)
    s = result.summary
    assert s["total_energy_j"] == pytest.approx(calls["total_energy_j"].sum(), rel=1e-9)
    assert s["j_per_output_token"] == pytest.approx(
        s["total_energy_j"] / trace.calls["output_tokens"].sum()
    )
    assert set(s["stages"]) == set(STAGES)
    assert {"time_s", "energy_j", "flops", "hbm_bytes"} <= set(s["stages"]["midfill"])
    # fills with reuse are midfills; first calls are prefills
    first = calls.filter(pl.col("reused_prefix_tokens") == 0)
    assert (first["midfill_time_s"] == 0).all() and (
        first.filter(pl.col("new_tokens") > 0)["prefill_time_s"] > 0
    ).all()


def test_footprint_peak_is_the_footprint_total(result):
    fp = dict(zip(result.footprint["component"], result.footprint["bytes_per_gpu"], strict=True))
    assert result.summary["hbm_peak_bytes_per_gpu"] == fp["total"]
    assert fp["kv_resident"] > 0 and fp["weights_shard"] > 0
    assert result.summary["kv_resident_sequences"] <= CFG.decode_batch


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9), st.integers(0, 3)), max_size=40),
       st.integers(1, 4))  # fmt: skip
def test_arrivals_made_beforehand_give_the_same_peak(rows, batch):
    # the streaming replay sorts the arrivals while the chain kernel runs (cmd_replay): the
    # same events in the same order, ties included, as sorting them in the merge
    calls = pl.DataFrame(
        {
            "t_start_s": [float(t) for t, _, _ in rows],
            "input_tokens": [100 * c for _, c, _ in rows],
            "output_tokens": [7 * c for _, c, _ in rows],
        },
        schema={"t_start_s": pl.Float64, "input_tokens": pl.Int64, "output_tokens": pl.Int64},
    )
    busy = np.array([float(b) for _, _, b in rows])
    want = resident_context(calls, busy, batch)
    assert resident_context(calls, busy, batch, arrivals(calls)) == want


def test_resident_context_follows_the_timeline():
    calls = pl.DataFrame(
        {
            "t_start_s": [0.0, 10.0, 20.0],
            "input_tokens": [1000, 5000, 3000],
            "output_tokens": [0, 0, 0],
        }
    )
    # apart in time: the peak is the largest single context
    assert resident_context(calls, np.array([1.0, 1.0, 1.0]), 64) == (5000.0, 1.0)
    # overlapping: all three are resident together
    assert resident_context(calls, np.array([30.0, 30.0, 30.0]), 64) == (9000.0, 3.0)
    # a batch of 2 holds two of three at their mean context (6,000) until the first call
    # finishes at t=30; then the other two (8,000) are resident together
    assert resident_context(calls, np.array([30.0, 30.0, 30.0]), 2) == (8000.0, 2.0)
    assert resident_context(calls, np.array([30.0, 30.0, 5.0]), 2) == (6000.0, 2.0)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 8), st.integers(0, 5000)), max_size=40),
    st.integers(1, 8),
)
def test_resident_context_matches_an_event_by_event_walk(rows, batch):
    """The merge kernel equals walking every event in time order (finishes first at ties)."""
    t0 = np.array([r[0] for r in rows], float)
    busy = np.array([r[1] for r in rows], float)
    ctx = np.array([r[2] for r in rows], float)
    calls = pl.DataFrame({"t_start_s": t0, "input_tokens": ctx, "output_tokens": 0.0 * ctx})
    events = sorted(
        [(t0[i] + busy[i], 0, i, -1.0) for i in range(len(rows))]
        + [(t0[i], 1, i, 1.0) for i in range(len(rows))]
    )
    best, active, tokens = (0.0, 0.0), 0.0, 0.0
    for k, (_, _, i, sign) in enumerate(events):
        active += sign
        tokens += sign * ctx[i]
        resident = tokens * min(1.0, batch / max(active, 1.0)) if active > 0 else 0.0
        if k == 0 or resident > best[0]:
            best = (resident, min(active, batch))
    assert resident_context(calls, busy, batch) == best
    # the merge's way: half of the finish times sorted on another thread, halves merged
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert resident_context(calls, busy, batch, pool=pool) == best


@dataclass
class FakeKv:
    per_call: pl.DataFrame
    summary: dict


def test_kv_hook_recompute_and_transfer(trace, result):
    n = trace.calls.height
    prefix = trace.calls["reused_prefix_tokens"].to_numpy()
    lost = pl.DataFrame(
        {
            "kv_recompute_tokens": prefix,
            "kv_transfer_time_s": np.zeros(n),
            "kv_transfer_energy_j": np.zeros(n),
        }
    )
    r = replay_trace(trace, CFG, kv=FakeKv(lost, {"policy": "test"}))
    assert r.summary["kv_tiers"] == {"policy": "test"}
    assert r.calls["midfill_time_s"].sum() == 0  # every prefix recomputed: all fills are prefills
    assert r.summary["stages"]["prefill"]["flops"] > result.summary["stages"]["prefill"]["flops"]
    moved = pl.DataFrame(
        {
            "kv_recompute_tokens": np.zeros(n),
            "kv_transfer_time_s": np.full(n, 0.01),
            "kv_transfer_energy_j": np.full(n, 2.0),
        }
    )
    r2 = replay_trace(trace, CFG, kv=FakeKv(moved, {}))
    mid = (prefix > 0).sum()
    assert r2.summary["stages"]["midfill"]["time_s"] == pytest.approx(
        result.summary["stages"]["midfill"]["time_s"] + 0.01 * mid
    )
    assert r2.summary["stages"]["midfill"]["energy_j"] == pytest.approx(
        result.summary["stages"]["midfill"]["energy_j"] + 2.0 * mid
    )
    with pytest.raises(Exception, match="expected 30 per-call rows|per-call rows"):
        replay_trace(trace, CFG, kv=FakeKv(moved.head(3), {}))


def test_cli_writes_run_and_is_byte_identical(trace_path, tmp_path):
    runner = CliRunner()
    outs = []
    for name in ("a", "b"):
        res = runner.invoke(
            cli,
            [
                "replay",
                str(trace_path),
                "--hw",
                "gb200",
                "--gpus",
                "32",
                "-o",
                str(tmp_path / name),
                "-q",
            ],
        )
        assert res.exit_code == 0, res.output
        outs.append(tmp_path / name)
    assert "decode_experts" in res.output and "HBM peak per GPU" in res.output
    files = sorted(p.name for p in outs[0].iterdir())
    assert files == [
        "calls.parquet",
        "footprint.parquet",
        "run.json",
        "stages.parquet",
        "summary.json",
    ]
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    summary = json.loads((outs[0] / "summary.json").read_text())
    assert summary["hbm_peak_bytes_per_gpu"] > 0 and "j_per_output_token" in summary
    assert set(summary["stages"]["decode_attention"]) >= {
        "time_s",
        "energy_j",
        "flops",
        "hbm_bytes",
    }
    manifest = json.loads((outs[0] / "run.json").read_text())
    assert manifest["kind"] == "replay" and manifest["config"]["hw"] == "gb200"
    # the KV tiers ran by default: per-call outcomes in calls.parquet add up to the summary
    assert manifest["config"]["kv_tiers"] and "kv_tiers" in summary
    calls = pl.read_parquet(outs[0] / "calls.parquet")
    assert calls.columns[0] == "session_id"
    # HBM hits and new tokens are not stored: they follow from the other counts (agentx sql
    # derives them, as with_run_columns does here), because every reused token is a hit or
    # a recompute, which the --calls full file below shows call by call
    assert not {"kv_hbm_hit_tokens", "new_tokens"} & set(calls.columns)
    calls = with_run_columns(calls, summary)
    tiers = summary["kv_tiers"]
    for tier in ("hbm", "dram", "ssd"):
        assert calls[f"kv_{tier}_hit_tokens"].sum() == tiers["hits"][tier]["tokens"]
    assert calls["kv_recompute_tokens"].sum() == tiers["recompute"]["tokens"]
    res = runner.invoke(cli, ["replay", str(trace_path), "--hw", "gb200", "--gpus", "32", "-q",
                              "--calls", "full", "-o", str(tmp_path / "full")])  # fmt: skip
    assert res.exit_code == 0, res.output
    full = pl.read_parquet(tmp_path / "full" / "calls.parquet")
    hit_or_recompute = full.select(
        pl.sum_horizontal(
            "kv_hbm_hit_tokens", "kv_dram_hit_tokens", "kv_ssd_hit_tokens", "kv_recompute_tokens"
        )
    ).to_series()
    assert hit_or_recompute.equals(full["reused_prefix_tokens"], check_names=False)
    assert full["new_tokens"].equals(full["input_tokens"] - full["reused_prefix_tokens"])
    for c in ("kv_hbm_hit_tokens", "new_tokens"):
        assert calls[c].to_list() == full[c].to_list()
    # DRAM->SSD bytes are not stored: under write-through they are the HBM->DRAM bytes
    # (agentx sql derives them: tests/test_replay_stream.py)
    assert "kv_dram_to_ssd_bytes" not in calls.columns
    stored = {"dram_to_ssd": "hbm_to_dram"}
    for link in ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd"):
        got = calls[f"kv_{stored.get(link, link)}_bytes"].sum()
        assert got == pytest.approx(tiers["bytes"][link], rel=1e-9)


def test_cli_json(trace_path):
    res = CliRunner().invoke(
        cli, ["replay", str(trace_path), "--hw", "b300", "--model", "deepseek-v3", "--json"]
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)  # stderr may carry the over-context warning
    assert s["system"] == "b300" and s["model"] == "deepseek-v3" and s["gpus"] == 8


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--hw", "gb20"], 2, "Error: unknown hardware 'gb20'; did you mean 'gb200'?"),
        (
            ["--hw", "h200", "--model", "kimi-k3"],
            2,
            "Error: unknown model 'kimi-k3'; did you mean 'kimi-k2'?",
        ),
        (
            ["--hw", "h200", "--model", "llama3.1-70b", "--tp", "3"],
            2,
            "Error: --tp 3 does not divide the 8 GPUs of a pipeline stage",
        ),
        (
            ["--hw", "h200", "--gpus", "16", "--tp", "16", "--model", "llama3.1-70b"],
            2,
            "Error: --tp 16 exceeds the 8-GPU scale-up domain of h200",
        ),
        (
            ["--hw", "h200", "--routing-skew", "-1"],
            2,
            "Error: --routing-skew must be ≥ 0, got -1.0",
        ),
        (
            ["--hw", "b200", "--decode-batch", "0"],
            2,
            "Error: --decode-batch must be a positive integer, got 0",
        ),
        (
            ["--hw", "h200", "--model", "kimi-k2", "--ep", "512", "--gpus", "512"],
            2,
            "Error: --ep 512 exceeds the 384 routed experts of kimi-k2",
        ),
        (
            ["--hw", "h100", "--model", "deepseek-v3", "--gpus", "8"],
            1,
            "Error: deepseek-v3 weights need 98.9 GB per GPU on 8 × h100 (tp 1, ep 8, dp-attention, fp8); "
            "with 4.3 GB of activations and workspace, 80.0 GB of HBM is short by 23.2 GB",
        ),
    ],
)
def test_cli_errors(trace_path, args, code, message):
    res = CliRunner().invoke(cli, ["replay", str(trace_path), *args])
    assert res.exit_code == code
    assert res.output.strip().splitlines()[-1] == message


def test_cli_rejects_a_non_trace_file(tmp_path):
    plain = tmp_path / "plain.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(plain)
    res = CliRunner().invoke(cli, ["replay", str(plain), "--hw", "h200"])
    assert res.exit_code == 1
    assert (
        res.output.strip()
        == f"Error: {plain}: not an agentx trace (no 'agentx.schema_version' metadata); convert it with 'agentx import'"
    )
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    res = CliRunner().invoke(cli, ["replay", str(text), "--hw", "h200"])
    assert res.exit_code == 1 and res.output.startswith(
        f"Error: {text}: not a readable Parquet file"
    )


def test_cli_refuses_to_write_over_its_input(trace_path):
    res = CliRunner().invoke(
        cli, ["replay", str(trace_path), "--hw", "h200", "-o", str(trace_path)]
    )
    assert res.exit_code == 2 and res.output.strip().endswith(
        f"Directory '{trace_path}' is a file."
    )
    assert trace_path.stat().st_size > 0


def test_help_ends_with_example():
    res = CliRunner().invoke(cli, ["replay", "--help"])
    assert res.exit_code == 0
    assert res.output.strip().split("\n\n")[-1].strip().startswith("Example: agentx replay")


def test_metrics_page_documents_every_column(result):
    """docs/metrics.md names every column and summary key a replay writes."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text(
        encoding="utf-8"
    )
    stage_cols = {
        c.split("_", 2)[-1] if c.startswith("decode_") else c.split("_", 1)[1]
        for c in result.calls.columns
        if c.startswith(STAGES)
    }
    names = [c for c in result.calls.columns if not c.startswith(STAGES)] + sorted(stage_cols)
    names += result.stages.columns + list(result.summary)
    missing = [n for n in names if n not in text]
    assert not missing, f"docs/metrics.md lacks {missing}"


def test_raw_trace_gets_a_conversion_hint(tmp_path):
    raw = tmp_path / "trace_0001.json.gz"
    raw.write_bytes(b"\x1f\x8b not parquet")
    res = CliRunner().invoke(cli, ["replay", str(raw), "--hw", "h200"])
    assert res.exit_code == 1
    assert res.output.strip() == (
        f"Error: {raw}: a raw trace, not an agentx trace; "
        "convert it first with 'agentx import FORMAT SOURCE -o OUT.parquet'"
    )
