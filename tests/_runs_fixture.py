"""Realistic run directories for the analysis tests, built with the real results store.

The frames follow the producers' column contract (replay calls with per-stage time/energy and
KV tier columns, stages, footprint, kv_curve, sweep, simulate time series). Figures are made
from a seeded trace with simple per-token costs, so every aggregate is known in polars.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl

from agentx.replay.replay import TRACE_COLUMNS
from agentx.runs import write_run
from agentx.traces import schema as S
from agentx.traces.io import Trace, trace_metadata, write_trace

STAGES = ("prefill", "midfill", "decode_attention", "decode_experts")
TIERS = ("hbm", "dram", "ssd")
LINKS = ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd")
SYSTEMS = {"b200": (1.0, 180e9), "gb200": (0.8, 186e9), "b300": (0.9, 288e9)}


def make_trace(n_sessions: int = 6, seed: int = 7) -> pl.DataFrame:
    """Sessions whose context grows call by call and is compacted once it passes 60k tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    t0 = 0.0
    for s in range(n_sessions):
        n = int(rng.integers(8, 20))
        ctx, t = 12_000, t0
        for i in range(n):
            compact = ctx > 60_000
            if compact:
                ctx = 12_000 + int(rng.integers(500, 2_000))
            new = ctx if i == 0 or compact else int(rng.integers(200, 4_000))
            inp = ctx if i == 0 or compact else ctx + new
            reused = 0 if i == 0 else (10_000 if compact else inp - new)
            think = None if i == 0 else float(rng.exponential(5.0))
            t += think or 0.0
            rows.append(
                {
                    "session_id": f"s{s:02d}",
                    "call_index": i,
                    "agent_id": "sub1" if i % 7 == 6 else None,
                    "t_start_s": t,
                    "input_tokens": inp,
                    "reused_prefix_tokens": reused,
                    "new_tokens": inp - reused,
                    "output_tokens": int(rng.integers(50, 900)),
                    "is_compaction": compact,
                    "shared_prefix_tokens": 10_000,
                    "block_size_tokens": None,
                    "block_hashes": None,
                    "trigger": "compaction" if compact else ("user" if i == 0 else "tool_result"),
                    "think_time_s": think,
                    "model": "claude",
                    "source": "synth",
                }
            )
            ctx = inp + rows[-1]["output_tokens"]
        t0 += float(rng.exponential(20.0))
    return S.conform(pl.DataFrame(rows, schema_overrides=S.SCHEMA))


def write_trace_file(path: Path, df: pl.DataFrame | None = None) -> Path:
    df = make_trace() if df is None else df
    write_trace(Trace(df, trace_metadata("synth", block_size_tokens=None, hash_scope="none")), path)
    return path


def replay_calls(trace: pl.DataFrame, speed: float) -> pl.DataFrame:
    """Trace columns plus per-stage time/energy/bytes and KV tier columns, scaled by ``speed``."""
    fill = pl.when(pl.col("reused_prefix_tokens") == 0).then(pl.col("new_tokens")).otherwise(0)
    mid = pl.col("new_tokens") - fill
    per_stage = {
        "prefill": fill * 1e-5,
        "midfill": mid * 1.2e-5,
        "decode_attention": pl.col("output_tokens") * pl.col("input_tokens") * 1e-9,
        "decode_experts": pl.col("output_tokens") * 2e-3,
    }
    cols = []
    for st, expr in per_stage.items():
        cols += [
            (expr * speed).alias(f"{st}_time_s"),
            (expr * speed * 900.0).alias(f"{st}_energy_j"),
            (expr * 1e15).alias(f"{st}_flops"),
            (expr * 3e12).alias(f"{st}_hbm_bytes"),
            (expr * 1e9).alias(f"{st}_comm_bytes"),
        ]
    # like agentx.replay: only the trace's keys and token counts travel into the calls table
    keys = TRACE_COLUMNS
    df = trace.with_columns(cols).select(*keys, *[c.meta.output_name() for c in cols])
    e = [f"{s}_energy_j" for s in STAGES]
    hbm = (pl.col("reused_prefix_tokens") * 0.7).cast(pl.Int64)
    dram = (pl.col("reused_prefix_tokens") * 0.2).cast(pl.Int64)
    ssd = pl.col("reused_prefix_tokens") - hbm - dram
    return df.with_columns(
        ttft_s=pl.col("prefill_time_s") + pl.col("midfill_time_s"),
        decode_latency_s=pl.col("decode_attention_time_s") + pl.col("decode_experts_time_s"),
        total_energy_j=pl.sum_horizontal(e),
        kv_hbm_hit_tokens=hbm,
        kv_dram_hit_tokens=dram,
        kv_ssd_hit_tokens=ssd,
        kv_recompute_tokens=pl.col("new_tokens"),
        kv_ssd_to_dram_bytes=ssd * 70_000,
        kv_dram_to_hbm_bytes=(dram + ssd) * 70_000,
        kv_hbm_to_dram_bytes=pl.col("new_tokens") * 70_000,
        kv_dram_to_ssd_bytes=pl.col("new_tokens") * 35_000,
    )


