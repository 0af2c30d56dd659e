"""The frames and summary of an agentic simulation, for ``agentx.dynamics.agentic``.

Owns the per-second and summary column names (``TS_COLUMNS``, ``SUMMARY_COLUMNS``), the
per-call frame built from the kernel's result rows (``_calls_frame``: times, hits, recomputes,
TTFT and TPOT) and the run's summary (``_summary``: KV usage, hit ratios, latency quantiles,
throughput, and Little's law checked against the kernel's in-system counter).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.dynamics import agentic_kernel as K
from agentx.dynamics.agentic_setup import Instance

TS_COLUMNS = (
    "t_s",
    "kv_usage_ratio",
    "kv_cached_ratio",
    "running_seqs",
    "waiting_seqs",
    "in_system_mean",
    "gpu_hit_tokens",
    "offload_hit_tokens",
    "queried_tokens",
    "preemptions",
    "output_tokens",
    "prefill_tokens",
)
SUMMARY_COLUMNS = (
    "users",
    "calls",
    "done",
    "kv_pool_tokens",
    "kv_usage_p50",
    "kv_usage_p90",
    "kv_usage_max",
    "gpu_prefix_hit_ratio",
    "offload_hit_ratio",
    "recomputed_tokens",
    "preemptions",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "output_tok_s",
    "total_tok_s",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "makespan_s",
    "littles_law_rel_error",
)


def _calls_frame(prep, res, preempt, users) -> pl.DataFrame:
    c = prep.calls
    f = pl.DataFrame(
        {
            "users": np.full(c.height, users, np.int64),
            "session_id": c["session_id"],
            "call_index": c["call_index"],
            "arrival_s": res[:, K.C_ARR],
            "admitted_s": res[:, K.C_ADM],
            "first_token_s": res[:, K.C_FIRST],
            "done_s": res[:, K.C_DONE],
            "input_tokens": c["input_tokens"],
            "reused_prefix_tokens": c["reused_prefix_tokens"],
            "output_tokens": c["output_tokens"],
            "gpu_hit_tokens": res[:, K.C_HIT_G].astype(np.int64),
            "dram_hit_tokens": res[:, K.C_HIT_D].astype(np.int64),
            "ssd_hit_tokens": res[:, K.C_HIT_S].astype(np.int64),
            "prefill_tokens": res[:, K.C_COMPUTED].astype(np.int64),
            "recomputed_tokens": np.maximum(
                # a fully cached prompt still computes its last token (vLLM): not a recompute
                res[:, K.C_COMPUTED] - np.maximum(c["new_tokens"].to_numpy(), 1), 0
            ).astype(np.int64),
            "preemptions": preempt.astype(np.int64),
            "kv_loaded_bytes": res[:, K.C_LOADED_B],
        }
    ).with_columns(pl.col(n).fill_nan(None) for n in ("arrival_s", "admitted_s", "first_token_s", "done_s"))  # fmt: skip
    return f.with_columns(
        ttft_s=pl.col("first_token_s") - pl.col("arrival_s"),
        tpot_s=pl.when(pl.col("output_tokens") > 1).then(
            (pl.col("done_s") - pl.col("first_token_s")) / (pl.col("output_tokens") - 1)
        ),
    )


def _summary(f, ts, inst: Instance, users, pool_tokens, stats, sample_s: float) -> dict:
    done = f.filter(pl.col("done_s").is_not_null())
    span = max(float(stats[2]), 1e-9)
    q = lambda c, x: None if done[c].drop_nulls().is_empty() else float(done[c].quantile(x))  # noqa: E731
    queried = max(int(done["input_tokens"].sum()), 1)
    out_tok = int(done["output_tokens"].sum())
    total_tok = out_tok + int(done["input_tokens"].sum())
    arrived = f.filter(pl.col("arrival_s").is_not_null())
    stay = (arrived["done_s"].fill_null(span) - arrived["arrival_s"]).sum()
    lam_w = float(stay) / span  # λ·W over the run
    # L from the kernel's own in-system counter, integrated over every interval
    l_sampled = float(ts["in_system_mean"].sum()) * sample_s / span
    kv = ts["kv_usage_ratio"]
    return {
        "users": users,
        "calls": f.height,
        "done": done.height,
        "kv_pool_tokens": float(pool_tokens),
        "kv_usage_p50": float(kv.quantile(0.5)) if kv.len() else 0.0,
        "kv_usage_p90": float(kv.quantile(0.9)) if kv.len() else 0.0,
        "kv_usage_max": float(kv.max()) if kv.len() else 0.0,
        "gpu_prefix_hit_ratio": float(done["gpu_hit_tokens"].sum()) / queried,
        "offload_hit_ratio": float(done["dram_hit_tokens"].sum() + done["ssd_hit_tokens"].sum())
        / queried,
        "recomputed_tokens": int(f["recomputed_tokens"].sum()),
        "preemptions": int(f["preemptions"].sum()),
        "ttft_p50_s": q("ttft_s", 0.5),
        "ttft_p90_s": q("ttft_s", 0.9),
        "ttft_p99_s": q("ttft_s", 0.99),
        "tpot_p50_s": q("tpot_s", 0.5),
        "tpot_p90_s": q("tpot_s", 0.9),
        "tpot_p99_s": q("tpot_s", 0.99),
        "output_tok_s": out_tok / span,
        "total_tok_s": total_tok / span,
        "output_tok_s_per_gpu": out_tok / span / inst.gpus,
        "total_tok_s_per_gpu": total_tok / span / inst.gpus,
        "makespan_s": span,
        "littles_law_rel_error": abs(l_sampled - lam_w) / max(lam_w, 1e-12),
    }
