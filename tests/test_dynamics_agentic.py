"""Closed-loop agentic simulation with a prefix cache: consistency with the trace and with
agentx.kv's exact LRU stack, conservation, Little's law, pool bounds, offload, bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.dynamics import agentic as A
from agentx.errors import CapacityError, UsageError
from agentx.kv.blocks import build_blocks
from agentx.kv.policies import HBM, outcome
from agentx.replay.config import make_config
from agentx.testing import trace_objects
from agentx.traces.io import Trace, read_trace

SAMPLE = Path(__file__).parent.parent / "traces" / "sample" / "weka-sample.parquet"
CFG = make_config(
    load_catalog([]), hw="b200", model="deepseek-v3", gpus=8, tp=8, pools="aggregated"
)
INST = A.instance_for(CFG)
FAST = settings(max_examples=25, suppress_health_check=list(HealthCheck))


def _sequential(tr: Trace) -> Trace:
    """Sessions one after another (time order = the simulator's session order)."""
    c = (
        tr.calls.with_columns(pl.col("t_start_s").min().over("session_id").alias("_t0"))
        .sort("_t0", "session_id", "call_index")
        .with_row_index("_k")
        .with_columns(t_start_s=pl.col("_k").cast(pl.Float64))
        .drop("_k", "_t0")
    )
    return Trace(c, tr.meta)


def _accounted(r: A.AgenticResult) -> None:
    c = r.calls
    assert c.select(pl.struct("session_id", "call_index").is_unique().all()).item()
    for col in ("arrival_s", "admitted_s", "first_token_s", "done_s"):
        assert c[col].null_count() == 0, col
    assert (c["admitted_s"] >= c["arrival_s"]).all()
    assert (c["first_token_s"] > c["admitted_s"]).all()
    assert (c["done_s"] >= c["first_token_s"]).all()
    assert r.summary["done"] == c.height
    # a session's calls run one after another, each after its predecessor's answer
    prev = c.select(pl.col("done_s").shift(1).over("session_id"))["done_s"]
    assert ((c["arrival_s"] >= prev) | prev.is_null()).all()
    ts = r.timeseries
    assert ts["kv_usage_ratio"].max() <= 1.0 + 1e-12
    assert ts["kv_cached_ratio"].max() <= 1.0 + 1e-12


@pytest.fixture(scope="module")
def sample():
    return A.prepare(read_trace(SAMPLE))


@given(trace_objects(max_sessions=4, with_hashes=True), st.integers(1, 6))
@FAST
def test_infinite_hbm_hits_equal_the_traces_reused_prefix(tr, users):
    prep = A.prepare(tr)
    r = A.simulate_users(prep, INST, users, pool_blocks=10**7)
    _accounted(r)
    c = r.calls
    assert c["gpu_hit_tokens"].to_list() == c["reused_prefix_tokens"].to_list()
    assert c["recomputed_tokens"].sum() == 0


def test_infinite_hbm_on_the_weka_sample(sample):
    r = A.simulate_users(sample, INST, 3, pool_blocks=10**7)
    _accounted(r)
    c = r.calls
    assert c["gpu_hit_tokens"].sum() == c["reused_prefix_tokens"].sum() > 0
    assert (c["gpu_hit_tokens"] == c["reused_prefix_tokens"]).all()


def _stack_leading_hits(tr: Trace, pool_blocks: int) -> int:
    """Reused-prefix tokens the exact LRU stack (agentx.kv) finds in HBM as a leading run."""
    s = build_blocks(tr)
    bs = s.block_size_tokens
    full = dataclasses.replace(s, input_tokens=-(-s.input_tokens // bs) * bs)  # whole blocks
    out = outcome("lru", full, [pool_blocks * bs, 0, 0])
    total = 0
    k_prev, broken = -1, False
    for call, is_read, tier, read_tok in zip(
        out.call, out.is_read, out.tier, out.read_tokens, strict=True
    ):
        if call != k_prev:
            k_prev, broken = call, False
        if not is_read or broken:
            continue
        if tier == HBM:
            total += int(read_tok)
        else:
            broken = True
    return total


@given(trace_objects(max_sessions=4, with_hashes=True), st.floats(1.0, 4.0))
@FAST
def test_one_user_matches_the_exact_lru_stack(tr, scale):
    tr = _sequential(Trace(tr.calls.with_columns(output_tokens=pl.lit(1, pl.Int64)), tr.meta))
    prep = A.prepare(tr)
    bs = prep.block_size_tokens
    need = int((-(-(tr.calls["input_tokens"] + 1) // bs)).max())
    pool = int(need * scale)
    cfg = A.AgenticConfig(free_order="in-order")
    r = A.simulate_users(prep, INST, 1, cfg, pool_blocks=pool)
    assert int(r.calls["gpu_hit_tokens"].sum()) == _stack_leading_hits(tr, pool)


def test_weka_sample_one_user_tight_pool_near_the_stack(sample):
    """vLLM's tail-first freeing keeps chains' leading blocks: never fewer hits than plain LRU
    on the sample at these capacities (printed for the record)."""
    tr = _sequential(read_trace(SAMPLE))
    prep = A.prepare(tr)
    need = int((-(-(tr.calls["input_tokens"] + tr.calls["output_tokens"]) // 64)).max())
    for pool in (need, need * 3 // 2):
        tail = A.simulate_users(prep, INST, 1, pool_blocks=pool).calls["gpu_hit_tokens"].sum()
        plain = (
            A.simulate_users(
                prep, INST, 1, A.AgenticConfig(free_order="in-order"), pool_blocks=pool
            )
            .calls["gpu_hit_tokens"]
            .sum()
        )
        print(pool, tail, plain)
        assert tail >= plain > 0


@pytest.mark.parametrize("preemption", A.PREEMPTION)
@pytest.mark.parametrize("offload", A.OFFLOAD)
def test_tight_pool_conserves_calls_and_keeps_littles_law(sample, preemption, offload):
    cfg = A.AgenticConfig(preemption=preemption, offload=offload, max_think_s=30.0)
    need = int((-(-(sample.calls["input_tokens"] + sample.calls["output_tokens"]) // 64)).max())
    r = A.simulate_users(sample, INST, 5, cfg, pool_blocks=need + 64)
    _accounted(r)
    s = r.summary
    assert s["littles_law_rel_error"] < 1e-6
    assert s["kv_usage_max"] <= 1.0
    assert s["kv_usage_max"] > 0.9  # the pool really fills
    ts = r.timeseries
    assert ts["preemptions"].sum() == s["preemptions"]
    assert ts["output_tokens"].sum() == r.calls["output_tokens"].sum()
    assert ts["queried_tokens"].sum() == r.calls["input_tokens"].sum()
    if offload == "none":
        assert s["offload_hit_ratio"] == 0.0
    json.dumps(s, allow_nan=False)


def test_offload_turns_recompute_into_transfers(sample):
    need = int((-(-(sample.calls["input_tokens"] + sample.calls["output_tokens"]) // 64)).max())
    base = A.AgenticConfig(max_think_s=30.0)
    off = A.simulate_users(sample, INST, 5, base, pool_blocks=need + 64)
    on = A.simulate_users(
        sample, INST, 5, dataclasses.replace(base, offload="dram"), pool_blocks=need + 64
    )
    assert off.summary["recomputed_tokens"] > 0
    assert on.summary["offload_hit_ratio"] > 0
    assert on.summary["recomputed_tokens"] < off.summary["recomputed_tokens"]
    assert on.calls["kv_loaded_bytes"].sum() > 0
    hits = lambda r: r.summary["gpu_prefix_hit_ratio"] + r.summary["offload_hit_ratio"]  # noqa: E731
    assert hits(on) > hits(off)


def test_throughput_does_not_fall_with_users_while_the_pool_holds_them():
    """Eight copies of the sample's sessions; the pool holds every session at once."""
    tr = read_trace(SAMPLE)
    copies = [
        tr.calls.with_columns(pl.col("session_id") + f"-{k}", pl.col("t_start_s") + k)
        for k in range(8)
    ]
    prep = A.prepare(Trace(pl.concat(copies), tr.meta))
    cfg = A.AgenticConfig(max_think_s=30.0)
    runs = [A.simulate_users(prep, INST, n, cfg, pool_blocks=10**6) for n in (1, 2, 4, 8, 16)]
    tput = [r.summary["output_tok_s"] for r in runs]
    print(tput)
    assert all(r.summary["preemptions"] == 0 for r in runs)
    assert all(b >= a for a, b in zip(tput, tput[1:], strict=False))
    assert tput[-1] > 4 * tput[0]


def test_deterministic(sample):
    a = A.simulate_users(sample, INST, 3, pool_blocks=4000)
    b = A.simulate_users(sample, INST, 3, pool_blocks=4000)
    assert a.calls.equals(b.calls) and a.timeseries.equals(b.timeseries)


def test_users_must_be_positive(sample):
    with pytest.raises(UsageError, match=r"^--users must be positive integers, got 0$"):
        A.simulate_users(sample, INST, 0)


def test_pool_too_small_names_the_call_and_the_shortfall(sample):
    with pytest.raises(CapacityError) as e:
        A.simulate_users(sample, INST, 1, pool_blocks=100)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("call trace_")
    assert "GB of KV" in msg and "short by" in msg and "GB" in msg.split("short by")[1]


def test_trace_without_hashes_falls_back_to_token_counts():
    tr = read_trace(SAMPLE)
    bare = Trace(tr.calls.with_columns(block_hashes=pl.lit(None, tr.calls["block_hashes"].dtype)), tr.meta)  # fmt: skip
    prep = A.prepare(bare)
    assert "no block hashes" in prep.note and "token counts" in prep.note
    r = A.simulate_users(prep, INST, 2, pool_blocks=10**7)
    assert r.calls["gpu_hit_tokens"].sum() > 0


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_cli_sweep_json_and_one_run(tmp_path):
    out = tmp_path / "run"
    r = _cli(
        "simulate", SAMPLE, "--hw", "b200", "--model", "deepseek-v3", "--gpus", "8",
        "--tp", "8", "--users", "1,2", "--max-think-s", "30", "--json", "-q", "-o", out,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["users"] for x in rows] == [1, 2]
    for key in (
        "users", "kv_usage_p50", "gpu_prefix_hit_ratio", "offload_hit_ratio", "ttft_p50_s",
        "tpot_p50_s", "output_tok_s", "total_tok_s", "preemptions",
    ):  # fmt: skip
        assert key in rows[0]
    again = tmp_path / "again"
    r2 = _cli(
        "simulate", SAMPLE, "--hw", "b200", "--model", "deepseek-v3", "--gpus", "8",
        "--tp", "8", "--users", "1,2", "--max-think-s", "30", "--json", "-q", "-o", again,
    )  # fmt: skip
    assert r2.output == r.output
    for name in ("agentic_calls", "agentic_timeseries", "agentic_sweep"):
        assert (out / f"{name}.parquet").read_bytes() == (again / f"{name}.parquet").read_bytes()
    sweep = pl.read_parquet(out / "agentic_sweep.parquet")
    assert sweep["users"].to_list() == [1, 2]
    calls = pl.read_parquet(out / "agentic_calls.parquet")
    assert calls.height == 2 * read_trace(SAMPLE).calls.height


def test_cli_bad_users(tmp_path):
    r = CliRunner().invoke(
        cli, ["simulate", str(SAMPLE), "--hw", "b200", "--users", "4,0", "-o", str(tmp_path / "x")]
    )
    assert r.exit_code != 0
    assert r.output.strip().splitlines()[-1] == "Error: --users must be positive integers, got '0'"


def test_charts_of_a_sweep(sample):
    from agentx.analysis import charts

    cfg = A.AgenticConfig(max_think_s=30.0)
    parts = []
    for off in ("none", "dram"):
        calls, ts, table, _ = A.sweep(sample, INST, [1, 3], dataclasses.replace(cfg, offload=off))
        parts.append(table.with_columns(offload=pl.lit(off)))
    sweep = pl.concat(parts)
    for chart in (
        charts.kv_usage_over_time(ts),
        charts.hit_ratio_vs_users(sweep),
        charts.throughput_ttft_vs_users(sweep),
    ):
        spec = chart.to_dict()
        assert spec["data"] or spec.get("datasets")
    assert charts.hit_ratio_vs_users(sweep).to_dict()["encoding"]["color"]["field"] == "offload"


def test_cli_pool_too_small_is_one_line(tmp_path):
    r = CliRunner().invoke(
        cli,
        [
            "simulate", str(SAMPLE), "--hw", "b200", "--model", "deepseek-v3", "--gpus", "4",
            "--tp", "4", "--weight-precision", "fp4", "--gpu-memory-utilization", "0.53",
            "--users", "2", "-q", "-o", str(tmp_path / "x"),
        ],
    )  # fmt: skip
    assert r.exit_code == 1
    assert r.output.strip() == (
        "Error: call trace_0707#22 needs 6.3 GB of KV (157,172 + 32 tokens) but the HBM pool "
        "of 4 × b200 (tp 4, ep 4, fp4) holds 3.3 GB: short by 3.0 GB"
    )


def test_timeseries_hit_ratios(sample):
    r = A.simulate_users(sample, INST, 2, A.AgenticConfig(max_think_s=30.0))
    ts = r.timeseries.filter(pl.col("queried_tokens") > 0)
    assert ts.height > 0
    ratio = ts["gpu_hit_tokens"] / ts["queried_tokens"]
    assert (ts["gpu_prefix_hit_ratio"] - ratio).abs().max() < 1e-12
    assert r.timeseries.filter(pl.col("queried_tokens") == 0)["gpu_prefix_hit_ratio"].null_count() == r.timeseries.filter(pl.col("queried_tokens") == 0).height  # fmt: skip


def test_one_call_is_priced_as_agentx_serving_prices_its_iterations():
    """The simulator and the per-iteration model (agentx.serving.iteration) agree: one call
    alone takes its prefill chunks and then one decode pass per token (tables interpolate)."""
    from agentx.serving.iteration import iteration_time_s

    n_in, n_out, budget = 10_000, 6, 4096
    df = pl.DataFrame(
        {
            "session_id": ["s"], "call_index": [0], "t_start_s": [0.0],
            "input_tokens": [n_in], "reused_prefix_tokens": [0], "new_tokens": [n_in],
            "output_tokens": [n_out], "think_time_s": [None], "agent_id": [None],
            "is_compaction": [False], "shared_prefix_tokens": [0], "block_size_tokens": [None],
            "block_hashes": [None], "trigger": ["user"], "model": [None], "source": ["test"],
        }
    )  # fmt: skip
    from agentx.traces.schema import conform

    tr = Trace(conform(df), {})
    r = A.simulate_users(A.prepare(tr), INST, 1, A.AgenticConfig(token_budget=budget))
    c = r.calls.row(0, named=True)
    chunks = [(0, 4096), (4096, 4096), (8192, n_in - 8192)]
    ttft = sum(float(iteration_time_s(CFG, 0, 0, n, p)) for p, n in chunks)
    steps = [float(iteration_time_s(CFG, 1, n_in + k)) for k in range(1, n_out)]
    assert c["ttft_s"] == pytest.approx(ttft, rel=0.03)
    assert c["done_s"] - c["first_token_s"] == pytest.approx(sum(steps), rel=0.03)


def test_shared_system_and_tool_prefix_is_stored_once():
    """Two sessions whose prompts start with the same 3,200-token system + tool prefix: the
    pool caches its 50 blocks once (100 + 50 blocks, not 200)."""
    df = pl.DataFrame(
        {
            "session_id": ["a", "b"], "call_index": [0, 0], "t_start_s": [0.0, 1.0],
            "input_tokens": [6400, 6400], "reused_prefix_tokens": [0, 0],
            "new_tokens": [6400, 6400], "output_tokens": [1, 1], "think_time_s": [None, None],
            "agent_id": [None, None], "is_compaction": [False, False],
            "shared_prefix_tokens": [3200, 3200], "block_size_tokens": [None, None],
            "block_hashes": [None, None], "trigger": ["user", "user"], "model": [None, None],
            "source": ["test", "test"],
        }
    )  # fmt: skip
    from agentx.traces.schema import conform

    prep = A.prepare(Trace(conform(df), {}))
    r = A.simulate_users(prep, INST, 2, pool_blocks=1000)
    assert r.timeseries["kv_cached_ratio"][-1] * 1000 == pytest.approx(150)


def test_cli_open_loop_options_are_refused_with_users(tmp_path):
    r = CliRunner().invoke(
        cli,
        ["simulate", str(SAMPLE), "--hw", "b200", "--users", "2", "--policy", "pi",
         "-o", str(tmp_path / "x")],
    )  # fmt: skip
    assert r.exit_code == 2
    assert r.output.strip() == "Error: --policy applies to the open-loop mode, not to --users"


@given(
    trace_objects(max_sessions=5, with_hashes=True),
    st.integers(1, 6),
    st.floats(1.0, 3.0),
    st.sampled_from(A.OFFLOAD),
    st.sampled_from(A.PREEMPTION),
)
@FAST
def test_tight_pools_never_lose_calls_or_overfill(tr, users, scale, offload, preemption):
    prep = A.prepare(tr)
    bs = prep.block_size_tokens
    c = tr.calls
    need = int((-(-(c["input_tokens"] + c["output_tokens"]) // bs)).max())
    cfg = A.AgenticConfig(offload=offload, preemption=preemption, max_think_s=5.0)
    r = A.simulate_users(prep, INST, users, cfg, pool_blocks=max(1, int(need * scale)))
    _accounted(r)
    assert r.summary["littles_law_rel_error"] < 1e-6
    assert (r.calls["gpu_hit_tokens"] <= r.calls["reused_prefix_tokens"]).all()
    hits = r.calls["gpu_hit_tokens"] + r.calls["dram_hit_tokens"] + r.calls["ssd_hit_tokens"]
    assert (hits <= r.calls["reused_prefix_tokens"]).all()


def test_open_loop_mode_honours_the_layout_flags(tmp_path):
    """The layout options are replay's (cli/_common.layout_options) in both modes."""
    caps = {}
    for prec in ("fp8", "fp4"):
        r = _cli(
            "simulate", SAMPLE, "--hw", "b200", "--model", "deepseek-v3", "--gpus", "8",
            "--tp", "8", "--weight-precision", prec, "--pools", "aggregated", "--json", "-q",
            "-o", tmp_path / prec,
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        caps[prec] = json.loads(r.output)["kv_capacity_tokens"]
    assert caps["fp4"] > 1.3 * caps["fp8"]  # FP4 weights leave more HBM for KV