def stages_of(calls: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for st in STAGES:
        rows.append(
            {
                "stage": st,
                "time_s": calls[f"{st}_time_s"].sum(),
                "energy_j": calls[f"{st}_energy_j"].sum(),
                "flops": calls[f"{st}_flops"].sum(),
                "hbm_bytes": calls[f"{st}_hbm_bytes"].sum(),
                "comm_bytes": calls[f"{st}_comm_bytes"].sum(),
            }
        )
    df = pl.DataFrame(rows)
    return df.with_columns(
        arithmetic_intensity=pl.col("flops") / pl.col("hbm_bytes"),
        time_share=pl.col("time_s") / pl.col("time_s").sum(),
        energy_share=pl.col("energy_j") / pl.col("energy_j").sum(),
    )


def footprint(capacity: float, kv_bytes: float) -> pl.DataFrame:
    """The replay footprint table: slices, then total, capacity and free as rows."""
    parts = {
        "weights_shard": 38e9,
        "weights_replicated": 2e9,
        "kv_resident": kv_bytes,
        "activations": 4e9,
    }
    total = sum(parts.values())
    rows = {**parts, "total": total, "hbm_capacity": capacity, "free": capacity - total}
    return pl.DataFrame({"component": list(rows), "bytes_per_gpu": list(rows.values())})


def kv_curve() -> pl.DataFrame:
    caps = [0.0, 1e9, 1e10, 1e11, 1e12]  # kv-curve's grid starts at 0
    rows = []
    for tier, scale in (("hbm", 1.0), ("dram", 0.8), ("ssd", 0.5)):
        for c in caps:
            h = scale * (1 - 1 / (1 + c / 1e10))
            rows.append(
                {
                    "tier": tier,
                    "capacity_bytes": c,
                    "hit_ratio": h,
                    "hit_blocks": int(h * 1000),
                    "ssd_to_dram_bytes": c * 0.01,
                }
            )
    return pl.DataFrame(rows)


def sweep(system: str, speed: float) -> pl.DataFrame:
    """Like agentx sweep: decode as one stage; longer contexts give dominated points."""
    rows = []
    for stage in ("prefill", "midfill", "decode"):
        for gpus in (16, 64):
            for b, ctx in itertools.product((1, 8, 64, 256), (100_000, 400_000)):
                step = speed * (0.01 + b * 1e-4) * ctx / 100_000
                rows.append(
                    {
                        "system": system,
                        "gpus": gpus,
                        "model": "kimi-k3",
                        "stage": stage,
                        "batch_size": b,
                        "chunk_tokens": 2048,
                        "context_tokens": ctx,
                        "per_user_tokens_per_s": 1 / step,
                        "tokens_per_s_per_gpu": b / step / gpus,
                        "ttft_s": step * 4,
                        "step_time_s": step,
                        "energy_per_token_j": speed * 0.5 / b**0.5,
                        "hbm_peak_bytes_per_gpu": 30e9 + b * 1e8,
                        "fits": b < 256,
                    }
                )
    return pl.DataFrame(rows)


def sim_timeseries() -> pl.DataFrame:
    t = np.arange(0, 600, 0.5)
    return pl.DataFrame(
        {
            "t_s": t,
            "fill_queue_len": (np.sin(t / 5) * 5 + 5).round().astype(np.int64),
            "decode_batch_size": (np.cos(t / 7) * 20 + 30).round().astype(np.int64),
            "utilisation": np.clip(0.5 + 0.4 * np.sin(t / 9), 0, 1),
            "power_w": 700 + 300 * np.sin(t / 9),
        }
    )


def make_runs(root: Path, trace_path: Path) -> dict[str, Path]:
    """Three replay runs (one per system), a kv-curve, two sweeps and a simulation under ``root``."""
    trace = pl.read_parquet(trace_path)
    out = {}
    for system, (speed, cap) in SYSTEMS.items():
        calls = replay_calls(trace, speed)
        st = stages_of(calls)
        summary = {
            "stages": {
                r["stage"]: {"energy_j": r["energy_j"], "time_s": r["time_s"]}
                for r in st.iter_rows(named=True)
            },
            "hbm_peak_bytes_per_gpu": 40e9 + 20e9 * speed + 4e9,
            "j_per_output_token": calls["total_energy_j"].sum() / calls["output_tokens"].sum(),
            # as agentx.replay writes it: totals of the per-call tier columns
            "kv_tiers": {
                "input_tokens": calls["input_tokens"].sum(),
                "hit_ratio": sum(calls[f"kv_{t}_hit_tokens"].sum() for t in TIERS)
                / calls["reused_prefix_tokens"].sum(),
                "hits": {t: {"tokens": calls[f"kv_{t}_hit_tokens"].sum()} for t in TIERS},
                "recompute": {"tokens": calls["kv_recompute_tokens"].sum()},
                "bytes": {link: calls[f"kv_{link}_bytes"].sum() for link in LINKS},
                # as agentx.kv summarises a replay: whole-system capacities, reused tokens and
                # each link's busy time (bytes over a 50 GB/s link here)
                "reused_tokens": calls["reused_prefix_tokens"].sum(),
                "capacities": {
                    "hbm_bytes": 16 * 40e9,
                    "dram_bytes": 16 * 480e9,
                    "ssd_bytes": 16 * 7.68e12,
                },
                "link_time_s": {link: calls[f"kv_{link}_bytes"].sum() / 50e9 for link in LINKS},
            },
        }
        out[f"replay-{system}"] = write_run(
            root / f"replay-{system}",
            "replay",
            {"calls": calls, "stages": st, "footprint": footprint(cap, 20e9 * speed)},
            summary=summary,
            inputs={"trace": trace_path},
            config={"hw": system, "model": "kimi-k3", "gpus": 16},
        )
    out["kv"] = write_run(
        root / "kv", "kv-curve", {"kv_curve": kv_curve()}, inputs={"trace": trace_path}, config={}
    )
    for system in ("b200", "gb200"):
        out[f"sweep-{system}"] = write_run(
            root / f"sweep-{system}",
            "sweep",
            {"sweep": sweep(system, SYSTEMS[system][0])},
            summary={"verdict": {"seed19_gb200_leads_decode_most_of_curve": True}},
            config={"hw": system},
        )
    out["sim"] = write_run(
        root / "sim",
        "simulate",
        {"sim_timeseries": sim_timeseries()},
        summary={"mean_power_w": 700.0, "ttft_s_p50": 0.05, "energy_per_output_token_j": 2.5},
        config={"hw": "gb200", "gpus": 64},
    )
    return out


AGENTIC_ARGS = ("--hw", "b200", "--model", "deepseek-v3", "--gpus", "8", "--tp", "8",
                "--users", "1,2", "--max-think-s", "30")  # fmt: skip


def make_agentic_runs(root: Path, trace_path: Path) -> dict[str, Path]:
    """Two real ``agentx simulate --users`` runs on ``trace_path``, without and with DRAM
    offload (small: N = 1, 2 and think time capped at 30 s)."""
    from click.testing import CliRunner

    from agentx.cli import cli

    out = {}
    for offload in ("none", "dram"):
        out[offload] = root / f"ag-{offload}"
        args = ["simulate", str(trace_path), *AGENTIC_ARGS, "--offload", offload, "-q"]
        res = CliRunner().invoke(cli, [*args, "-o", str(out[offload])])
        assert res.exit_code == 0, res.output
    return out
