"""The frontier the planner draws: output tokens/s per GPU against tokens/s per user over
decode batches for each layout tried (``frontier_points``, the chart public benchmarks publish),
and per system the points no other beats on both (``pareto``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.planner.evaluate import BATCHES


def frontier_points(row: dict) -> pl.DataFrame:
    """Output tokens/s per GPU against tokens/s per user over decode batches, for one layout
    (the same steady state as ``evaluate``: prefill interleaving included; disaggregated, the
    prefill GPUs the decode rate needs are counted per GPU)."""
    from agentx.planner.serving import disaggregated_points, operating_points
    from agentx.serving.steady import kv_capacity_sequences

    cfg, shape = row["_cfg"], row["_shape"]
    b = BATCHES[kv_capacity_sequences(cfg, shape.decode_context_tokens) >= BATCHES]
    pcfg = row.get("_prefill_cfg")
    if pcfg is None:
        pts = operating_points(cfg, shape, b)
        per_gpu = pts["output_tok_s"] / cfg.gpus
    else:
        pts = disaggregated_points(pcfg, cfg, shape, b)
        prefill_gpus = pts["calls_per_s"] / pts["prefill_calls_per_s"] * pcfg.gpus
        per_gpu = pts["output_tok_s"] / (cfg.gpus + prefill_gpus)
    return pl.DataFrame(
        {
            "hw": cfg.system.name,
            "layout": row["layout"],
            "decode_batch": b.astype(np.int64),
            "tok_s_per_user": 1.0 / pts["tpot_s"],
            "output_tok_s_per_gpu": per_gpu,
        }
    )


def pareto(points: pl.DataFrame) -> pl.DataFrame:
    """Per system, the points no other point beats on both tokens/s per user and per GPU."""
    return (
        points.sort(
            ["hw", "tok_s_per_user", "output_tok_s_per_gpu"], descending=[False, True, True]
        )
        .with_columns(_best=pl.col("output_tok_s_per_gpu").cum_max().over("hw"))
        .filter(pl.col("output_tok_s_per_gpu") >= pl.col("_best"))
        .unique(["hw", "tok_s_per_user"], keep="first", maintain_order=True)
        .drop("_best")
        .sort("hw", "tok_s_per_user")
    )
